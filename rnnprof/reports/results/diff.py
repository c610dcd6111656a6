"""``rnnprof diff``'s result: what changed from one run, trace or graph (A) to another (B)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rnnprof.analyzers.diff import DiffReport
from rnnprof.reports.diff import to_document
from rnnprof.reports.html import Page
from rnnprof.reports.results.base import Result
from rnnprof.reports.units import fmt_ms


@dataclass(frozen=True, repr=False)
class DiffResult(Result):
    """``report``: the comparison; ``left_out``: what each side's loaders left out (``{"a": ..., "b": ...}``);
    ``top``: rows per list (``--top``; None: 10 in JSON)."""

    report: DiffReport
    left_out: dict
    top: int | None = None

    COMMAND: ClassVar[str] = "diff"

    def document(self) -> dict:
        return {**to_document(self.report, self.top), "left_out": self.left_out}

    def tables(self) -> dict[str, list[dict]]:
        """``time`` (per device and metric: ``a_us_per_step``, ``b_us_per_step``, ``delta_us_per_step``) and
        ``op_counts``."""
        document = to_document(self.report, 0)
        return {"time": document["time"]["rows"], "op_counts": document["ops"]["counts"]}

    def html(self, page: Page) -> None:
        rows = self.tables()["time"]
        page.paragraph(f"A: {self.report.a}; B: {self.report.b}", "sub")
        page.table(["device", "metric", "A ms/step", "B ms/step", "B - A ms/step"],
                   [[r["device"], r["metric"], fmt_ms(r["a_us_per_step"]), fmt_ms(r["b_us_per_step"]),
                     fmt_ms(r["delta_us_per_step"], signed=True)] for r in rows[:20]], numeric={2, 3, 4})
