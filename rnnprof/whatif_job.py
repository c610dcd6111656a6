"""A whole job's what-if, rank by rank (``analyzers.replay.job``): each rank is read once, in a worker, into its
critical-path part and the events the changes look inside, saved in a scratch folder; each step's replay graph
is then built and replayed in a worker from the parts' rows in its window. Wiring only, as ``whole_job``.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from rnnprof import limits
from rnnprof.analyzers.classify import classify
from rnnprof.analyzers.critical_path import Dependencies
from rnnprof.analyzers.critical_path.job import JobPlan, rank_part
from rnnprof.analyzers.replay.analysis import check_changes, latest_rank, needs_latest_rank, whatif_report
from rnnprof.analyzers.replay.job import (JobNames, ScannedNames, job_step_lateness, job_step_replay, named_events,
                                         replay_plan, window_rows)
from rnnprof.analyzers.replay.result import Change, WhatIfReport
from rnnprof.analyzers.step_time import device_step_times
from rnnprof.analyzers.steps import combined_overruns, job_step_times
from rnnprof.events import TableMetadata, merge_metadata
from rnnprof.parallel import Workers
from rnnprof.traces.rank_folder import RankFolder, loaded_notes
from rnnprof.whole_job import (OnDone, RankResult, RankTask, local_jobs, open_part, open_table_rows, save_part,
                               save_table)

NAMED = "named"  # the folder of a rank's named events


@dataclass(frozen=True)
class ReplayPartTask:
    """One rank for the replay: its part and the events named by ``names`` saved under ``scratch``."""

    rank: RankTask
    scratch: str
    names: ScannedNames  # replay.job.scanned_names


@dataclass(frozen=True)
class ReplayStepTask:
    """One step's replay over the ranks' parts saved in ``scratch`` (one folder per rank, in rank order)."""

    scratch: tuple[str, ...]
    plan: JobPlan
    step: int
    dependencies: Dependencies
    changes: tuple[Change, ...] | None  # None: the step's lateness per rank only
    rank: str = ""


def replay_part_of_rank(task: ReplayPartTask) -> RankResult:
    """The rank's ``RankSummary``, strings and devices; its part and named events saved under ``task.scratch``."""
    table = task.rank.load()
    classes = classify(table, task.rank.comm_patterns)
    part, summary = rank_part(table, classes)
    folder = Path(task.scratch)
    save_part(part, folder)
    save_table(named_events(table, task.names), folder / NAMED)
    times, overruns = device_step_times(table, classes)  # the steps' times, and what ran past them, for the report
    return RankResult((summary, table.strings, table.devices, times, overruns),
                      table.metadata.distributed[0] if table.metadata.distributed else None,
                      ",".join(sorted({d.worker for d in table.devices})),
                      TableMetadata(left_out=dict(table.metadata.left_out),
                                    left_out_examples=table.metadata.left_out_examples))


def _results(folder: RankFolder, outcomes: list[RankResult]) -> tuple[list, list[str], TableMetadata]:
    """The ranks' results, the folder's notes, and what the ranks' loaders left out (``whole_job``'s reduce)."""
    notes = [*folder.notes, *loaded_notes(folder, [o.distributed for o in outcomes], [o.worker for o in outcomes])]
    return [o.result for o in outcomes], notes, merge_metadata([o.left_out or TableMetadata() for o in outcomes])


def replay_of_step(task: ReplayStepTask):
    """The step's ``(StepReplay, counts)`` (None: no event in its window), or its lateness per rank. Of each
    rank's named events only those in the step's window are read (with every host operator kept for an even-work
    change, the whole of them would be every rank's operators in each step's worker)."""
    parts = [open_part(Path(d)) for d in task.scratch]
    window = task.plan.windows[task.step]
    named = [open_table_rows(Path(d) / NAMED, lambda columns: window_rows(columns, window, task.step))
             for d in task.scratch]
    if task.changes is None:
        return job_step_lateness(parts, named, task.plan, task.step, task.dependencies)
    return job_step_replay(parts, named, task.plan, task.step, task.changes, task.rank, task.dependencies)


def job_whatif(folder: RankFolder, changes_of: Callable[[JobNames], list[Change]], names: ScannedNames,
               comm_patterns: Sequence[str] = (), jobs: int | None = None, scheduler: str | None = None,
               on_done: OnDone | None = None, dependencies: Dependencies = Dependencies(),
               choose: Callable | None = None) -> tuple[WhatIfReport, list[str], object]:
    """``(WhatIfReport, notes, left_out)`` of every rank in ``folder``, the report ``whatif`` of them merged
    gives. ``changes_of(job)``: the changes, checked against the job's strings and devices; ``names``: the
    operators they may scale (``replay.job.scanned_names``); ``choose(steps)``: the steps to replay."""
    with tempfile.TemporaryDirectory(prefix="rnnprof-whatif-") as scratch:
        dirs = tuple(str(Path(scratch) / f"rank{k}") for k in range(len(folder.files)))
        tasks = [ReplayPartTask(RankTask(f, tuple(comm_patterns), limits.max_input_bytes()), d, names)
                 for f, d in zip(folder.files, dirs)]
        with Workers(local_jobs(folder, jobs, scheduler), scheduler, len(tasks)) as workers:
            outcomes = workers.map(replay_part_of_rank, tasks, on_done)
            results, notes, left_out = _results(folder, outcomes)
            summaries = [summary for summary, *_ in results]
            job = JobNames(tuple(dict.fromkeys(s for _, strings, *_ in results for s in strings)),
                           tuple(dict.fromkeys(d for _, _, devices, *_ in results for d in devices)))
            changes = tuple(changes_of(job))
            check_changes(job, changes)
            known = sorted({s for summary in summaries for s in summary.steps})
            plan = replay_plan(summaries, choose(known) if choose is not None else None, dependencies)
            rank = ""
            if needs_latest_rank(changes):
                ranks = sorted({d.worker for d in job.devices} - {""})
                rank = latest_rank(workers.map(replay_of_step, [ReplayStepTask(dirs, plan, s, dependencies, None)
                                                                for s in plan.steps])) \
                    if len(ranks) > 1 else "".join(ranks[:1])
            replays = workers.map(replay_of_step, [ReplayStepTask(dirs, plan, s, dependencies, changes, rank)
                                                   for s in plan.steps])
    report = whatif_report(changes, [r for r in replays if r is not None], rank, tuple(dependencies.lacks))
    report = report.with_step_time(job_step_times([times for *_, times, _ in results]),
                                   combined_overruns([overruns for *_, overruns in results]))
    return report, notes, left_out
