"""Copies and graph launches (``analyzers.copies``' figures per step) and achieved rates per op family
(``rnnprof roofline``'s), A against B."""

from __future__ import annotations

from rnnprof.analyzers import copies as copy_counts
from rnnprof.analyzers.comm_result import CommReport
from rnnprof.analyzers.diff.device_time import joined_reasons, no_events
from rnnprof.analyzers.diff.result import (CopiesSection, CopyKindChange, GraphLaunchChange, RateChange, RatesSection,
                                           Side)


def _copies_of(side: Side, report: CommReport | None) -> copy_counts.CopyReport | None:
    if report is not None and report.copies is not None:
        return report.copies
    return copy_counts.count_copies(side.events) if side.events is not None else None



def diff_copies(a: Side, b: Side, ca: CommReport | None = None, cb: CommReport | None = None) -> CopiesSection:
    """Copies by kind and graph launches per step on both sides (``analyzers.copies``)."""
    ra, rb = _copies_of(a, ca), _copies_of(b, cb)
    if ra is None or rb is None or not (ra.available and rb.available):
        reasons = [no_events(side) if r is None else r.reason for side, r in ((a, ra), (b, rb))
                   if r is None or not r.available]
        return CopiesSection(available=False, reason=joined_reasons(*reasons), a=ra, b=rb)
    kinds = []
    for kind in copy_counts.COPY_KINDS:
        if kind not in ra.copies and kind not in rb.copies:
            continue
        kinds.append(CopyKindChange(kind, ra.per_step_figure("copies", kind), rb.per_step_figure("copies", kind),
                                    ra.per_step_figure("copies_us", kind), rb.per_step_figure("copies_us", kind),
                                    ra.per_step_figure("copies_bytes", kind), rb.per_step_figure("copies_bytes", kind)))
    ga, gb = ra.graphs, rb.graphs
    graphs = GraphLaunchChange(ga.launches / ra.n_steps, gb.launches / rb.n_steps, ga.kernels / ra.n_steps,
                               gb.kernels / rb.n_steps, ga.kernel_us / ra.n_steps, gb.kernel_us / rb.n_steps,
                               ga.kernel_share, gb.kernel_share,
                               tuple(sorted(set(ra.graph_launch_names) | set(rb.graph_launch_names))))
    return CopiesSection(available=True, kinds=tuple(kinds), graphs=graphs, a=ra, b=rb)



def diff_rates(a: Side, b: Side) -> RatesSection:
    """Achieved TFLOP/s and TB/s per op family, A against B, where each side is one process with shapes."""
    ra, rb = a.roofline, b.roofline
    if ra is None or rb is None:
        reasons = [f"{side.label}: {side.roofline_reason}" for side, r in ((a, ra), (b, rb)) if r is None]
        return RatesSection(available=False, reason="; ".join(reasons))
    rows = []
    for family in dict.fromkeys([*ra.families, *rb.families]):
        fa, fb = ra.families.get(family), rb.families.get(family)
        rows.append(RateChange(family, fa.rates.tflops_per_s if fa else None, fb.rates.tflops_per_s if fb else None,
                               fa.rates.tb_per_s if fa else None, fb.rates.tb_per_s if fb else None,
                               fa.rates.kernel_us if fa else 0.0, fb.rates.kernel_us if fb else 0.0,
                               fa.rates.flops if fa else 0.0, fb.rates.flops if fb else 0.0,
                               max(len(ra.steps), 1), max(len(rb.steps), 1)))
    rows.sort(key=lambda r: -(r.kernel_us_a + r.kernel_us_b))
    return RatesSection(available=True, rows=tuple(rows))

