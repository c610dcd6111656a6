"""``critical-path`` of a whole job, in two rounds (``analyzers.critical_path.job``): each rank read once into its
part, kept in the scratch folder, and its summary (map); the steps' windows and the collectives matched across
ranks from the summaries; each step's path from the parts' rows in its window (map); the paths into one report
(reduce), as ``analyze_critical_path`` of the ranks merged gives it."""

from __future__ import annotations

from typing import Callable, Sequence

from rnnprof.analyzers.classify import classify
from rnnprof.analyzers.critical_path import WHAT_IF_OPS, Dependencies, StepPath
from rnnprof.analyzers.critical_path.job import JobPlan, job_plan, job_report, job_step_path, rank_part, steps_chosen
from rnnprof.analyzers.step_time import device_step_times
from rnnprof.analyzers.steps import combined_overruns, job_step_times
from rnnprof.events import EventTable
from rnnprof.job.ranks import JobResult, JobRun
from rnnprof.traces.rank_folder import RankFolder

PATH = "path"  # the part of a rank kept for the path


def path_part_of_rank(table: EventTable, comm_patterns: tuple[str, ...]):
    """The rank's ``RankPart`` to keep, and its ``RankSummary`` with its devices' step times and what ran past
    them (for the report's step time)."""
    classes = classify(table, comm_patterns)
    part, summary = rank_part(table, classes)
    return {PATH: part}, (summary, *device_step_times(table, classes))


def path_of_step(parts: Sequence[dict], context: tuple[JobPlan, Dependencies, int], step: int) -> StepPath | None:
    plan, dependencies, what_if_ops = context
    return job_step_path([p[PATH] for p in parts], plan, step, dependencies, what_if_ops)


def job_critical_path(folder: RankFolder, comm_patterns: Sequence[str] = (),
                      dependencies: Dependencies = Dependencies(), choose: Callable | None = None,
                      what_if_ops: int | None = None, **run) -> JobResult:
    """``(CriticalPathReport, notes, left_out)`` of every rank in ``folder``, the report as
    ``analyze_critical_path`` of them merged gives it. ``choose(steps)``: the steps to analyse of the job's
    sorted steps (None: every step); ``run``: ``JobRun``'s."""
    with JobRun(folder, **run) as job:
        results = job.ranks(path_part_of_rank, tuple(comm_patterns), keep=True)
        summaries = [summary for summary, _, _ in results]
        plan = job_plan(summaries, steps_chosen(summaries, choose), dependencies)
        context = (plan, dependencies, WHAT_IF_OPS if what_if_ops is None else what_if_ops)
        paths = job.steps(path_of_step, context, plan.steps)
    workers = [w for summary in summaries for w in summary.workers]
    report = job_report(paths, workers, dependencies).with_step_time(
        job_step_times([times for _, times, _ in results]), combined_overruns([overruns for *_, overruns in results]))
    return JobResult(report, job.notes, job.left_out)
