"""``rnnprof memory``'s result: each device's peak memory, what was live then, growth per step and imbalance."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from rnnprof.analyzers.memory import MemoryReport
from rnnprof.reports import charts
from rnnprof.reports.html import Page
from rnnprof.reports.memory import memory_chart, to_document
from rnnprof.reports.results.base import Result, flat
from rnnprof.reports.units import fmt_mb


@dataclass(frozen=True, repr=False)
class MemoryResult(Result):
    """``report``: the analysis; ``left_out``: the events the loaders left out, by reason."""

    report: MemoryReport
    left_out: dict

    COMMAND: ClassVar[str] = "memory"

    def document(self) -> dict:
        return {**to_document(self.report), "left_out": self.left_out}

    def tables(self) -> dict[str, list[dict]]:
        """``devices`` (each device's peak, ``peak.allocated`` in bytes, and growth), ``timeline`` (each device's
        allocated bytes over time, as the chart draws them) and ``imbalances``."""
        devices = []
        timeline = []
        for d in self.report.devices:
            row = flat({k: v for k, v in dataclasses.asdict(d).items() if not isinstance(v, (list, tuple))})
            devices.append(row)
            timeline += [{"device": d.device, **flat(dataclasses.asdict(p) if dataclasses.is_dataclass(p) else p)}
                         for p in d.timeline]
        return {"devices": devices, "timeline": timeline,
                "imbalances": [flat(dataclasses.asdict(i)) for i in self.report.imbalances]}

    def html(self, page: Page) -> None:
        memory_section(page, self.report)


def memory_section(page: Page, report: MemoryReport) -> None:
    """Each device's peak, the reserved bytes then, the operator at the peak and its growth; the chart of its
    memory over time."""
    page.table(["device", "peak MB", "reserved MB", "unused MB", "step", "operator at the peak", "growth MB/step"],
               [[d.device, fmt_mb(d.peak.allocated), _mb(d.peak.reserved), _mb(d.peak.fragmentation),
                 d.peak.step if d.peak.step >= 0 else "-", d.peak.operator or "-",
                 "-" if d.growth.reason else fmt_mb(d.growth.per_step)] for d in report.devices],
               numeric={1, 2, 3, 4, 6}, caption="MB = 10^6 bytes")
    page.chart("memory", charts.spec(memory_chart(report)))


def _mb(value: int | None) -> str:
    return "-" if value is None else fmt_mb(value)
