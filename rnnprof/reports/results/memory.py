"""``rnnprof memory``'s result: each device's peak memory, what was live then, growth per step and imbalance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rnnprof.analyzers.memory import CATEGORIES, DeviceMemory, MemoryReport
from rnnprof.reports import charts
from rnnprof.reports.html import Page
from rnnprof.reports.memory import memory_chart, to_document
from rnnprof.reports.results.base import Result
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
        """``devices`` (each device's peak and growth, in bytes), ``timeline`` (each device's allocated bytes over
        time by category, as the chart stacks them) and ``imbalances``."""
        devices = [_device_row(d) for d in self.report.devices]
        timeline = [{"device": d.device, "ts_us": p.ts_us, "allocated_bytes": sum(p.bytes),
                     **{f"{c}_bytes": n for c, n in zip(CATEGORIES, p.bytes)}} for d in self.report.devices
                    for p in d.timeline]
        imbalances = [{"device": i.device, "peak_bytes": i.peak, "others_median_bytes": i.others_median,
                       "excess_bytes": i.excess, "threshold_bytes": i.threshold,
                       "allocates_more_bytes": i.allocates_more, "from_step": i.from_step}
                      for i in self.report.imbalances]
        return {"devices": devices, "timeline": timeline, "imbalances": imbalances}

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


def _device_row(d: DeviceMemory) -> dict:
    """A device's figures, each byte count named ``_bytes``."""
    peak, growth = d.peak, d.growth
    return {"device": d.device, "worker": d.worker, "records": d.records, "baseline_bytes": d.baseline,
            "peak_allocated_bytes": peak.allocated, "peak_reserved_bytes": peak.reserved,
            "peak_unused_bytes": peak.fragmentation, "peak_ts_us": peak.ts_us, "peak_step": peak.step,
            "peak_operator": peak.operator, "max_reserved_bytes": d.peak_reserved,
            "growth_per_step_bytes": None if growth.reason else growth.per_step,
            "growth_jitter_bytes": None if growth.reason else growth.jitter, "leak": growth.leak,
            "growth_reason": growth.reason, "window_start_bytes": d.window_start,
            "allocator_max_bytes": d.allocator_max, "missing_frees": d.missing_frees,
            "missing_step_bytes": d.missing_step_bytes}


def _mb(value: int | None) -> str:
    return "-" if value is None else fmt_mb(value)
