"""``pipeline`` of a whole job: each rank's ``RankTimeline`` (map), combined into the pipeline's report on the
earliest rank's clock (reduce), as ``analyze_pipeline`` of the ranks merged gives it."""

from __future__ import annotations

from rnnprof.analyzers.pipeline import Given, combine_timelines, rank_timelines
from rnnprof.analyzers.steps import StepSelection
from rnnprof.events import EventTable
from rnnprof.job.ranks import JobResult, map_reduce
from rnnprof.traces.rank_folder import RankFolder


def timelines_of_rank(table: EventTable, options: Given | None = None):
    """The rank's timelines (one: a rank file is one worker)."""
    return rank_timelines(table)


def job_pipeline(folder: RankFolder, given: Given = Given(), selection: StepSelection | None = None,
                 **run) -> JobResult:
    """``(PipelineReport or None, notes, left_out)`` of every rank in ``folder`` (``run``: ``JobRun``'s)."""
    def combine(results):
        return combine_timelines([t for found in results for t in found], None, given)

    return map_reduce(folder, timelines_of_rank, combine, given, selection, **run)
