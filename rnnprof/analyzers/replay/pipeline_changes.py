"""A pipeline's schedule changed: more or fewer micro-batches (``MICRO_BATCHES``), layers moved between its stages
(``MOVE_LAYER``). Neither maps onto the step graph's nodes (a micro-batch more is work no trace holds), so each is
replayed on the schedule itself, built from the step's per-micro-batch phases (each stage's forward and backward
work per micro-batch, the transfer between stages, torch's 1F1B or GPipe order), run unchanged and changed; the
difference of the two runs' ends is added to the step graph's replay, so the model's own error cancels.

* micro-batches M -> M': a micro-batch's operators take M / M' of their time, less what calling each costs
  (``call_us``: the step's view operators) and the gradients' accumulation (``AccumulateGrad``); those, the host
  work between them and the least work between phases (``Stages.run``) stay; sends and receives are the transfer.
* layers ``FROM:TO`` (``3,1:2,2``): each stage's work changes by the layers it gains or loses times one layer's
  time, that of the stage with the most layers over its layers.

Micro-batches are told apart by the capture's ``forward``/``backward`` ranges, else ScheduleGPipe's ``Forward i``/
``Backward i``; a job with no such pipeline, several stages per rank or GPU stages is refused (``ChangeError``).
The model as users read it: docs/commands/whatif.md, *Pipelines*."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rnnprof.analyzers.classify import EventClass
from rnnprof.analyzers.device_work import outermost_by_lane, thread_codes
from rnnprof.analyzers.replay.graph import DONE, EDGE_ARRIVAL, EVENT
from rnnprof.analyzers.replay.result import MICRO_BATCHES, MOVE_LAYER, Change, ChangeError
from rnnprof.analyzers.replay.step_graph import Knobs, StepGraph
from rnnprof.events import Kind
from rnnprof.events.names import (ACCUMULATE_GRAD, BACKWARD, FORWARD, GPIPE_RANGE, PHASE_RANGE, PP_ACTION_RANGE,
                                  SEND_RECV, VIEW_OPERATORS, collective_type)

SCHEDULE_KINDS = (MICRO_BATCHES, MOVE_LAYER)
MIN_VIEWS = 8  # view operators a step's phases need for their median to say what calling an operator costs
_GPIPE, _ONE_F_ONE_B = "gpipe", "1f1b"


@dataclass(frozen=True)
class Stages:
    """A step's pipeline as its phases give it: per stage (in order), its rank, its forward's and backward's
    median time per micro-batch and the part of each that shrinks with the micro-batch (its operators' time less
    what calling them costs, ``_Operators.call_us`` each, and the gradients' accumulation); the least work on the
    stage between the end of a forward (a backward) and its next phase (torch's schedule's Python around its
    transfers, the last stage's loss; the least, as the others also hold waits for input that the graph reads as
    work); the micro-batches, the transfer and the schedule."""

    ranks: tuple[str, ...]
    forward: np.ndarray
    backward: np.ndarray
    forward_ops: np.ndarray
    backward_ops: np.ndarray
    micro_batches: int
    transfer_us: float
    schedule: str
    after_forward: np.ndarray
    after_backward: np.ndarray

    def run(self, forward: np.ndarray, backward: np.ndarray, micro: int) -> float:
        """``run_schedule`` of phases ``forward``/``backward`` over ``micro`` micro-batches, each operation followed
        by its stage's work between phases."""
        return run_schedule(forward + self.after_forward, backward + self.after_backward, self.transfer_us, micro,
                            self.schedule)


def parse_layers(text: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``FROM:TO`` (``3,1:2,2``): each stage's layers now and after the move; a ``ChangeError`` where they are no
    two splits of one count of layers over the same stages."""
    before, sep, after = text.partition(":")
    try:
        old = tuple(int(x) for x in before.split(","))
        new = tuple(int(x) for x in after.split(","))
    except ValueError:
        old = new = ()
    if not sep or len(old) < 2 or len(old) != len(new) or sum(old) != sum(new) or min(old + new) < 1:
        raise ChangeError(f"--move-layer {text}: expected FROM:TO, each stage's layers now and after (3,1:2,2), "
                          f"as many stages and layers in both, every stage with a layer")
    return old, new


def pipeline(change: Change, sg: StepGraph, knobs: Knobs, rank: str) -> int:
    """Nothing of the graph changes: the change is the schedule's (``schedule_change_us``); the micro-batches'
    phases it is built from, counted."""
    stages = step_stages(sg)
    return 0 if stages is None else 2 * stages.micro_batches * len(stages.ranks)


def schedule_change_us(sg: StepGraph, changes) -> float:
    """The step's change by the schedule changes among ``changes`` (0 where none, or where the step holds no
    pipeline: ``refuse_without_pipeline`` judges the job); a ``ChangeError`` where a stage split names other stages
    than the step's."""
    asked = [c for c in changes if c.kind in SCHEDULE_KINDS]
    stages = step_stages(sg) if asked else None
    if stages is None:
        return 0.0
    forward, backward, micro = stages.forward.copy(), stages.backward.copy(), stages.micro_batches
    for c in asked:
        if c.kind == MICRO_BATCHES:
            new = int(c.factor)
            forward = forward - stages.forward_ops + stages.forward_ops * micro / new
            backward = backward - stages.backward_ops + stages.backward_ops * micro / new
            micro = new
        else:
            old, new = parse_layers(c.subject)
            if len(old) != len(stages.ranks):
                raise ChangeError(f"{c.describe()}: the pipeline has {len(stages.ranks)} stages, not {len(old)}")
            most = int(np.argmax(old))
            gained = np.array(new) - np.array(old)
            forward = forward + gained * stages.forward[most] / old[most]
            backward = backward + gained * stages.backward[most] / old[most]
    return stages.run(forward, backward, micro) - stages.run(stages.forward, stages.backward, stages.micro_batches)


def refuse_without_pipeline(changes, changed: dict[str, int], steps: int) -> None:
    """A ``ChangeError`` where a schedule change among ``changes`` found a pipeline in none of the ``steps`` steps
    (``changed``: per change, the phases it read over them, as ``pipeline`` counts them)."""
    for c in changes:
        if c.kind in SCHEDULE_KINDS and steps and not changed.get(c.describe()):
            raise ChangeError(f"{c.describe()}: no step holds a pipeline to replay: expected two ranks or more, each "
                              f"running the same number (2 or more) of micro-batches' forward and backward ranges "
                              f"(rnnprof's `forward`/`backward`, or ScheduleGPipe's `Forward i`/`Backward i`)")


def step_stages(sg: StepGraph) -> Stages | None:
    """The step's pipeline (``Stages``); None where fewer than two ranks run the same number (two or more) of
    forward and backward ranges in the step."""
    g = sg.graph
    ranges = _phase_ranges(sg)
    found = {}
    for worker in sorted(set(w for w, _ in ranges)):
        fwd, bwd = ranges.get((worker, FORWARD), []), ranges.get((worker, BACKWARD), [])
        if len(fwd) >= 2 and len(fwd) == len(bwd):
            found[worker] = (fwd, bwd)
    counts = {len(f) for f, _ in found.values()}
    if len(found) < 2 or len(counts) != 1:
        return None
    ranks = sorted(found, key=lambda w: found[w][0][0][0])  # by their first forward's start
    host = g.host & (g.node_kind == EVENT)
    kernels = ~g.host & (g.node_kind == EVENT) & (sg.cls == EventClass.COMPUTE)
    on_gpu = [w for w in ranks if np.any(kernels & (sg.worker == w))]
    if on_gpu:
        raise ChangeError(f"{on_gpu[0]} computes on a GPU: --micro-batches and --move-layer replay a pipeline's stages "
                          f"from their host threads' work, which on a GPU rank is the kernels' launches, not the "
                          f"kernels' time; they replay CPU ranks' pipelines")
    work = _HostWork(sg, host)
    call_us = work.operators.call_us([span for w in ranks for k in (0, 1) for span in found[w][k]])
    measured = [[work.per_micro_batch(found[w][k], w, call_us) for w in ranks] for k in (0, 1)]
    gaps = np.array([work.between(found[w], w) for w in ranks])
    stage0 = found[ranks[0]]
    schedule = _ONE_F_ONE_B if stage0[1][0][0] < stage0[0][-1][0] else _GPIPE
    return Stages(tuple(ranks), *(np.array([m[i] for m in measured[k]]) for k, i in ((0, 0), (1, 0), (0, 1), (1, 1))),
                  micro_batches=counts.pop(), transfer_us=_transfer(sg), schedule=schedule,
                  after_forward=gaps[:, 0], after_backward=gaps[:, 1])


class _HostWork:
    """A step graph's host work on a worker's threads between two times: its nodes' own time and the untraced host
    time before each, communication left out: a send's or receive's call and run are the schedule's transfer, and
    on gloo they hold the wait for the other stage (a send's run lasts until its receive is posted); another
    collective's is its group's wait, not the stage's work."""

    def __init__(self, sg: StepGraph, host: np.ndarray):
        g = sg.graph
        self.sg, self.host, self.operators = sg, host, _operators(sg)
        self.at, self.ends = sg.window_start + g.start, sg.window_start + g.end
        self.mine: dict[str, np.ndarray] = {}  # per worker, its host nodes but communication

    def __call__(self, worker: str, start: float, end: float) -> float:
        if worker not in self.mine:
            self.mine[worker] = self.host & (self.sg.worker == worker) & (self.sg.cls != EventClass.COMMUNICATION)
        k = self.mine[worker] & (self.at >= start) & (self.ends <= end)
        return float(self.sg.graph.dur[k].sum() + self.sg.graph.pre[k].sum())

    def per_micro_batch(self, spans, worker: str, call_us: float) -> tuple[float, float]:
        """The median work of the phases ``spans`` and the median part of it that shrinks with the micro-batch
        (``call_us``: what calling an operator costs, ``_Operators.call_us``)."""
        total = [self(worker, a, b) for a, b, _ in spans]
        return (float(np.median(total)), float(np.median([min(self.operators.shrinking_us(*span, call_us), t)
                                                          for span, t in zip(spans, total)])))

    def between(self, phases, worker: str) -> list[float]:
        """The least work between the end of a forward (a backward) of ``phases`` (forwards, backwards) and the
        worker's next phase."""
        ordered = sorted([(a, b, k) for k in (0, 1) for a, b, _ in phases[k]])
        after: tuple[list, list] = ([], [])
        for (_, end, k), (start, _, _) in zip(ordered, ordered[1:]):
            after[k].append(self(worker, end, start))
        return [float(np.min(x)) if x else 0.0 for x in after]


class _Operators:
    """A table's host operators (not collectives' calls) per thread, in start order, each with whether it is
    outermost and, for autograd's gradient accumulations (``ACCUMULATE_GRAD``), the operators recorded inside it
    (itself included); and its outermost view operators' time per operator recorded inside them (themselves
    included), what calling and recording an operator costs (``call_us``)."""

    def __init__(self, sg: StepGraph):
        t = sg.table
        rows = np.flatnonzero((t.kind == Kind.HOST_OP) & (sg.classes != EventClass.COMMUNICATION))
        thread = thread_codes(t)
        end = t.ts + t.dur
        # a job's step table holds an operator twice where it is a candidate and a named event too: kept once
        _, first = np.unique(np.stack([thread[rows], t.name[rows], t.ts[rows], t.dur[rows]]), axis=1,
                             return_index=True)
        rows = rows[np.sort(first)]
        outer = np.zeros(len(t), dtype=bool)
        for _, _, top in outermost_by_lane(thread, t.ts, end, rows).values():
            outer[top] = True
        views = np.isin(t.name, [c for c, name in enumerate(t.strings) if name in VIEW_OPERATORS])
        accumulates = np.isin(t.name, [c for c, name in enumerate(t.strings) if name == ACCUMULATE_GRAD])
        rows = rows[np.lexsort((t.ts[rows], thread[rows]))]
        self.threads: dict[tuple[str, int], tuple[np.ndarray, ...]] = {}
        self.views: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}  # per thread: starts, cost per call
        for mine in np.split(rows, np.flatnonzero(np.diff(thread[rows])) + 1) if len(rows) else ():
            starts = t.ts[mine]
            inside = np.searchsorted(starts, end[mine], "left") - np.searchsorted(starts, starts, "left")
            key = (t.devices[t.device[mine[0]]].worker, int(t.lane[mine[0]]))
            self.threads[key] = (starts, end[mine], t.dur[mine], outer[mine], np.where(accumulates[mine], inside, 0))
            view = outer[mine] & views[mine]
            self.views[key] = (starts[view], t.dur[mine[view]] / np.maximum(inside[view], 1))

    def call_us(self, spans) -> float:
        """What calling and recording an operator costs in ``spans`` ((start, end, (worker, lane)) each): the median
        of the outermost view operators' cost per call that start in them, 0 with fewer than ``MIN_VIEWS``."""
        costs = [cost[np.searchsorted(at, start, "left"):np.searchsorted(at, end, "right")]
                 for start, end, thread in spans if thread in self.views for at, cost in [self.views[thread]]]
        costs = np.concatenate(costs) if costs else np.zeros(0)
        return float(np.median(costs)) if len(costs) >= MIN_VIEWS else 0.0

    def shrinking_us(self, start: float, end: float, thread: tuple[str, int], call_us: float) -> float:
        """The part of the operators inside ``[start, end]`` on ``thread`` (worker, lane) that shrinks with their
        input: the outermost ones' time less ``call_us`` for each operator recorded and less the gradient
        accumulations' own work (their time less their operators' calls; 0 at least)."""
        if thread not in self.threads:
            return 0.0
        starts, ends, dur, outer, accumulated = self.threads[thread]
        k = slice(np.searchsorted(starts, start, "left"), np.searchsorted(starts, end, "right"))
        within = ends[k] <= end
        held = within & (accumulated[k] > 0)
        kept = np.maximum(dur[k][held] - call_us * accumulated[k][held], 0.0).sum()
        return max(float(dur[k][within & outer[k]].sum()) - call_us * int(within.sum()) - float(kept), 0.0)


def _operators(sg: StepGraph) -> _Operators:
    """The table's ``_Operators``, made once for all of its steps' graphs."""
    if "pipeline operators" not in sg.shared:
        sg.shared["pipeline operators"] = _Operators(sg)
    return sg.shared["pipeline operators"]


def _phase_ranges(sg: StepGraph) -> dict[tuple[str, str], list[tuple[float, float, tuple[str, int]]]]:
    """(worker, phase) -> the step's forward and backward ranges on it, (start, end, (worker, lane)) in start order:
    the capture's ``forward``/``backward`` ranges, else (a worker with none) ScheduleGPipe's ``Forward i``/
    ``Backward i``; a ``ChangeError`` where a worker runs several stages (``PP:<stage>...`` ranges of two or more)."""
    t = sg.table
    steps = np.unique(t.step[sg.graph.rows[sg.graph.own]])
    phase_of, stage_of = {}, {}
    for code, name in enumerate(t.strings):
        if (found := PHASE_RANGE.match(name)) and found.group(1).lower() in (FORWARD, BACKWARD):
            phase_of[code] = (0, found.group(1).lower())
        elif found := GPIPE_RANGE.match(name):
            phase_of[code] = (1, found.group(1).lower())
        elif found := PP_ACTION_RANGE.match(name):
            stage_of[code] = int(found.group(1))
    in_step = np.isin(t.step, steps)
    _refuse_interleaved(sg, np.flatnonzero(np.isin(t.name, list(stage_of)) & in_step) if stage_of else [], stage_of)
    rows = np.flatnonzero(np.isin(t.name, list(phase_of)) & in_step) if phase_of else []
    by_source: dict[tuple[str, int, str], list[tuple[float, float, tuple[str, int]]]] = {}
    for r in sorted(rows, key=lambda r: t.ts[r]):
        source, phase = phase_of[int(t.name[r])]
        key = (t.devices[t.device[r]].worker or "host", source, phase)
        by_source.setdefault(key, []).append((float(t.ts[r]), float(t.ts[r] + t.dur[r]),
                                              (t.devices[t.device[r]].worker, int(t.lane[r]))))
    first = {}  # per worker, the first source that it holds
    for worker, source, _ in by_source:
        first[worker] = min(source, first.get(worker, source))
    return {(worker, phase): spans for (worker, source, phase), spans in by_source.items() if source == first[worker]}


def _refuse_interleaved(sg: StepGraph, rows, stage_of: dict[int, int]) -> None:
    t = sg.table
    stages: dict[str, set[int]] = {}
    for r in rows:
        stages.setdefault(t.devices[t.device[r]].worker or "host", set()).add(stage_of[int(t.name[r])])
    several = sorted((w, sorted(s)) for w, s in stages.items() if len(s) > 1)
    if several:
        worker, held = several[0]
        raise ChangeError(f"{worker} runs stages {', '.join(map(str, held))} (an interleaved schedule's PP: ranges): "
                          f"--micro-batches and --move-layer replay schedules of one stage per rank (1F1B, GPipe)")


def _transfer(sg: StepGraph) -> float:
    """The median time of the step's matched collectives' transfers (done nodes) whose members are a send and its
    receive, 0 where none is matched."""
    g = sg.graph
    done = np.flatnonzero(g.node_kind == DONE)
    if not len(done):
        return 0.0
    names = np.asarray(sg.table.strings, dtype=object)[sg.table.name[g.rows]]
    into = g.edge_kind(EDGE_ARRIVAL)
    arrivals = {}
    for u, v in zip(g.src[into].tolist(), g.dst[into].tolist()):
        arrivals.setdefault(v, []).append(u)
    p2p = [d for d in done.tolist() if any(collective_type(names[a]) == SEND_RECV for a in arrivals.get(d, []))]
    return float(np.median(g.dur[p2p])) if p2p else 0.0


def run_schedule(forward: np.ndarray, backward: np.ndarray, transfer_us: float, micro: int, schedule: str) -> float:
    """When the last stage's last operation ends, each operation as soon as its stage is free and its input is
    there (``forward``, ``backward``: each stage's time per micro-batch)."""
    stages = len(forward)
    orders = [_order(s, stages, micro, schedule) for s in range(stages)]
    done = {}
    free = [0.0] * stages
    position = [0] * stages
    left = sum(len(o) for o in orders)
    while left:
        moved = False
        for s in range(stages):
            while position[s] < len(orders[s]):
                phase, m = orders[s][position[s]]
                ready = _ready(done, phase, s, m, stages, transfer_us)
                if ready is None:
                    break
                start = max(free[s], ready)
                free[s] = done[(phase, s, m)] = start + (forward[s] if phase == FORWARD else backward[s])
                position[s] += 1
                left -= 1
                moved = True
        if not moved:
            raise ChangeError("the pipeline's schedule waits on itself (its stages' orders disagree)")
    return max(free)


def _ready(done: dict, phase: str, s: int, m: int, stages: int, transfer_us: float) -> float | None:
    """When an operation's input is there (None: not yet known): a forward's from the previous stage, a backward's
    from the next stage (the last stage's: its own forward, which its order runs first)."""
    if phase == FORWARD:
        key, hop = (FORWARD, s - 1, m), transfer_us
        if s == 0:
            return 0.0
    else:
        key, hop = ((BACKWARD, s + 1, m), transfer_us) if s < stages - 1 else ((FORWARD, s, m), 0.0)
    return done[key] + hop if key in done else None


def _order(stage: int, stages: int, micro: int, schedule: str) -> list[tuple[str, int]]:
    """A stage's operations in torch's order (``Schedule1F1B``, ``ScheduleGPipe``)."""
    if schedule == _GPIPE:
        return [(FORWARD, m) for m in range(micro)] + [(BACKWARD, m) for m in range(micro)]
    warmup = min(micro, stages - stage)
    order = [(FORWARD, m) for m in range(warmup)]
    f, b = warmup, 0
    while b < micro:
        order.append((BACKWARD, b))
        b += 1
        if f < micro:
            order.append((FORWARD, f))
            f += 1
    return order
