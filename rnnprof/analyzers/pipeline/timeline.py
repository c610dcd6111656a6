"""One pipeline rank's part of a table, as the pipeline analysis needs it (``rank_timelines``): its work, each piece
told forward, backward or other, with its stage index and micro-batch where the trace names them; its sends and
receives, keyed as ``collectives.instances`` matches them across ranks; its process group.

The work is the rank's compute as ``comm`` measures it (``comm.compute_intervals``: a GPU's kernels, a CPU rank's
operators), less the optimizer's (``Optimizer.step#``, ``Optimizer.zero_grad#``). A CPU rank whose trace holds
``forward``/``backward`` ranges around each micro-batch (rnnprof's pipelines record them around
``forward_one_chunk``/``backward_one_chunk``) works for their whole length: the Python between its operators is the
stage's work too. Which micro-batch a piece is: the innermost of those ranges, torch's ``PP:<stage><action><mb>``
(interleaved schedules) and ScheduleGPipe's ``Forward i``/``Backward i`` that holds it (a GPU kernel: its launch);
a piece in none is backward inside an autograd backward function, else forward where the trace has no such
ranges, else other work (a loss, a split of the batch). Definitions: docs/commands/pipeline.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rnnprof.analyzers.collectives import BY_ORDER, EXCHANGE, Instance, instances
from rnnprof.analyzers.comm import compute_intervals
from rnnprof.analyzers.device_work import host_operator_devices, launchers
from rnnprof.analyzers.intervals import merge, subtract
from rnnprof.events import EventTable, Kind
from rnnprof.events.names import (BACKWARD, BACKWARD_FUNCTION, CPU_COLLECTIVE_CALL, CPU_COLLECTIVE_RUN, FORWARD,
                                  GPIPE_RANGE, OPTIMIZER_STEP, OPTIMIZER_ZERO_GRAD, PHASE_RANGE, PP_ACTION_RANGE,
                                  SEND_RECV, collective_type, p2p_direction)

FORWARD_WORK, BACKWARD_WORK, OTHER_WORK = 0, 1, 2  # ``Work.kind``
RANGES_RNNPROF, RANGES_PP, RANGES_GPIPE = "forward/backward ranges", "PP:<stage><action><micro-batch> ranges", \
    "Forward i/Backward i ranges"


@dataclass(frozen=True)
class Work:
    """A rank's work as parallel arrays, on its table's clock."""

    start: np.ndarray
    end: np.ndarray
    step: np.ndarray
    kind: np.ndarray  # FORWARD_WORK, BACKWARD_WORK, OTHER_WORK
    stage: np.ndarray  # the stage index its range names (-1: not named)
    micro_batch: np.ndarray  # -1: not named

    @property
    def pipelined(self) -> np.ndarray:
        """The forward and backward work (a micro-batch's), not the other."""
        return self.kind != OTHER_WORK


@dataclass(frozen=True)
class PeerTransfer:
    """A send or a receive of the rank: its key (equal on its partner's side), interval, direction and peer."""

    key: tuple
    start_us: float  # when the rank posted it (a CPU rank: its c10d call's start)
    end_us: float  # when it completed
    send: int  # 1 a send, 0 a receive, 2 both (an exchange: a send and a receive in one kernel), -1 not known
    peer: int  # the other side's global rank (-1: not known)
    step: int


@dataclass(frozen=True)
class RankTimeline:
    """What the pipeline analysis needs of one rank (small: it travels back from a job's worker processes)."""

    worker: str
    rank: int  # its global rank (-1: the worker's name does not say)
    group: str  # the process group of its sends and receives
    members: tuple[int, ...]  # that group's global ranks as the trace lists them (): not listed)
    time_base_us: float
    work: Work
    transfers: tuple[PeerTransfer, ...]
    ranges: str  # which ranges told its micro-batches apart ("" none)
    micro_batches: dict[int, int]  # step -> the forward micro-batches the ranges name, per stage index (most)
    stages_seen: tuple[int, ...]  # the stage indices its ranges name


def rank_timelines(table: EventTable, per_worker: dict[str, list[Instance]] | None = None,
                   classes: np.ndarray | None = None) -> list[RankTimeline]:
    """One ``RankTimeline`` per worker of ``table`` that sends or receives (``per_worker``: the table's
    ``collectives.instances``, ``classes``: its ``classify``, when the caller has them)."""
    if per_worker is None and not _sends_or_receives(table):
        return []
    per_worker = instances(table) if per_worker is None else per_worker
    p2p = {w: [i for i in found if i.collective == SEND_RECV] for w, found in per_worker.items()}
    p2p = {w: found for w, found in p2p.items() if found}
    if not p2p:
        return []
    starts, ends, rows = compute_intervals(table, classes=classes)
    host_time = table.ts.copy()
    launched = launchers(table)
    host_time[launched >= 0] = table.ts[launched[launched >= 0]]
    marks = _Marks(table)
    cpu_ranks = {table.devices.index(d) for d in host_operator_devices(table) if d in table.devices}
    found = []
    for worker, transfers in sorted(p2p.items()):
        here = np.array([table.devices[d].worker == worker for d in table.device[rows].tolist()], dtype=bool)
        on_cpu = bool(here.any()) and all(int(d) in cpu_ranks for d in np.unique(table.device[rows[here]]))
        work, ranges, micro, seen = marks.work(worker, starts[here], ends[here], rows[here], host_time, on_cpu)
        group = max({i.group for i in transfers}, key=lambda g: sum(i.group == g for i in transfers))
        members = next((g.ranks for g in table.metadata.process_groups if g.name == group), ())
        posted = _posted(table, worker, transfers)
        moved = tuple(_transfer(table, i, posted.get(i.row)) for i in transfers)
        if not ranges:
            work = _between_transfers(work, moved)
        found.append(RankTimeline(worker, _rank(worker), group, members, table.time_base_us, work, moved, ranges,
                                  micro, seen))
    return found


def _sends_or_receives(table: EventTable) -> bool:
    """Whether any communication event of the table is a send or a receive by its name or its record (cheap: the
    distinct names only), before the collectives are matched."""
    names = np.unique(table.name[table.kind == Kind.COMMUNICATION])
    if any(collective_type(table.strings[c]) == SEND_RECV for c in names.tolist()):
        return True
    calls = np.unique(table.collectives.call) if len(table.collectives) else np.zeros(0, dtype=np.int64)
    return any(collective_type(table.strings[c]) == SEND_RECV for c in calls.tolist() if c > 0)


def _rank(worker: str) -> int:
    digits = worker.removeprefix("rank")
    return int(digits) if digits.isdigit() else -1


def _direction(text: str) -> int:
    """1 a send, 0 a receive, -1 not told (NCCL's ``SendRecv``): ``names.p2p_direction`` as a number."""
    return {"send": 1, "recv": 0}.get(p2p_direction(text), -1)


def _posted(table: EventTable, worker: str, transfers: list[Instance]) -> dict[int, tuple[float, float]]:
    """For a CPU rank's sends and receives that gloo's worker thread ran, when the rank posted each (its
    ``c10d::send``/``c10d::recv_`` call: gloo records the run of a receive only once its data is there) and when
    that call returned: each run with the earliest call of its direction not yet matched that started before it,
    as a group runs its work in order."""
    runs = [i for i in transfers if CPU_COLLECTIVE_RUN.match(i.name)]
    if not runs:
        return {}
    names = table.strings
    devices = [k for k, d in enumerate(table.devices) if d.worker == worker]
    rows = np.flatnonzero(np.isin(table.device, devices) & (table.kind == Kind.COMMUNICATION))
    calls = [r for r in rows[np.argsort(table.ts[rows], kind="stable")].tolist()
             if CPU_COLLECTIVE_CALL.match(names[table.name[r]]) and collective_type(names[table.name[r]]) == SEND_RECV]
    pending: dict[int, list[int]] = {0: [], 1: []}
    found = {}
    for run in sorted(runs, key=lambda i: i.start_us):
        while calls and table.ts[calls[0]] <= run.start_us:
            call = calls.pop(0)
            pending.setdefault(_direction(names[table.name[call]]), []).append(call)
        mine = pending.get(_direction(run.name), [])
        if mine:
            call = mine.pop(0)
            found[run.row] = (float(table.ts[call]), float(table.ts[call] + table.dur[call]))
    return found


def _transfer(table: EventTable, inst: Instance, posted: tuple[float, float] | None) -> PeerTransfer:
    records = table.collectives
    k = np.flatnonzero(records.row == inst.row)
    send = _direction(table.strings[records.call[k[0]]] if len(k) else inst.name)
    peer = int(records.peer[k[0]]) if len(k) else -1
    pair = inst.key[2] if inst.key[0] == BY_ORDER and isinstance(inst.key[2], tuple) else None
    if pair is not None and pair[0] == EXCHANGE:
        send = 2
    elif pair is not None and send >= 0:
        peer = pair[1] if send else pair[0]
    start, end = inst.start_us, inst.end_us
    if posted is not None:
        start, end = min(start, posted[0]), max(end, posted[1])
    return PeerTransfer(inst.key, start, end, send, peer, inst.step)


class _Marks:
    """The ranges of a table that tell a rank's work apart, by worker."""

    def __init__(self, table: EventTable):
        self.table = table
        names = table.strings
        marked = np.isin(table.kind, (Kind.ANNOTATION, Kind.HOST_OP))
        self.worker = np.array([d.worker for d in table.devices] or [""], dtype=object)[table.device]
        phase = np.array([(m.group(1).lower() if (m := PHASE_RANGE.match(s)) else "") for s in names], dtype=object)
        self.phase_rows = np.flatnonzero(marked & np.isin(phase[table.name], (FORWARD, BACKWARD)))
        self.phase = phase
        self.pp = {c: m for c, s in enumerate(names) if (m := PP_ACTION_RANGE.match(s))}
        self.gpipe = {c: m for c, s in enumerate(names) if (m := GPIPE_RANGE.match(s))}
        self.pp_rows = np.flatnonzero(marked & np.isin(table.name, list(self.pp)))
        self.gpipe_rows = np.flatnonzero(marked & np.isin(table.name, list(self.gpipe)))
        optimizer = np.array([s.startswith((OPTIMIZER_STEP, OPTIMIZER_ZERO_GRAD)) for s in names], dtype=bool)
        self.optimizer_rows = np.flatnonzero(marked & optimizer[table.name])
        backward_fn = np.array([s.startswith(BACKWARD_FUNCTION) for s in names], dtype=bool)
        self.backward_rows = np.flatnonzero(marked & backward_fn[table.name])

    def _mine(self, rows: np.ndarray, worker: str) -> np.ndarray:
        return rows[self.worker[rows] == worker]

    def work(self, worker: str, starts: np.ndarray, ends: np.ndarray, rows: np.ndarray, host_time: np.ndarray,
             on_cpu: bool):
        """The worker's work, which ranges told it apart, its forward micro-batches per step, its stage indices."""
        t = self.table
        phase = self._mine(self.phase_rows, worker)
        per_micro_batch = _per_micro_batch(t, phase, self.phase)
        # work on a CPU rank with ranges around each micro-batch: the ranges, and its operators outside them
        if on_cpu and per_micro_batch:
            spans = merge(t.ts[phase], t.end[phase])
            outside_s, outside_e, origin = subtract(starts, ends, *spans)
            starts = np.concatenate([t.ts[phase], outside_s])
            ends = np.concatenate([t.end[phase], outside_e])
            at = np.concatenate([t.ts[phase] + 0.5 * t.dur[phase], 0.5 * (outside_s + outside_e)])
            steps = np.concatenate([t.step[phase], t.step[rows[origin]]])
        else:  # a piece's moment: its middle, a GPU kernel's launch
            steps = t.step[rows]
            at = np.where(host_time[rows] != t.ts[rows], host_time[rows], 0.5 * (starts + ends))
        keep = ~_inside(at, *self._spans(self._mine(self.optimizer_rows, worker)))
        starts, ends, at, steps = starts[keep], ends[keep], at[keep], steps[keep]
        kind = np.full(len(starts), OTHER_WORK, dtype=np.int8)
        stage = np.full(len(starts), -1, dtype=np.int32)
        micro = np.full(len(starts), -1, dtype=np.int32)
        ranges = self._label(worker, at, kind, stage, micro, phase if per_micro_batch else phase[:0])
        backward = _inside(at, *self._spans(self._mine(self.backward_rows, worker)))
        unlabelled = kind == OTHER_WORK
        kind[unlabelled & backward] = BACKWARD_WORK
        if not ranges:
            kind[unlabelled & ~backward] = FORWARD_WORK
        work = _merged(Work(starts, ends, steps.astype(np.int64), kind, stage, micro))
        return work, ranges, _forward_micro_batches(work), tuple(sorted(set(stage[stage >= 0].tolist())))

    def _spans(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return merge(self.table.ts[rows], self.table.end[rows])

    def _label(self, worker: str, at: np.ndarray, kind: np.ndarray, stage: np.ndarray, micro: np.ndarray,
               phase: np.ndarray) -> str:
        """Each piece's kind, stage and micro-batch from the ranges holding ``at``, the outer first so that the
        innermost one decides; which ranges there were."""
        t, told = self.table, []
        gpipe, pp = self._mine(self.gpipe_rows, worker), self._mine(self.pp_rows, worker)
        for rows, how in ((gpipe, RANGES_GPIPE), (pp, RANGES_PP), (phase, RANGES_RNNPROF)):
            if not len(rows):
                continue
            told.append(how)
            ordinal = _ordinals(t, rows, self.phase) if how == RANGES_RNNPROF else {}
            for r in rows[np.argsort(-t.dur[rows], kind="stable")].tolist():
                inside = (at >= t.ts[r]) & (at <= t.ts[r] + t.dur[r])
                name = t.name[r]
                if how == RANGES_RNNPROF:
                    kind[inside] = FORWARD_WORK if self.phase[name] == FORWARD else BACKWARD_WORK
                    micro[inside & (micro < 0)] = ordinal[r]
                    continue
                match = self.gpipe[name] if how == RANGES_GPIPE else self.pp[name]
                action = match.group(1) if how == RANGES_GPIPE else match.group(2)
                kind[inside] = FORWARD_WORK if action in ("F", "Forward") else BACKWARD_WORK
                micro[inside] = int(match.group(2) if how == RANGES_GPIPE else match.group(3))
                if how == RANGES_PP:
                    stage[inside] = int(match.group(1))
        return ", ".join(told)


def _between_transfers(work: Work, transfers: tuple[PeerTransfer, ...]) -> Work:
    """Work told apart by no range, bounded by the rank's transfers in each step: a stage whose first transfer is a
    receive works on no micro-batch until that receive completes (before: splitting the batch, say), and after its
    last transfer only backward work is a micro-batch's (the rest: scaling the gradients, the loss's bookkeeping)."""
    kind = work.kind.copy()
    for step in np.unique(work.step).tolist():
        mine = sorted((x for x in transfers if x.step == step), key=lambda x: x.start_us)
        if not mine:
            continue
        here = work.step == step
        if mine[0].send == 0:
            kind[here & (work.start < mine[0].end_us)] = OTHER_WORK
        last = max(x.end_us for x in mine)
        kind[here & (work.start >= last) & (kind != BACKWARD_WORK)] = OTHER_WORK
    return Work(work.start, work.end, work.step, kind, work.stage, work.micro_batch)


def _merged(work: Work) -> Work:
    """The work with the pieces of each (step, kind, stage, micro-batch) merged (an operator and the operators it
    calls are one piece), by start."""
    keys = np.stack([work.step, work.kind.astype(np.int64), work.stage.astype(np.int64),
                     work.micro_batch.astype(np.int64)], axis=1)
    if not len(keys):
        return work
    unique, group = np.unique(keys, axis=0, return_inverse=True)
    parts = []
    for g, key in enumerate(unique.tolist()):
        s, e = merge(work.start[group.reshape(-1) == g], work.end[group.reshape(-1) == g])
        parts.append((s, e, *(np.full(len(s), v) for v in key)))
    s, e, step, kind, stage, micro = (np.concatenate(column) for column in zip(*parts))
    order = np.argsort(s, kind="stable")
    return Work(s[order], e[order], step[order].astype(np.int64), kind[order].astype(np.int8),
                stage[order].astype(np.int32), micro[order].astype(np.int32))


def _inside(t: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Whether each time lies in one of the sorted, disjoint intervals."""
    if not len(starts):
        return np.zeros(len(t), dtype=bool)
    k = np.searchsorted(starts, t, side="right") - 1
    return (k >= 0) & (t <= ends[np.maximum(k, 0)])


def _ordinals(table: EventTable, rows: np.ndarray, phase: np.ndarray) -> dict[int, int]:
    """Each forward (backward) range's place among the rank's forward (backward) ranges of its step: its
    micro-batch, which 1F1B and GPipe forward and take backward in order."""
    found, seen = {}, {}
    for r in rows[np.argsort(table.ts[rows], kind="stable")].tolist():
        key = (int(table.step[r]), phase[table.name[r]])
        found[r] = seen.get(key, 0)
        seen[key] = found[r] + 1
    return found


def _per_micro_batch(table: EventTable, rows: np.ndarray, phase: np.ndarray) -> bool:
    """Whether the forward ranges mark micro-batches: two or more in a step (one around a whole step marks none)."""
    forward = rows[phase[table.name[rows]] == FORWARD]
    steps = table.step[forward]
    return bool(len(forward)) and int(np.bincount(steps[steps >= 0]).max(initial=0)) >= 2


def _forward_micro_batches(work: Work) -> dict[int, int]:
    """Per step, the forward micro-batches the ranges name, per stage index (the most of any stage index)."""
    found: dict[int, int] = {}
    named = (work.kind == FORWARD_WORK) & (work.micro_batch >= 0)
    for step in np.unique(work.step[named]).tolist():
        mine = named & (work.step == step)
        pairs = set(zip(work.stage[mine].tolist(), work.micro_batch[mine].tolist()))
        per_stage: dict[int, int] = {}
        for stage, _ in pairs:
            per_stage[stage] = per_stage.get(stage, 0) + 1
        found[int(step)] = max(per_stage.values())
    return found
