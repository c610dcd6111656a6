"""``whatif`` of a whole job, in the rounds of its critical path (``analyzers.replay.job``): each rank read once
into its critical-path part and the events the changes look inside, kept in the scratch folder (map); the changes
checked against the job's strings and devices; where a change is about the latest rank, each step's lateness per
rank (map); each step's replay graph built and replayed from the parts' rows in its window (map); the replays
into one report (reduce), as ``whatif`` of the ranks merged gives it."""

from __future__ import annotations

from typing import Callable, Sequence

from rnnprof.analyzers.classify import classify
from rnnprof.analyzers.critical_path import Dependencies
from rnnprof.analyzers.critical_path.job import rank_part, steps_chosen
from rnnprof.analyzers.replay.analysis import check_changes, latest_rank, needs_latest_rank, whatif_report
from rnnprof.analyzers.replay.comm_changes import known_groups, recorded_collectives
from rnnprof.analyzers.replay.fixes import RequestedChanges
from rnnprof.analyzers.replay.job import (job_names, job_step_lateness, job_step_replay, named_events, replay_plan,
                                         window_events)
from rnnprof.analyzers.step_time import device_step_times
from rnnprof.analyzers.steps import combined_overruns, job_step_times
from rnnprof.events import EventTable
from rnnprof.job.ranks import JobResult, JobRun
from rnnprof.traces.rank_folder import RankFolder

PATH, NAMED = "path", "named"  # the parts of a rank kept: its critical-path part, its named events


def replay_part_of_rank(table: EventTable, options):
    """The rank's parts to keep, and its ``RankSummary``, strings, devices, step times, overruns and its process
    groups and kinds of collectives (``options``: the comm patterns and the ``ScannedNames``)."""
    comm_patterns, names = options
    classes = classify(table, comm_patterns)
    part, summary = rank_part(table, classes)
    times, overruns = device_step_times(table, classes)  # the steps' times, and what ran past them, for the report
    facts = (known_groups(table.metadata.process_groups, table), recorded_collectives(table))
    return {PATH: part, NAMED: named_events(table, names)}, (summary, table.strings, table.devices, times, overruns,
                                                             facts)


def replay_of_step(parts: Sequence[dict], context, step: int):
    """The step's ``(StepReplay, counts)`` (None: no event in its window), or with no changes its lateness per
    rank (``context``: the plan, the dependencies, the changes and the latest rank)."""
    plan, dependencies, changes, rank = context
    named = [window_events(p[NAMED], plan.windows[step], step) for p in parts]
    paths = [p[PATH] for p in parts]
    if changes is None:
        return job_step_lateness(paths, named, plan, step, dependencies)
    return job_step_replay(paths, named, plan, step, changes, rank, dependencies)


def job_whatif(folder: RankFolder, requested: RequestedChanges, comm_patterns: Sequence[str] = (),
               dependencies: Dependencies = Dependencies(), choose: Callable | None = None, **run) -> JobResult:
    """``(WhatIfReport, notes, left_out)`` of every rank in ``folder``, the report ``whatif`` of them merged
    gives. ``requested``: the changes, the fixes' made and checked against the job's strings and devices once
    its ranks are read; ``choose(steps)``: the steps to replay; ``run``: ``JobRun``'s."""
    with JobRun(folder, **run) as job:
        results = job.ranks(replay_part_of_rank, (tuple(comm_patterns), requested.scanned()), keep=True)
        summaries = [summary for summary, *_ in results]
        found = job_names([s for _, strings, *_ in results for s in strings],
                          [d for _, _, devices, *_ in results for d in devices], [facts for *_, facts in results])
        changes = tuple(requested.on(found))
        check_changes(found, changes)
        plan = replay_plan(summaries, steps_chosen(summaries, choose), dependencies)
        rank = ""
        if needs_latest_rank(changes):
            ranks = sorted({d.worker for d in found.devices} - {""})
            rank = latest_rank(job.steps(replay_of_step, (plan, dependencies, None, ""), plan.steps)) \
                if len(ranks) > 1 else "".join(ranks[:1])
        replays = job.steps(replay_of_step, (plan, dependencies, changes, rank), plan.steps)
    report = whatif_report(changes, [r for r in replays if r is not None], rank, tuple(dependencies.lacks))
    report = report.with_step_time(job_step_times([times for *_, times, _, _ in results]),
                                   combined_overruns([overruns for *_, overruns, _ in results]))
    return JobResult(report, job.notes, job.left_out)
