"""``whatif``: each step replayed without a change and with the changes, on the critical path's DAG."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from rnnprof.analyzers.classify import classify
from rnnprof.analyzers.critical_path import Dependencies
from rnnprof.analyzers.critical_path.graph import StepDAG
from rnnprof.analyzers.critical_path.table_index import TableIndex, dag_windows
from rnnprof.analyzers.replay.changes import apply
from rnnprof.analyzers.replay.step_graph import Knobs, StepGraph
from rnnprof.analyzers.replay.engine import Layering, Schedule, calibrate, replay, replay_order
from rnnprof.analyzers.replay.graph import ARRIVAL, DONE, EDGE_ARRIVAL, replay_graph
from rnnprof.analyzers.replay.pipeline_changes import parse_layers, refuse_without_pipeline, schedule_change_us
from rnnprof.analyzers.replay.outcome import chain, rank_waits, replayed_step_time, waits_by_rank
from rnnprof.analyzers.replay.comm_changes import check_collectives, recorded_collectives
from rnnprof.analyzers.replay.result import (COMM, DELAY, EVEN_HOST, EVEN_INPUT, EVEN_WORK, FAMILY, MICRO_BATCHES,
                                             MOVE_LAYER, PREFETCH, SCALE, SCALE_HOST, Change, ChangeError, StepReplay,
                                             WhatIfReport)
from rnnprof.analyzers.replay.families import family_members
from rnnprof.analyzers.step_time import device_step_times
from rnnprof.events import EventTable

TOLERANCE_PCT = 2.0  # an unchanged replay further than this from the measured step says why


def _steps(table: EventTable, steps: Iterable[int] | None) -> list[int]:
    if steps is None:
        steps = table.steps() if len(table.steps()) else ([-1] if len(table) else [])
    return [int(s) for s in steps]


def replay_windows(tt: TableIndex, steps: list[int]) -> dict[int, tuple[float, float]]:
    """Each step's window: its own events' first start (its host operators', enclosing ones too: a preempted
    operator's head before its first inner one is the step's) to their last end, over every rank. Unlike the
    critical path's windows these may overlap: a step starts where its first event does, even while the previous
    step's last work (a collective's tail on gloo's thread) still runs."""
    t, cand = tt.table, tt.cand
    windows = {}
    if tt.has_steps:
        step, first_ops = t.step[cand], tt.first_op_starts()
        for s in steps:
            rows = cand[step == s]
            if len(rows):
                first = min(float(t.ts[rows].min()), first_ops.get(s, np.inf))
                windows[s] = (first, float((t.ts[rows] + t.dur[rows]).max()))
    return windows if tt.has_steps else dag_windows(tt, steps)


def check_changes(table: EventTable, changes: Sequence[Change]) -> None:
    """Raise ``ChangeError`` for a change that names what the input lacks (``table``: the input's table, or a job's
    names, ``job.JobNames``)."""
    workers = sorted({d.worker for d in table.devices} - {""})
    for c in changes:
        if c.kind in (SCALE, SCALE_HOST) and c.subject not in set(table.strings):
            raise ChangeError(f"{c.describe()}: no event or operator named {c.subject!r} in the input")
        if c.kind == FAMILY and not family_members(c.subject) & set(table.strings):
            raise ChangeError(f"{c.describe()}: no operator of family {c.subject} in the input")
        if c.kind in (EVEN_HOST, EVEN_WORK) and len(workers) < 2:
            raise ChangeError(f"{c.describe()}: needs two or more ranks (the input has "
                              f"{len(workers) or 'no named'} rank{'s' if len(workers) != 1 else ''})")
        if c.kind in (EVEN_HOST, EVEN_INPUT, EVEN_WORK, DELAY) and c.subject and c.subject not in workers:
            raise ChangeError(f"{c.describe()}: no rank {c.subject!r} in the input (its ranks: "
                              f"{', '.join(workers) or 'none named'})")
        if c.kind == DELAY and c.before and not any(re.search(c.before, s) for s in table.strings):
            raise ChangeError(f"{c.describe()}: no event or operator matching {c.before!r} in the input")
        if c.kind == MICRO_BATCHES and (c.factor < 1 or c.factor != int(c.factor)):
            raise ChangeError(f"--micro-batches {c.factor:g}: expected a whole number of micro-batches, 1 or more")
        if c.kind == MOVE_LAYER:
            parse_layers(c.subject)
        if c.kind in (COMM, PREFETCH):
            check_collectives(c, recorded_collectives(table) if isinstance(table, EventTable) else table.collectives)


def needs_latest_rank(changes: Sequence[Change]) -> bool:
    """Whether a change is about the rank that arrives last (an even-host, -input or -work change naming none)."""
    return any(c.kind in (EVEN_HOST, EVEN_INPUT, EVEN_WORK) and not c.subject for c in changes)


def lateness(sg: StepGraph) -> dict[str, float]:
    """Per rank, the summed wait its late arrivals at the step's collectives make the others' do."""
    late: dict[str, float] = {}
    g = sg.graph
    arrival = g.edge_kind(EDGE_ARRIVAL) & (g.node_kind[g.dst] == DONE) & (g.node_kind[g.src] == ARRIVAL)
    for d in np.unique(g.dst[arrival]).tolist():
        members = g.src[arrival & (g.dst == d)]
        starts = g.start[members]
        if len(members) > 1:
            last = int(members[np.argmax(starts)])
            late[sg.worker[last]] = late.get(sg.worker[last], 0.0) + float(starts.max() - np.median(starts))
    return late


def latest_rank(lates: Iterable[dict[str, float]]) -> str:
    """The rank that arrives last at its collectives: the largest summed wait (``lateness``, over the steps)."""
    late: dict[str, float] = {}
    for step in lates:
        for worker, wait in step.items():
            late[worker] = late.get(worker, 0.0) + wait
    if not late:
        raise ChangeError("no collective is matched across ranks: name the rank (rank1, say)")
    return max(sorted(late), key=late.get)


def _reasons(sg: StepGraph, keep: np.ndarray) -> tuple[str, ...]:
    reasons = []
    if (~keep).any():
        reasons.append(f"{int((~keep).sum())} dependencies left out: the measured clocks put their ends after "
                       "their targets' starts (a cycle)")
    if sg.graph.skewed:
        reasons.append(f"{sg.graph.skewed} collective member(s) ended before the last member arrived: the ranks' "
                       "clocks disagree")
    return tuple(reasons)


class Replayer:
    """A table's step graphs (``steps``: the table's by default), built once, replayed with any number of change
    sets (``run``); each step's unchanged replay is made once and shared by every change set."""

    def __init__(self, table: EventTable, dependencies: Dependencies = Dependencies(),
                 steps: Iterable[int] | None = None, comm_patterns: Iterable[str] = (),
                 classes: np.ndarray | None = None):
        self.table, self.lacks = table, tuple(dependencies.lacks)
        classes = classify(table, comm_patterns) if classes is None else classes
        tt = TableIndex(table, classes, dependencies)
        wanted = _steps(table, steps)
        windows = replay_windows(tt, wanted)
        self.graphs: list[tuple[int, StepGraph]] = []
        self._unchanged: dict[int, Unchanged] = {}
        shared: dict = {}  # what the changes look up in the table once for every step (``StepGraph.shared``)
        for s in wanted:
            if s in windows:
                dag = StepDAG(tt, s, windows[s], dependencies, ordered=False)
                if dag.n:
                    self.graphs.append((s, StepGraph(replay_graph(dag, table, classes, tt.is_thread), table,
                                                     classes, float(windows[s][0]), shared)))

    def unchanged(self, step: int, sg: StepGraph) -> Unchanged:
        """Step ``step``'s unchanged replay, made on first use."""
        if step not in self._unchanged:
            self._unchanged[step] = unchanged_replay(sg)
        return self._unchanged[step]

    def latest_rank(self, changes: Sequence[Change]) -> str:
        """The rank an even-host, -input or -work change naming none is about (``latest_rank``), else ''."""
        if not needs_latest_rank(changes):
            return ""
        workers = sorted({d.worker for d in self.table.devices} - {""})
        return latest_rank(lateness(sg) for _, sg in self.graphs) if len(workers) > 1 else "".join(workers[:1])

    def run(self, changes: Sequence[Change]) -> WhatIfReport:
        """Each step replayed without a change and with ``changes``, all at once."""
        check_changes(self.table, changes)
        rank = self.latest_rank(changes)
        return whatif_report(changes, [replay_step(s, sg, changes, rank, self.unchanged(s, sg))
                                       for s, sg in self.graphs], rank, self.lacks)

    def savings_us(self, changes: Sequence[Change]) -> list[float]:
        """Per step, the unchanged replay less the replay with ``changes`` (``run``'s steps' ``replayed_us`` less
        their ``predicted_us``, without the chains and waits ``run`` also gives)."""
        check_changes(self.table, changes)
        rank = self.latest_rank(changes)
        return [step_saving(sg, self.unchanged(s, sg), changes, rank) for s, sg in self.graphs]


def whatif_report(changes: Sequence[Change], replays: Iterable[tuple[StepReplay, list[int]]], rank: str,
                  lacks: tuple) -> WhatIfReport:
    """The report of the steps' replays (``replay_step``'s); ``rank``: the latest rank, where it was asked for."""
    changed = {c.describe(): 0 for c in changes}
    results = []
    for result, counts in replays:
        results.append(result)
        for c, n in zip(changes, counts):
            changed[c.describe()] += n
    refuse_without_pipeline(changes, changed, len(results))
    notes = (f"the latest rank at the collectives: {rank}",) if rank else ()
    return WhatIfReport(changes=tuple(changes), steps=tuple(results), changed=changed, notes=notes, lacks=lacks)


def whatif(table: EventTable, changes: Sequence[Change], dependencies: Dependencies = Dependencies(),
           steps: Iterable[int] | None = None, comm_patterns: Iterable[str] = (),
           classes: np.ndarray | None = None) -> WhatIfReport:
    """Each step (``steps``: the table's by default; -1: a table without steps) replayed without a change and
    with ``changes``, all at once; with the steps' times as every command gives them."""
    check_changes(table, changes)
    classes = classify(table, comm_patterns) if classes is None else classes
    report = Replayer(table, dependencies, steps, comm_patterns, classes).run(changes)
    return report.with_step_time(*device_step_times(table, classes))


@dataclass
class Unchanged:
    """One step's unchanged replay, which every change set starts from: the order, the edges kept, each node's
    earliest start (``calibrate``), how it was replayed (``layering``), the step's measured and replayed times and
    each rank's waits (``outcome.rank_waits``); not its schedule, which nothing more needs."""

    order: np.ndarray
    keep: np.ndarray
    base: np.ndarray
    layering: Layering
    measured_us: float
    replayed_us: float
    waits: dict[str, float]


def unchanged_replay(sg: StepGraph) -> Unchanged:
    g = sg.graph
    order, keep = replay_order(g)
    base = calibrate(g, keep)
    before = replay(g, order, keep, g.dur, g.pre, g.lag, base)
    return Unchanged(order, keep, base, before.layering, replayed_step_time(g, g.end),
                     replayed_step_time(g, before.end), rank_waits(sg, before))


def changed_replay(sg: StepGraph, unchanged: Unchanged, changes: Sequence[Change], rank: str
                   ) -> tuple[Schedule, Knobs, StepGraph, list[int]]:
    """The step replayed with ``changes``: its schedule, what it ran with, its graph (a change may add edges) and
    the nodes each change changed."""
    g = sg.graph
    knobs = Knobs(g, g.dur.copy(), g.pre.copy(), g.lag.copy(), unchanged.keep.copy(), unchanged.base.copy())
    counts = [apply(c, sg, knobs, c.subject or rank) for c in changes]
    if knobs.graph is g:  # the same edges or fewer: the unchanged replay's order and levels hold
        order, layering, changed_sg = unchanged.order, unchanged.layering, sg
    else:
        order, layering = replay_order(knobs.graph)[0], None
        changed_sg = StepGraph(knobs.graph, sg.table, sg.classes, sg.window_start, sg.shared)
    after = replay(knobs.graph, order, knobs.keep, knobs.dur, knobs.pre, knobs.lag, knobs.base, layering)
    return after, knobs, changed_sg, counts


def step_saving(sg: StepGraph, unchanged: Unchanged, changes: Sequence[Change], rank: str) -> float:
    """The step's unchanged replay less its replay with ``changes`` (``rank``: the latest rank, where a change needs
    it)."""
    after, _, _, _ = changed_replay(sg, unchanged, changes, rank)
    return unchanged.replayed_us - replayed_step_time(sg.graph, after.end) - schedule_change_us(sg, changes)


def replay_step(step: int, sg: StepGraph, changes: Sequence[Change], rank: str,
                unchanged: Unchanged | None = None) -> tuple[StepReplay, list[int]]:
    """One step replayed unchanged (``unchanged``: that replay, made already) and with ``changes``; the nodes each
    change changed."""
    g = sg.graph
    base = unchanged_replay(sg) if unchanged is None else unchanged
    after, knobs, changed_sg, counts = changed_replay(sg, base, changes, rank)
    measured, replayed = base.measured_us, base.replayed_us
    links, length, by_device = chain(changed_sg, after, knobs.dur, knobs.pre)
    reasons = _reasons(sg, base.keep) if abs(replayed - measured) > TOLERANCE_PCT / 100 * measured else ()
    predicted = replayed_step_time(g, after.end) + schedule_change_us(sg, changes)
    return StepReplay(step=step, measured_us=measured, replayed_us=replayed, predicted_us=predicted,
                      chain=links, chain_links=length, chain_by_device=by_device,
                      waits=waits_by_rank(base.waits, rank_waits(changed_sg, after)),
                      reasons=reasons), counts
