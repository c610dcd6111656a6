"""``rnnprof roofline``'s result: FLOPs, bytes and achieved rates per operator, family and step, per process."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

from rnnprof.analyzers.roofline import RooflineReport
from rnnprof.reports import charts
from rnnprof.reports.html import Page
from rnnprof.reports.results.base import Result, flat
from rnnprof.reports.roofline import to_document
from rnnprof.reports.units import fmt_ms


@dataclass(frozen=True, repr=False)
class RooflineResult(Result):
    """``reports``: ``(worker, RooflineReport)`` per process; ``left_out``: the events the loaders left out;
    ``reason``: why there is no roofline ("" when there is)."""

    reports: tuple[tuple[str, RooflineReport], ...] = ()
    left_out: dict = field(default_factory=dict)
    reason: str = ""

    COMMAND: ClassVar[str] = "roofline"

    @property
    def available(self) -> bool:
        return not self.reason

    def document(self) -> dict:
        if not self.available:
            return {"available": False, "reason": self.reason}
        return {**to_document(list(self.reports)), "left_out": self.left_out}

    def tables(self) -> dict[str, list[dict]]:
        """``steps`` (per process and step: ``wall_us``, ``flops``, ``tflops_per_s``, ``mfu``), ``families`` and
        ``ops`` (achieved rates: ``kernel_us``, ``tflops_per_s``, ``tb_per_s``), ``collectives``."""
        steps = [{"worker": w, **dataclasses.asdict(s)} for w, r in self.reports for s in r.steps]
        families = [{"worker": w, "family": name, **flat(row.as_dict())} for w, r in self.reports
                    for name, row in r.families.items()]
        ops = [{"worker": w, **{k: v for k, v in op.as_dict().items() if not isinstance(v, (list, dict))}}
               for w, r in self.reports for op in r.ops]
        collectives = [c.as_dict() for _, r in self.reports for c in r.collectives]
        return {"steps": steps, "families": families, "ops": ops, "collectives": collectives}

    def html(self, page: Page) -> None:
        if not self.available:
            page.paragraph(f"roofline not available: {self.reason}", "missing")
            return
        page.table(["process", "step", "wall ms", "GFLOP", "TFLOP/s", "MFU %"],
                   [[w or "-", s.step, fmt_ms(s.wall_us), f"{s.flops / 1e9:,.3f}",
                     "-" if s.tflops_per_s is None else f"{s.tflops_per_s:,.3f}",
                     "-" if s.mfu is None else f"{100 * s.mfu:.2f}"] for w, r in self.reports for s in r.steps],
                   numeric={1, 2, 3, 4, 5})
        if any(r.families for _, r in self.reports):
            page.chart("roofline", charts.spec(charts.roofline_chart(list(self.reports))))
