"""A whole job's replay, rank by rank, on the critical path's job parts (``critical_path.job``): each rank alone
gives its DAG candidates (``rank_part``) and the events the changes look inside (``named_events``: the
operators a scale names, the data-loading ranges, every host operator where a rank's operators that no other rank
runs are taken out); a step's replay graph is built from the candidates of every
rank that overlap the step's window (``JobIndex``), joined at the collectives matched across ranks, and
replayed, the same graph, numbers and changes as ``whatif`` of the ranks merged into one table gives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

import numpy as np

from rnnprof.analyzers.audit.input_stalls import INPUT_RANGE
from rnnprof.analyzers.classify import EventClass
from rnnprof.analyzers.critical_path.graph import StepDAG
from rnnprof.analyzers.critical_path.job import JobIndex, JobPlan, RankPart, RankSummary, job_plan
from rnnprof.analyzers.critical_path.result import Dependencies
from rnnprof.analyzers.replay.analysis import lateness, replay_step
from rnnprof.analyzers.replay.step_graph import StepGraph
from rnnprof.analyzers.replay.families import family_members
from rnnprof.analyzers.replay.graph import replay_graph
from rnnprof.analyzers.replay.result import (DELAY, EVEN_WORK, FAMILY, MICRO_BATCHES, MOVE_LAYER, PREFETCH, SCALE,
                                             SCALE_HOST, Change, StepReplay)
from rnnprof.events import Device, EventTable, Kind, ProcessGroup, concat
from rnnprof.events.names import FSDP_FORWARD_PREFETCH, PHASE_RANGE


@dataclass(frozen=True)
class JobNames:
    """What ``check_changes``, ``fix_changes`` and a change to a process group read of a job: its strings, devices,
    process groups (``comm_changes.known_groups``) and the (operation, phase) of its collectives."""

    strings: tuple[str, ...]
    devices: tuple[Device, ...]
    groups: tuple[ProcessGroup, ...] = ()
    collectives: frozenset[tuple[str, str]] = frozenset()


def job_names(strings: Sequence[str], devices: Sequence[Device], facts: Sequence[tuple]) -> JobNames:
    """The ``JobNames`` of a job's ranks read apart: their strings and devices, and each rank's ``facts``
    (``comm_changes.known_groups`` and ``recorded_collectives`` of its table) joined; a group any rank lists with
    its members' ranks wins over one listed without."""
    groups = {g.name: g for listed, _ in facts for g in listed if g.ranks}
    groups.update({g.name: g for listed, _ in facts for g in listed if g.name not in groups})
    return JobNames(tuple(dict.fromkeys(strings)), tuple(dict.fromkeys(devices)), tuple(groups.values()),
                    frozenset().union(*(kinds for _, kinds in facts)))


@dataclass(frozen=True)
class ScannedNames:
    """The events whose spans the changes look inside: operators by name (``exact``), the operators a delay
    comes before and a pipeline's phase ranges (``before``, regexes on the name), and every host operator (``host_ops``: an even-work change
    compares the ranks' operators in each step). Data-loading ranges always are."""

    exact: frozenset[str] = frozenset()
    before: tuple[re.Pattern, ...] = ()
    host_ops: bool = False


def scanned_names(changes: Iterable[Change]) -> ScannedNames:
    """What ``named_events`` keeps for ``changes``: the operators scaled (by name, or a family's members) and the
    regexes of the operators a delay comes before; every host operator for an even-work change and for a schedule
    change (its stages' work is their outermost operators, gradient accumulations among them)."""
    exact: set[str] = set()
    before: list[re.Pattern] = []
    changes = list(changes)
    for c in changes:
        if c.kind in (SCALE, SCALE_HOST):
            exact.add(c.subject)
        elif c.kind == FAMILY:
            exact |= family_members(c.subject)
        elif c.kind == DELAY and c.before:
            before.append(re.compile(c.before))
        elif c.kind in (MICRO_BATCHES, MOVE_LAYER):
            before.append(PHASE_RANGE)  # the schedule is built from the micro-batches' phase ranges
        elif c.kind == PREFETCH:
            before.append(FSDP_FORWARD_PREFETCH)  # the all-gathers the trace's own prefetch issued stay
    return ScannedNames(frozenset(exact), tuple(before),
                        any(c.kind in (EVEN_WORK, MICRO_BATCHES, MOVE_LAYER) for c in changes))


def named_events(table: EventTable, names: ScannedNames) -> RankPart:
    """The rank's events named by ``names`` (by name or op type; a regex of ``names.before``: its name matching
    it; every host operator with ``names.host_ops``) or data-loading ranges, in row order: their columns, as a
    part to keep (``window_events`` reads a step's of them)."""
    wanted = np.array([s in names.exact or bool(INPUT_RANGE.match(s)) or any(p.search(s) for p in names.before)
                       for s in table.strings] or [False], dtype=bool)
    keep = wanted[table.name] | wanted[table.op_type]
    rows = np.flatnonzero(keep | (table.kind == Kind.HOST_OP) if names.host_ops else keep)
    return RankPart({c: getattr(table, c)[rows] for c in EventTable.COLUMNS}, table.strings, table.devices)


def window_events(named: RankPart, window: tuple[float, float], step: int) -> EventTable:
    """The events of ``named`` (``named_events``) that overlap ``window`` or belong to ``step`` (``window_rows``):
    only those rows of each column are read (with every host operator kept for an even-work change, the whole of
    them would be every rank's operators in each step's task)."""
    rows = window_rows(named.arrays, window, step)
    return EventTable(**{c: np.asarray(named.arrays[c][rows]) for c in EventTable.COLUMNS}, strings=named.strings,
                      devices=named.devices)


def replay_plan(summaries: Sequence[RankSummary], steps: Sequence[int] | None = None,
                dependencies: Dependencies = Dependencies()) -> JobPlan:
    """``job_plan`` with the replay's windows: a step's own first start (its candidates' and its host operators',
    enclosing ones too) to its candidates' last end over the ranks (``analysis.replay_windows``; they may overlap),
    where the job has steps."""
    plan = job_plan(summaries, steps, dependencies)
    if not plan.has_steps:
        return plan
    windows = {}
    for s in plan.steps:
        spans = [x.spans[s] for x in summaries if s in x.spans]
        if spans:
            first = min(x.first_ops.get(s, np.inf) for x in summaries)
            windows[s] = (min(first, *(a for a, _ in spans)), max(b for _, b in spans))
    return replace(plan, steps=tuple(s for s in plan.steps if s in windows), windows=windows)


def window_rows(columns, window: tuple[float, float], step: int) -> np.ndarray:
    """The rows of a table's ``columns`` (``ts``, ``dur`` and ``step``, arrays or arrays read as indexed) that
    overlap ``window`` or belong to ``step`` (a range that closed before the step's first operator, a delay's
    place, as the merged table has it)."""
    ts, dur, of_step = (np.asarray(columns[c]) for c in ("ts", "dur", "step"))
    return np.flatnonzero(((ts <= window[1]) & (ts + dur >= window[0])) | (of_step == step))


def job_step_graph(parts: Sequence[RankPart], named: Sequence[EventTable], plan: JobPlan, step: int,
                   dependencies: Dependencies = Dependencies()) -> StepGraph | None:
    """One step's replay graph over the ranks' ``parts``; its table also holds the ranks' ``named`` events, each
    rank's already cut to the step's window (``window_rows``), after the candidates (the graph's rows are the
    candidates')."""
    window = plan.windows[step]
    index = JobIndex(parts, plan, window)
    dag = StepDAG(index, step, window, dependencies, ordered=False)
    if not dag.n:
        return None
    graph = replay_graph(dag, index.table, index.classes, index.is_thread)
    table = concat([index.table, *named])
    classes = np.concatenate([index.classes, np.full(len(table) - len(index.table), EventClass.ANNOTATION,
                                                     dtype=index.classes.dtype)])
    return StepGraph(graph, table, classes, float(window[0]))


def job_step_lateness(parts: Sequence[RankPart], named: Sequence[EventTable], plan: JobPlan, step: int,
                      dependencies: Dependencies = Dependencies()) -> dict[str, float]:
    sg = job_step_graph(parts, named, plan, step, dependencies)
    return lateness(sg) if sg is not None else {}


def job_step_replay(parts: Sequence[RankPart], named: Sequence[EventTable], plan: JobPlan, step: int,
                    changes: Sequence[Change], rank: str, dependencies: Dependencies = Dependencies()
                    ) -> tuple[StepReplay, list[int]] | None:
    """One step replayed unchanged and with ``changes`` (``rank``: the latest rank, where a change needs it)."""
    sg = job_step_graph(parts, named, plan, step, dependencies)
    return replay_step(step, sg, changes, rank) if sg is not None else None
