"""``rnnprof comm``'s result: each device's time split into compute, communication and idle, and the stragglers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rnnprof.analyzers.comm_result import CommReport
from rnnprof.reports import charts
from rnnprof.reports.comm import json_document
from rnnprof.reports.html import Page
from rnnprof.reports.results.base import Result, flat
from rnnprof.reports.units import fmt_ms


@dataclass(frozen=True, repr=False)
class CommResult(Result):
    """``report``: the analysis; ``tasks``: per TF cluster task (None for a job's rank files); ``left_out``: the
    events the loaders left out, by reason; ``per_step``: the per-step figures asked for (``--per-step``)."""

    report: CommReport
    tasks: object
    left_out: dict
    per_step: bool = False

    COMMAND: ClassVar[str] = "comm"

    def document(self) -> dict:
        return json_document(self.report, self.tasks, self.left_out, per_step=self.per_step)

    def tables(self) -> dict[str, list[dict]]:
        """``devices`` (each device's whole-trace split, ``total.*_us``), ``steps`` (per device and step),
        ``stragglers`` (per step) and ``communication_ops``."""
        devices = [{"device": d.device.label, "worker": d.device.worker, "basis": d.basis,
                    **flat(d.total.as_dict(), "total.")} for d in self.report.devices]
        steps = [{"device": d.device.label, "step": step, **b.as_dict()}
                 for d in self.report.devices for step, b in sorted(d.steps.items())]
        return {"devices": devices, "steps": steps,
                "stragglers": [s.as_dict() for s in self.report.stragglers],
                "communication_ops": [{k: v for k, v in op.as_dict().items() if k != "collective_types"}
                                      for op in self.report.comm_ops]}

    def html(self, page: Page) -> None:
        page.table(["device", "span ms", "compute %", "communication %", "overlap %", "idle %"],
                   [[d.device.label, fmt_ms(d.total.span_us), f"{d.total.pct(d.total.compute_us):.1f}",
                     f"{d.total.pct(d.total.communication_us):.1f}",
                     "-" if d.total.overlap_pct is None else f"{d.total.overlap_pct:.1f}",
                     f"{d.total.pct(d.total.idle_us):.1f}"] for d in self.report.devices],
                   numeric={1, 2, 3, 4, 5}, caption="each device's time over the whole trace (rnnprof comm)")
        if self.report.devices:
            page.chart("comm", charts.spec(charts.comm_chart(self.report, per_step=self.per_step)))
