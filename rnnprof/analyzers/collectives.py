"""Collectives matched across ranks: who arrives last at each, by how much, and the straggler rank.

A rank's collectives are its NCCL kernels on a GPU, or on a CPU rank the ranges gloo's worker threads record
(``names.CPU_COLLECTIVE_RUN``), else its ``c10d::*`` calls. The same collective has the same key on every
rank: ``(group, seq)`` where the trace records them (``metadata.collective_args``), else ``(group, name, k)``,
the k-th of that name in the group by start time (the group: the process group, as recorded or as the
loader inferred it (``events.collectives``), else the GPU stream, else one per CPU rank); a send and its
receive by ``(group, (sender, receiver), k)`` where their peers are known. Each has its type
(``classify.collective_types``; "+"-joined should members differ).

Per collective seen on two or more ranks: the arrival skew (last start - first start) and the rank that came
last; per rank: how often it came last, the waiting it caused and the waiting it did. The straggler arrived
last most often, ties broken by the waiting it caused. The ranks must share a clock or be aligned first
(``rnnprof.analyzers.align``). The figures as reported: docs/commands/comm.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from rnnprof.analyzers.classify import collective_types
from rnnprof.analyzers.device_work import host_operator_devices
from rnnprof.analyzers.noise import CPU_RANK_FLOOR_US, CROSS_RANK_FLOOR_US, MIN_STEPS, significance
from rnnprof.events import EventTable, Kind
from rnnprof.events.names import (COLLECTIVE_TYPES, CPU_COLLECTIVE_CALL, CPU_COLLECTIVE_RUN, FSDP_FORWARD_PREFETCH,
                                  NCCL_KERNEL, SEND_RECV, UNKNOWN_COLLECTIVE, collective_type, p2p_direction)

BY_SEQ = "seq"
BY_ORDER = "order"


@dataclass(frozen=True)
class Instance:
    """One collective on one rank: its key (equal on every member), name and interval."""

    key: tuple
    name: str
    group: str
    start_us: float
    end_us: float
    row: int = field(default=-1, compare=False)  # the event's row in the table it was found in
    collective: str = field(default=UNKNOWN_COLLECTIVE, compare=False)  # its type (rnnprof.events.names.COLLECTIVE_TYPES)
    step: int = field(default=-1, compare=False)  # the step of its event (-1: none)
    sends: bool = field(default=False, compare=False)  # a send matched with its receive by (sender, receiver)

    @property
    def dur_us(self) -> float:
        return self.end_us - self.start_us


@dataclass(frozen=True)
class Arrival:
    worker: str
    start_us: float
    end_us: float
    wait_us: float  # last member's start - this one's

    def as_dict(self) -> dict:
        return {"rank": self.worker, "start_us": self.start_us, "end_us": self.end_us, "wait_us": self.wait_us}


@dataclass(frozen=True)
class Collective:
    name: str
    group: str
    index: int  # sequence number (matched by seq) or k-th of its name in the group (matched by order)
    matched_by: str
    arrivals: tuple[Arrival, ...]  # by rank
    collective_type: str = UNKNOWN_COLLECTIVE  # rnnprof.events.names.COLLECTIVE_TYPES; the members' known one
    step: int = -1  # the earliest step among its members' events (-1: none known)

    @property
    def last(self) -> Arrival:
        return max(self.arrivals, key=lambda a: (a.start_us, a.worker))

    @property
    def skew_us(self) -> float:
        starts = [a.start_us for a in self.arrivals]
        return max(starts) - min(starts)

    @property
    def end_spread_us(self) -> float:
        ends = [a.end_us for a in self.arrivals]
        return max(ends) - min(ends)

    @property
    def caused_wait_us(self) -> float:
        return sum(a.wait_us for a in self.arrivals)

    def as_dict(self) -> dict:
        return {"name": self.name, "collective_type": self.collective_type, "group": self.group, "index": self.index,
                "matched_by": self.matched_by, "step": self.step, "ranks": len(self.arrivals), "last_rank": self.last.worker, "skew_us": self.skew_us,
                "caused_wait_us": self.caused_wait_us, "end_spread_us": self.end_spread_us,
                "arrivals": [a.as_dict() for a in self.arrivals]}


@dataclass(frozen=True)
class RankArrivals:
    worker: str
    collectives: int  # matched collectives it is a member of
    arrived_last: int
    caused_wait_us: float  # the other members' waits at the collectives it arrived last at
    waited_us: float  # its own waits for the last member

    def as_dict(self) -> dict:
        return {"rank": self.worker, "collectives": self.collectives, "arrived_last": self.arrived_last,
                "caused_wait_us": self.caused_wait_us, "waited_us": self.waited_us}


@dataclass(frozen=True)
class CollectivesReport:
    collectives: tuple[Collective, ...]  # in order of the first member's start
    ranks: tuple[RankArrivals, ...]
    straggler: str | None  # arrived last most often, then caused the most waiting; None without a match
    unmatched: int  # collectives seen on one rank only
    workers: int = 0  # ranks with collectives

    def _shared(self, worker: str, by_step: bool):
        """(key, collective, ``worker``'s start, the latest other member's start) of each collective ``worker``
        shares with another rank; the key is its step (with ``by_step``, where known), else -1, -2, ..."""
        for i, c in enumerate(self.collectives):
            mine = [a.start_us for a in c.arrivals if a.worker == worker]
            others = [a.start_us for a in c.arrivals if a.worker != worker]
            if mine and others:
                yield (c.step if c.step >= 0 and by_step else -1 - i), c, mine[0], max(others)

    def lateness(self, worker: str, by_step: bool = True) -> dict[int, float]:
        """Per step (per collective where no step is known, or with ``by_step`` False: keys -1, -2, ...), how
        much later ``worker`` arrived than the latest other member, summed over the step's collectives
        (negative: earlier)."""
        out: dict[int, float] = {}
        for key, _, mine, latest_other in self._shared(worker, by_step):
            out[key] = out.get(key, 0.0) + mine - latest_other
        return out

    def lateness_verdict(self, worker: str, jitter_us: float = 0.0):
        """The worker's lateness (``lateness``: per step, or per collective when fewer than ``noise.MIN_STEPS``
        steps hold collectives) and its median judged against the run's jitter (``rnnprof.analyzers.noise``, with
        the floor between ranks, ``lateness_floor``)."""
        late, per = self.lateness(worker), "step"
        if len(late) < MIN_STEPS:
            late, per = self.lateness(worker, by_step=False), "collective"
        return late, significance(list(late.values()), jitter_us, per, self.lateness_floor(worker, per == "step"))

    def lateness_floor(self, worker: str, by_step: bool = True) -> float:
        """The least lateness called for ``worker``: ``noise.CROSS_RANK_FLOOR_US``; where its collectives run on
        a CPU (gloo), ``noise.CPU_RANK_FLOOR_US`` per collective, times the median number of its collectives per
        step (one per sample when ``by_step`` is False): the collectives ``lateness`` sums."""
        counts: dict[int, int] = {}
        cpu = False
        for key, c, _, _ in self._shared(worker, by_step):
            counts[key] = counts.get(key, 0) + 1
            cpu = cpu or bool(CPU_COLLECTIVE_RUN.match(c.name) or CPU_COLLECTIVE_CALL.match(c.name))
        if not cpu or not counts:
            return CROSS_RANK_FLOOR_US
        return max(CROSS_RANK_FLOOR_US, CPU_RANK_FLOOR_US * float(np.median(list(counts.values()))))

    def straggler_significance(self, jitter_us: float = 0.0):
        """The straggler's ``lateness_verdict``'s verdict; None without a straggler."""
        return None if self.straggler is None else self.lateness_verdict(self.straggler, jitter_us)[1]

    def as_dict(self) -> dict:
        return {"straggler": self.straggler, "matched": len(self.collectives), "unmatched": self.unmatched,
                "ranks": [r.as_dict() for r in self.ranks],
                "collectives": [c.as_dict() for c in self.collectives]}


def collective_args(table: EventTable) -> dict[tuple[str, int], tuple[str, int]]:
    """``(worker, correlation) -> (process group, seq)`` of the NCCL kernels whose args name them (the first
    trace's where two merged traces share a worker)."""
    found: dict[tuple[str, int], tuple[str, int]] = {}
    for args in reversed(table.metadata.collective_args):
        for c, g, s in zip(args.correlation, args.group, args.seq):
            found[(args.worker, c)] = (g, s)
    return found


def forward_prefetches(table: EventTable) -> dict[tuple[str, int], int]:
    """Per ``(worker, step)``, its ``FSDP::forward_prefetch`` ranges (``names.FSDP_FORWARD_PREFETCH``): each a
    block's prefetch of a later block's all-gather, which the trace already issued early."""
    names = np.array([bool(FSDP_FORWARD_PREFETCH.match(s)) for s in table.strings] or [False], dtype=bool)
    ranges = np.flatnonzero(names[table.name])
    worker = np.array([d.worker or "host" for d in table.devices] or [""], dtype=object)
    found: dict[tuple[str, int], int] = {}
    for w, s in zip(worker[table.device[ranges]].tolist(), table.step[ranges].tolist()):
        found[(w, s)] = found.get((w, s), 0) + 1
    return found


def instances(table: EventTable) -> dict[str, list[Instance]]:
    """Per worker (rank), its collectives in start order (the module docstring says which), keyed for matching."""
    args = collective_args(table)
    names = np.asarray(table.strings, dtype=object)
    recorded = dict(zip(table.collectives.row.tolist(), names[table.collectives.group]))  # row -> group ("": unknown)
    pairs = _p2p_pairs(table)
    ordered = _collective_rows(table)
    # every worker's types at once: a merged job's table is read once, not once per rank
    every = np.concatenate([rows for rows, _, _ in ordered.values()]) if ordered else np.zeros(0, dtype=np.int64)
    all_types = collective_types(table, every).tolist()
    first = 0
    result: dict[str, list[Instance]] = {}
    for worker, (rows, starts, ends) in ordered.items():
        types = all_types[first:first + len(rows)]
        first += len(rows)
        ordinal: dict[tuple, int] = {}
        found = []
        for r, start, end, kind in zip(rows, starts.tolist(), ends.tolist(), types):
            name = names[table.name[r]]
            on_gpu = table.devices[table.device[r]].kind == "gpu"
            group, seq = args.get((worker, int(table.correlation[r])), ("", -1)) if on_gpu else ("", -1)
            group = recorded.get(int(r), group) or group
            if seq >= 0:
                key = (BY_SEQ, group, seq)
            else:
                if not group and on_gpu:
                    group = names[table.lane[r]]
                what = pairs.get(int(r), name)  # a send and its receive: (sender, receiver), alike on both
                k = ordinal.get((group, what), 0)
                ordinal[(group, what)] = k + 1
                key = (BY_ORDER, group, what, k)
            found.append(Instance(key, name, group, start, end, int(r), COLLECTIVE_TYPES[kind],
                                  int(table.step[r]), int(r) in pairs and _sends(worker, pairs[int(r)])))
        result[worker] = found
    return result


EXCHANGE = "exchange"  # a send and a receive with one peer carried out together (one NCCL kernel on each side)


def _p2p_pairs(table: EventTable) -> dict[int, tuple]:
    """``row -> (sender, receiver)`` (global ranks) of the sends and receives whose peer the records name, on
    workers named ``rank<r>``: the k-th send from A to B in a group is the k-th receive at B from A; an exchange
    (a send and a receive fused, ``recv+send``): ``(EXCHANGE, lower, higher)``, the k-th between A and B on both."""
    records, found = table.collectives, {}
    for k in np.flatnonzero(records.peer >= 0).tolist():
        row = int(records.row[k])
        me = table.devices[table.device[row]].worker.removeprefix("rank")
        call = table.strings[records.call[k]]
        direction, peer = p2p_direction(call), int(records.peer[k])
        if not me.isdigit():
            continue
        if direction:
            found[row] = (int(me), peer) if direction == "send" else (peer, int(me))
        elif collective_type(call) == SEND_RECV:
            found[row] = (EXCHANGE, *sorted((int(me), peer)))
    return found


def _sends(worker: str, pair: tuple) -> bool:
    """Whether ``worker`` (``rank<r>``) is the sender of a send and its receive ``(sender, receiver)`` (an exchange:
    neither side is; both wait for both)."""
    return pair[0] != EXCHANGE and worker.removeprefix("rank") == str(pair[0])


def _collective_rows(table: EventTable) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per worker, the rows of its collectives (NCCL kernels on its GPUs; a CPU rank's gloo runs, else its c10d
    calls) by start then end, with their starts and ends."""
    comm = table.kind == Kind.COMMUNICATION
    is_nccl = np.fromiter((bool(NCCL_KERNEL.match(s)) for s in table.strings), dtype=bool, count=len(table.strings))
    is_run = np.fromiter((bool(CPU_COLLECTIVE_RUN.match(s)) for s in table.strings), dtype=bool,
                         count=len(table.strings))
    is_call = np.fromiter((bool(CPU_COLLECTIVE_CALL.match(s)) for s in table.strings), dtype=bool,
                          count=len(table.strings))
    cpu_ranks = host_operator_devices(table)
    rows_of: dict[str, list[np.ndarray]] = {}
    found_rows = np.flatnonzero(comm & (is_nccl | is_run | is_call)[table.name])  # the candidates, on any device
    found_device, found_name = table.device[found_rows], table.name[found_rows]
    for code, device in enumerate(table.devices):
        here = found_device == code
        if device.kind == "gpu":
            rows = found_rows[here & is_nccl[found_name]]
        elif device in cpu_ranks:
            run = here & is_run[found_name]
            rows = found_rows[run if run.any() else here & is_call[found_name]]
        else:
            continue
        if len(rows):
            rows_of.setdefault(device.worker, []).append(rows)
    ordered = {}
    for worker, parts in rows_of.items():
        rows = np.concatenate(parts)
        starts = table.ts[rows]
        ends = starts + table.dur[rows]
        order = np.lexsort((ends, starts))
        ordered[worker] = (rows[order], starts[order], ends[order])
    return ordered


def matched_groups(per_worker: dict[str, list[Instance]]) -> tuple[list[list[tuple[str, Instance]]], int]:
    """The members ``(worker, instance)`` of each collective seen on two or more workers (by key, in no
    particular order), and how many were seen on one only (or twice on one worker, so not matched)."""
    members: dict[tuple, list[tuple[str, Instance]]] = {}
    for worker, found in per_worker.items():
        for inst in found:
            members.setdefault(inst.key, []).append((worker, inst))
    matched, unmatched = [], 0
    for group in members.values():
        workers = {w for w, _ in group}
        if len(workers) < 2 or len(workers) < len(group):  # one rank only, or a key repeated on a rank
            unmatched += 1
            continue
        matched.append(group)
    return matched, unmatched


def match(per_worker: dict[str, list[Instance]]) -> tuple[list[Collective], int]:
    """Collectives on two or more workers (ordered by first start), and how many were seen on one only."""
    groups, unmatched = matched_groups(per_worker)
    matched = []
    for group in groups:
        key = group[0][1].key
        last = max(inst.start_us for _, inst in group)
        arrivals = tuple(Arrival(w, inst.start_us, inst.end_us, last - inst.start_us)
                         for w, inst in sorted(group, key=lambda m: m[0]))
        first = group[0][1]
        known = sorted({inst.collective for _, inst in group} - {UNKNOWN_COLLECTIVE})
        steps = [inst.step for _, inst in group if inst.step >= 0]
        matched.append(Collective(name=first.name, group=first.group, index=key[-1], matched_by=key[0],
                                  arrivals=arrivals, collective_type="+".join(known) or UNKNOWN_COLLECTIVE,
                                  step=min(steps, default=-1)))
    matched.sort(key=lambda c: (min(a.start_us for a in c.arrivals), c.group, c.name, c.index))
    return matched, unmatched


def matched_rows(table: EventTable) -> tuple[list[list[int]], list[int]]:
    """The table rows of each collective matched across the table's workers (ranks), as ``analyze_collectives``
    matches them (one list of rows per collective), and the rows among them that are sends (``matched_sends``)."""
    per_worker = instances(table)
    if len(per_worker) < 2:
        return [], []
    return matched_sends(matched_groups(per_worker)[0])


def matched_sends(groups: list[list[tuple[str, Instance]]]) -> tuple[list[list[int]], list[int]]:
    """The rows of each of ``matched_groups``'s collectives, and those of its members that are sends: a send
    synchronizes with nothing; its receive waits for it."""
    rows = [sorted(inst.row for _, inst in group) for group in groups]
    return rows, sorted(inst.row for group in groups for _, inst in group if inst.sends)


def analyze_collectives(table: EventTable) -> CollectivesReport:
    """Collectives matched across the table's ranks, their arrival skew, and the straggler rank."""
    return collectives_report(instances(table))


def shifted(per_worker: dict[str, list[Instance]], shift_us: float) -> dict[str, list[Instance]]:
    """``instances`` moved by ``shift_us`` (from a rank's own clock to a common one)."""
    if shift_us == 0:
        return per_worker
    return {w: [replace(i, start_us=i.start_us + shift_us, end_us=i.end_us + shift_us) for i in found]
            for w, found in per_worker.items()}


def collectives_report(per_worker: dict[str, list[Instance]]) -> CollectivesReport:
    """``analyze_collectives`` of instances found apart (one rank per worker process, say) on one clock."""
    collectives, unmatched = match(per_worker) if len(per_worker) >= 2 else ([], 0)
    stats = {w: [0, 0, 0.0, 0.0] for w in sorted(per_worker)}
    for c in collectives:
        last = c.last
        for a in c.arrivals:
            stats[a.worker][0] += 1
            stats[a.worker][3] += a.wait_us
        stats[last.worker][1] += 1
        stats[last.worker][2] += c.caused_wait_us
    ranks = tuple(RankArrivals(w, n, k, caused, waited) for w, (n, k, caused, waited) in stats.items() if n)
    straggler = max(ranks, key=lambda r: (r.arrived_last, r.caused_wait_us)).worker if ranks else None
    return CollectivesReport(collectives=tuple(collectives), ranks=ranks, straggler=straggler,
                             unmatched=unmatched, workers=len(per_worker))
