"""What changed from one input (A) to another (B): device time, ops and kernels, graphs, configuration.

Every figure comes from the analysis that defines it, run once on each side: time per device or rank from
``comm.analyze_comm`` (mean per step); ops and kernels as ``opcount`` counts them (``count-ops B --vs A``);
graph op counts from ``opcount.count_graph`` and moved ops from the placements; achieved rates from
``roofline.analyze_roofline``; configuration from a run's manifest or what a trace records.
``Δ = B − A`` and ``ratio = B ÷ A`` throughout. See docs/commands/diff.md. Modules: ``result`` (the sides and
what is found), ``device_time``, ``ops`` (ops, kernels and graphs), ``config``, ``copies_and_rates``.
"""

from __future__ import annotations

from rnnprof.analyzers.diff.config import diff_config, settings
from rnnprof.analyzers.diff.copies_and_rates import diff_copies, diff_rates
from rnnprof.analyzers.diff.device_time import comm_of, diff_time, headline, pair_devices
from rnnprof.analyzers.diff.ops import diff_graphs, diff_ops
from rnnprof.analyzers.diff.result import (DEFINITIONS, STEP_BASES, ConfigChange, ConfigSection, CopiesSection,
                                           CopyKindChange, DeviceFigure, DiffReport, GraphLaunchChange, GraphOpChange,
                                           GraphSection, Headline, IncompatibleSides, MovedOp, OpChange, OpsSection,
                                           PairedFigure, RateChange, RatesSection, Side, StepTime, TimeSection)


def diff(a: Side, b: Side) -> DiffReport:
    """Compare ``b`` with ``a``; raises ``IncompatibleSides`` when they share neither events nor a graph."""
    if not ((a.events is not None and b.events is not None) or (a.has_graph and b.has_graph)):
        raise IncompatibleSides(f"A is a {a.kind} and B is a {b.kind}: they share neither trace events nor a graph")
    ca, cb = comm_of(a), comm_of(b)
    return DiffReport(a=a.label, b=b.label, kind_a=a.kind, kind_b=b.kind, time=diff_time(a, b, ca, cb),
                      ops=diff_ops(a, b), graphs=diff_graphs(a, b), config=diff_config(a, b),
                      copies=diff_copies(a, b, ca[0], cb[0]), rates=diff_rates(a, b))



__all__ = ["ConfigChange", "ConfigSection", "CopiesSection", "CopyKindChange", "DEFINITIONS", "DeviceFigure",
           "DiffReport", "GraphLaunchChange", "GraphOpChange", "GraphSection", "Headline", "IncompatibleSides", "MovedOp",
           "OpChange", "OpsSection", "PairedFigure", "RateChange", "RatesSection", "STEP_BASES", "Side", "StepTime",
           "TimeSection", "diff", "diff_config", "diff_copies", "diff_graphs", "diff_ops", "diff_rates", "diff_time",
           "headline", "pair_devices", "settings"]
