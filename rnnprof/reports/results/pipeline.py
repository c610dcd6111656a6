"""``rnnprof pipeline``'s result: a pipeline's bubble against its schedule's theory, rank by rank, and the imbalance
between its stages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rnnprof.analyzers.pipeline import PipelineReport
from rnnprof.reports.html import Page
from rnnprof.reports.pipeline import pipeline_section, to_document
from rnnprof.reports.results.base import Result


@dataclass(frozen=True, repr=False)
class PipelineResult(Result):
    """``report``: the analysis; ``left_out``: the events the loaders left out, by reason."""

    report: PipelineReport
    left_out: dict

    COMMAND: ClassVar[str] = "pipeline"

    def document(self) -> dict:
        return {**to_document(self.report), "left_out": self.left_out}

    def tables(self) -> dict[str, list[dict]]:
        """``steps`` (each rank's busy time and bubble's parts per step, in µs), ``ranks`` (over every step) and
        ``segments`` (the stage x time chart's step)."""
        steps = [{"rank": s.worker, "position": s.position, **x.as_dict()} for s in self.report.stages
                 for x in s.steps]
        ranks = [{k: v for k, v in s.as_dict().items() if k not in ("steps", "waited_on_us", "stage_busy_us")}
                 for s in self.report.stages]
        return {"steps": steps, "ranks": ranks, "segments": [s.as_dict() for s in self.report.segments]}

    def html(self, page: Page) -> None:
        pipeline_section(page, self.report)
