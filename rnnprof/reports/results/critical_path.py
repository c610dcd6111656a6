"""``rnnprof critical-path``'s result: each step's longest chain across devices and ranks and its shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rnnprof.analyzers.critical_path import CriticalPathReport, StepPath
from rnnprof.reports import charts
from rnnprof.reports.critical_path import to_document
from rnnprof.reports.html import Page
from rnnprof.reports.results.base import Result
from rnnprof.reports.units import fmt_ms


@dataclass(frozen=True, repr=False)
class CriticalPathResult(Result):
    """``report``: the analysis; ``left_out``: the events the loaders left out, by reason; ``overlay``: the file
    the path was written to as a Chrome trace (``--overlay``), if any."""

    report: CriticalPathReport
    left_out: dict
    overlay: str | None = None

    COMMAND: ClassVar[str] = "critical-path"

    def document(self) -> dict:
        return {**to_document(self.report, self.overlay, lazy=True), "left_out": self.left_out}

    def median_step(self) -> StepPath:
        """The step whose path length is the median's (the lower one of an even count)."""
        ordered = sorted(self.report.steps, key=lambda s: (s.length_us, s.step))
        return ordered[(len(ordered) - 1) // 2]

    def tables(self) -> dict[str, list[dict]]:
        """``steps`` (each step's path length and window), ``shares`` (each step's path by device and by class,
        ``us``) and ``links`` (every link of every step's path)."""
        steps = [{"step": s.step, "length_us": s.length_us, "span_us": s.span_us, "events": s.events,
                  "links": len(s.links)} for s in self.report.steps]
        shares = [{"step": s.step, "by": by, "key": key, "us": us,
                   "pct": 100 * us / s.length_us if s.length_us else 0.0}
                  for s in self.report.steps for by, values in (("device", s.by_device), ("class", s.by_class))
                  for key, us in values.items()]
        links = [{"step": s.step, "name": link.name, "device": link.device, "class": link.event_class,
                  "edge": link.edge, "start_us": link.start_us, "dur_us": link.dur_us, "wait_us": link.wait_us}
                 for s in self.report.steps for link in s.links]
        return {"steps": steps, "shares": shares, "links": links}

    def html(self, page: Page) -> None:
        shares_section(page, self.median_step(), len(self.report.steps))
        page.chart("critical-path", charts.spec(charts.critical_path_chart(self.median_step())))


def shares_section(page: Page, step: StepPath, steps: int) -> None:
    """A step's critical path in one sentence and its shares by device and by class, as a table."""
    total = step.length_us or 1.0
    what = "the whole trace" if step.step < 0 else f"step {step.step}"
    median = f", the median of {steps} steps" if steps > 1 else ""
    page.paragraph(f"Critical path of {what}{median}: {fmt_ms(step.length_us)} ms of a {fmt_ms(step.span_us)} ms "
                   f"step, {len(step.links):,} events.", "sub")
    page.table(["share of the path", "ms", "%"],
               [[f"{label} {key}", fmt_ms(us), f"{100 * us / total:.1f}"]
                for label, values in (("device", step.by_device), ("class", step.by_class))
                for key, us in sorted(values.items(), key=lambda kv: -kv[1])], numeric={1, 2})



