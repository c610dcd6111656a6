"""The critical path of a step: the chain of events, across devices and ranks, that sets the step time.

Per step, every event overlapping the step's window (windows touch and never overlap) is a node of a DAG
whose edges say "could not start before": ``lane`` (program order), ``launch``, ``data``, ``transfer``,
``collective`` (a join through zero-length entry nodes), and on CPU ranks ``enqueue`` and ``complete``. An
event weighs its duration; an edge into ``v`` weighs ``v.start`` less the last end of its predecessors, so a
chain through the predecessor each event waited for measures its first start to its last end. The critical
path is the longest path that ends at an event of the step (one pass in topological order over arrays); its
positive waits are split into ``host``, untraced host time, ``wait`` and ``other lanes``. What-if (an
estimate): the longest path with one op weighing nothing and every wait kept.

Pure: takes an ``EventTable`` and plain ``Dependencies``; no I/O. The definitions: docs/commands/critical-path.md.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import networkx as nx
import numpy as np

from rnnprof.analyzers.classify import EventClass, classify, collective_types
from rnnprof.analyzers.comm import host_operator_devices
from rnnprof.events import Device, EventTable, Kind, match_correlation
from rnnprof.names import CPU_COLLECTIVE_CALL, CPU_COLLECTIVE_RUN

EDGE_LANE = "lane"
EDGE_LAUNCH = "launch"
EDGE_DATA = "data"
EDGE_TRANSFER = "transfer"
EDGE_COLLECTIVE = "collective"
EDGE_ENQUEUE = "enqueue"
EDGE_COMPLETE = "complete"
EDGE_KINDS = (EDGE_LANE, EDGE_LAUNCH, EDGE_DATA, EDGE_TRANSFER, EDGE_COLLECTIVE, EDGE_ENQUEUE, EDGE_COMPLETE)

CLASS_NAMES = {EventClass.COMPUTE: "compute", EventClass.COMMUNICATION: "comm", EventClass.MEMCPY: "copy",
               EventClass.MEMSET: "copy", EventClass.HOST: "host"}
WAIT = "wait"
OTHER_LANES = "other lanes"  # a wait in which the device ran other events (other streams, other threads)
UNTRACED = "untraced"  # a host thread's time outside every traced operator
PREVIOUS_STEP = "previous-step work"
NEXT_STEP = "next-step work"
NO_STEP = "work of no step"
UNTRACED_LINK_US = 10.0  # untraced host time this long or longer is a link of its own; shorter, a wait before
# the next event (a few µs of Python between two operators), still counted as untraced
WHAT_IF_OPS = 10  # the longest ops of the path get a what-if estimate
_EPS_US = 0.5  # flow ends and data edges tolerate this much clock rounding
_TIE_US = 1e-6  # lengths this close are equal (sums of the same times in another order)
_LONG_EVENTS = 1000  # the longest events are looked up apart, so a window's overlap query stays short


@dataclass(frozen=True)
class FlowEnd:
    device: Device
    lane: str
    ts: float


@dataclass(frozen=True)
class Flow:
    """An arrow of a Chrome trace: ``kind`` is a ``transfer``, ``data`` or ``collective`` edge; the ends are
    bound to the events of that lane enclosing their timestamps."""

    kind: str
    source: FlowEnd
    target: FlowEnd


@dataclass(frozen=True)
class Dependencies:
    """What the input says beyond the events: graph inputs by node name, arrows, and what it lacks."""

    node_inputs: tuple[tuple[str, str], ...] = ()  # (producer node, consumer node)
    flows: tuple[Flow, ...] = ()
    match_ranks: bool = True  # join the collectives of different workers (ranks) as ``collectives`` matches them
    lacks: tuple[str, ...] = ()


@dataclass(slots=True)  # not frozen: a path has thousands of them, and a frozen dataclass is slow to build
class Link:
    """One event of the path; ``edge`` is the kind of the edge to the next one ("" for the last). An untraced
    stretch of a host thread is a link of its own (``event_class`` ``untraced``, ``event`` -1)."""

    name: str
    op_type: str
    device: str
    lane: str
    start_us: float  # from the step's window start
    dur_us: float  # within the window
    event_class: str
    edge: str
    wait_us: float  # wait before this event on the path (after its predecessor ended; negative: overlap)
    ts_us: float  # absolute start (within the window), on the table's clock
    event: int  # row in the table; -1 for untraced host time
    of_step: int = 0  # the event's own step (another step's: work the device did in this step's window)


@dataclass(frozen=True)
class WhatIf:
    name: str
    device: str
    dur_us: float
    saving_us: float  # estimate


@dataclass(frozen=True)
class StepPath:
    step: int
    length_us: float
    span_us: float  # the step's window: its start to its last event's end
    links: tuple[Link, ...]
    by_device: dict[str, float]
    by_class: dict[str, float]
    what_if: tuple[WhatIf, ...]
    events: int
    edges: dict[str, int]
    window_us: tuple[float, float] = (0.0, 0.0)  # the window, absolute, on the table's clock
    wait_by_device: dict[str, float] = field(default_factory=dict)  # the class ``wait`` by the device it is on


@dataclass(frozen=True)
class CriticalPathReport:
    steps: tuple[StepPath, ...]
    lacks: tuple[str, ...] = ()
    workers: tuple[str, ...] = ()


# -- the longest path of a networkx DAG ----------------------------------------------------------------


def longest_path(graph: nx.DiGraph) -> tuple[list, float]:
    """The heaviest path of a DAG whose nodes weigh ``dur`` and edges ``wait``: (nodes, length).

    A path may start and end anywhere; its length is the sum of its nodes' ``dur`` and its edges' ``wait``.
    """
    return _Weighted(graph).longest()


class _Weighted:
    """``graph``'s longest path by one pass over it in topological order, built once and passed again for each
    what-if. It finds the path networkx's ``dag_longest_path`` finds on ``graph`` with a source before every node
    and each edge weighing its wait plus its target's duration (the same order and the same choice among equal
    lengths), without building that graph."""

    def __init__(self, graph: nx.DiGraph):
        self.graph = graph
        self.nodes = list(nx.topological_sort(graph))
        index = {node: k for k, node in enumerate(self.nodes)}
        self.dur = [graph.nodes[node]["dur"] for node in self.nodes]
        self.preds: list[list[tuple[int, float]]] = [[] for _ in self.nodes]
        self.wait: dict[tuple[int, int], float] = {}
        for u, v, wait in graph.edges(data="wait"):  # each node's predecessors in the order networkx keeps them
            self.preds[index[v]].append((index[u], wait + graph.nodes[v]["dur"]))
            self.wait[(index[u], index[v])] = wait
        self.index = index
        self._base: tuple[list, list] | None = None

    def longest(self, without: object = None) -> tuple[list, float]:
        """The longest path; with ``without``, the length when that node weighs nothing (its waits kept)."""
        if not self.nodes:
            return [], 0.0
        dur = self.graph.nodes[without]["dur"] if without is not None else 0.0
        skip = self.index[without] if dur else -1
        n = len(self.nodes)
        if self._base is None:
            dist, back, first = [0.0] * n, [0] * n, 0
        else:
            dist, back, first = list(self._base[0]), list(self._base[1]), skip if skip >= 0 else n
        self._pass(dist, back, first, skip, dur)
        if self._base is None and skip < 0:
            self._base = (dist, back)
        end = max(range(n), key=dist.__getitem__)
        end = end if dist[end] > 0 else -1
        chain = []
        while end >= 0:
            chain.append(end)
            end = -1 if back[end] == end else back[end]
        chain.reverse()
        length = (sum(self.dur[k] for k in chain) + sum(self.wait[pair] for pair in zip(chain, chain[1:]))
                  - (dur if without is not None and self.index[without] in chain else 0.0))
        return [self.nodes[k] for k in chain], length

    def _pass(self, dist: list, back: list, first: int, skip: int, dur: float) -> None:
        for k in range(first, len(self.preds)):
            preds = self.preds[k]
            best, arg = 0 + self.dur[k], -1
            if k == skip:
                best = 0 + (self.dur[k] - dur)
                preds = [(u, w - dur) for u, w in preds]
            for u, w in preds:
                length = dist[u] + w
                if length > best:
                    best, arg = length, u
            if best >= 0:
                dist[k], back[k] = best, arg
            else:
                dist[k], back[k] = 0, k


def path_length(graph: nx.DiGraph, path: Sequence) -> float:
    return (sum(graph.nodes[n]["dur"] for n in path)
            + sum(graph.edges[u, v]["wait"] for u, v in zip(path, path[1:])))


# -- what is known of the whole table, computed once ------------------------------------------------------


def _leaf_mask(table: EventTable, rows: np.ndarray) -> np.ndarray:
    """Of ``rows`` (host events), those enclosing no other of them on their lane: threads nest their operators."""
    if not len(rows):
        return np.zeros(0, dtype=bool)
    ts, end = table.ts[rows], table.end[rows]
    lane = table.device[rows].astype(np.int64) * (int(table.lane.max(initial=0)) + 1) + table.lane[rows]
    order = np.lexsort((-(end - ts), ts, lane))
    o_ts, o_end, o_lane = ts[order], end[order], lane[order]
    inner = np.zeros(len(rows), dtype=bool)
    nxt = np.arange(1, len(rows))
    inner[:-1] = (o_lane[nxt] == o_lane[:-1]) & (o_ts[nxt] < o_end[:-1]) & (o_end[nxt] <= o_end[:-1])
    keep = np.empty(len(rows), dtype=bool)
    keep[order] = ~inner
    return keep


class _Intervals:
    """The union of intervals, for how much of ``[a, b]`` it covers (vectorised)."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray):
        order = np.argsort(starts, kind="stable")
        s, e = starts[order], ends[order]
        reach = np.maximum.accumulate(e) if len(e) else e
        new = np.ones(len(s), dtype=bool)
        new[1:] = s[1:] > reach[:-1]
        group = np.cumsum(new) - 1
        self.s = s[new]
        self.e = np.zeros(len(self.s))
        if len(s):
            np.maximum.at(self.e, group, e)
        self.cum = np.concatenate([[0.0], np.cumsum(self.e - self.s)])

    def _upto(self, t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(self.s, t, side="right")
        inside = np.minimum(t, self.e[np.maximum(k - 1, 0)]) - self.s[np.maximum(k - 1, 0)]
        return self.cum[np.maximum(k - 1, 0)] + np.where(k > 0, np.maximum(inside, 0.0), 0.0)

    def covered(self, a, b) -> np.ndarray:
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        if not len(self.s):
            return np.zeros(a.shape)
        return np.maximum(self._upto(b) - self._upto(a), 0.0)


class _Table:
    """The table's DAG candidates and lookups shared by every step."""

    def __init__(self, table: EventTable, classes: np.ndarray, dependencies: Dependencies):
        self.table, self.classes = table, classes
        threads = host_operator_devices(table)  # CPU ranks: devices measured by their host threads' operators
        is_host = np.array([d.kind == "host" or d in threads for d in table.devices] or [False], dtype=bool)
        self.is_thread = is_host
        self.is_gpu = np.array([d.kind == "gpu" for d in table.devices] or [False], dtype=bool)
        rows = np.flatnonzero((classes != EventClass.ANNOTATION) & (table.dur >= 0))
        on_host = is_host[table.device[rows]]
        leaves = _leaf_mask(table, rows[on_host])
        self.host_ops = rows[on_host]  # every op of a host thread (its leaves and the ops enclosing them)
        cand = np.concatenate([rows[~on_host], rows[on_host][leaves]])
        cand = cand[np.argsort(table.ts[cand], kind="stable")]
        self.cand = cand
        dur = table.dur[cand]
        if len(cand) > _LONG_EVENTS:
            limit = np.partition(dur, len(dur) - _LONG_EVENTS)[len(dur) - _LONG_EVENTS]
        else:
            limit = np.inf
        long = dur >= limit if np.isfinite(limit) else np.zeros(len(cand), dtype=bool)
        self.short, self.long = cand[~long], cand[long]
        self.short_ts = table.ts[self.short]
        self.short_max = float(table.dur[self.short].max(initial=0.0))
        self.pcorr = table.process_correlation()
        self.rank_rows = _rank_rows(table, dependencies)
        self.enqueue, self.complete = _gloo_edges(table, self.host_ops, cand)
        self._busy: dict[int, _Intervals] = {}
        self._lane_ops: dict[tuple[int, int], _Intervals] = {}
        self.lane_max = int(table.lane.max(initial=0)) + 1
        self.has_steps = bool(len(table.steps()))

    def overlapping(self, start: float, end: float) -> np.ndarray:
        t = self.table
        lo = np.searchsorted(self.short_ts, start - self.short_max, side="left")
        hi = np.searchsorted(self.short_ts, end, side="right")
        rows = np.concatenate([self.short[lo:hi], self.long])
        ts, e = t.ts[rows], t.end[rows]
        return rows[(ts <= end) & ((e > start) | ((ts >= start) & (t.dur[rows] == 0)))]

    def busy(self, device: int) -> _Intervals:
        """When ``device`` ran any event (every lane, every step)."""
        if device not in self._busy:
            t = self.table
            rows = np.flatnonzero((t.device == device) & (self.classes != EventClass.ANNOTATION) & (t.dur > 0))
            self._busy[device] = _Intervals(t.ts[rows], t.end[rows])
        return self._busy[device]

    def lane_ops(self, device: int, lane: int) -> _Intervals:
        """When a host thread ran any operator (its leaves and the operators enclosing them)."""
        key = (device, lane)
        if key not in self._lane_ops:
            t, rows = self.table, self.host_ops
            rows = rows[(t.device[rows] == device) & (t.lane[rows] == lane)]
            self._lane_ops[key] = _Intervals(t.ts[rows], t.end[rows])
        return self._lane_ops[key]


def _rank_rows(table: EventTable, dependencies: Dependencies) -> list[list[int]]:
    """The rows of each collective matched across the table's ranks (none unless ``match_ranks``)."""
    from rnnprof.analyzers.collectives import matched_rows

    return matched_rows(table) if dependencies.match_ranks else []


def _gloo_edges(table: EventTable, host_ops: np.ndarray, cand: np.ndarray
                ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """``enqueue`` (call's last leaf -> run) and ``complete`` (run -> the caller's next leaf) pairs of rows: on
    each rank, the k-th ``c10d::*`` call and the k-th ``gloo:*`` run of one collective type."""
    empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    call, run = _gloo_calls_and_runs(table, host_ops)
    if not len(call):
        return empty, empty
    leaves = _LaneLeaves(table, cand)
    # the last leaf of the caller that starts within the call (the call itself when it is a leaf)
    pos, lo, _ = leaves.position(call, table.end[call], "right")
    last = pos - 1
    ok_e = (last >= lo) & (leaves.ts[np.maximum(last, 0)] >= table.ts[call] - _EPS_US)
    enqueue = (leaves.rows[last[ok_e]], run[ok_e])
    # the first leaf of the caller that starts after the run ended
    pos, _, hi = leaves.position(call, table.end[run] - _EPS_US, "left")
    ok_c = pos < hi
    complete = (run[ok_c], leaves.rows[np.minimum(pos, len(leaves.rows) - 1)[ok_c]])
    return enqueue, complete


def _gloo_calls_and_runs(table: EventTable, host_ops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ``c10d::*`` call and the ``gloo:*`` run of each collective: on each rank and collective type, the k-th
    of each (a call whose run the trace lacks is one of the earliest: the window opened late)."""
    is_run = np.fromiter((bool(CPU_COLLECTIVE_RUN.match(s)) for s in table.strings), dtype=bool,
                         count=len(table.strings))
    is_call = np.fromiter((bool(CPU_COLLECTIVE_CALL.match(s)) for s in table.strings), dtype=bool,
                          count=len(table.strings))
    runs = np.flatnonzero(is_run[table.name] & (table.dur >= 0))
    calls = host_ops[is_call[table.name[host_ops]]]
    if not len(runs) or not len(calls):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    worker = np.array([d.worker for d in table.devices], dtype=object)
    run_type, call_type = collective_types(table, runs), collective_types(table, calls)
    pairs = []
    for w in set(worker[table.device[runs]]):
        for kind in set(run_type.tolist()):
            r = runs[(worker[table.device[runs]] == w) & (run_type == kind)]
            c = calls[(worker[table.device[calls]] == w) & (call_type == kind)]
            r, c = r[np.argsort(table.ts[r], kind="stable")], c[np.argsort(table.ts[c], kind="stable")]
            extra = len(c) - len(r)
            c = c[extra:] if extra > 0 else c
            r = r[-extra:] if extra < 0 else r
            ok = table.ts[c] <= table.ts[r] + _EPS_US
            pairs.extend(zip(c[ok].tolist(), r[ok].tolist()))
    if not pairs:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    call, run = (np.array(x, dtype=np.int64) for x in zip(*pairs))
    return call, run


class _LaneLeaves:
    """Leaf events by lane, in start order."""

    def __init__(self, table: EventTable, cand: np.ndarray):
        self.table = table
        self.lane_max = int(table.lane.max(initial=0)) + 1
        lane = self.lane_of(cand)
        order = np.lexsort((table.ts[cand], lane))
        self.rows, self.lane, self.ts = cand[order], lane[order], table.ts[cand][order]  # by (lane, ts)

    def lane_of(self, rows: np.ndarray) -> np.ndarray:
        return self.table.device[rows].astype(np.int64) * self.lane_max + self.table.lane[rows]

    def position(self, rows: np.ndarray, ts: np.ndarray, side: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where each time ``ts`` falls among the leaves of the lane of ``rows`` (lanes first, then times), with
        each lane's first and past-last positions."""
        lanes = self.lane_of(rows)
        lo = np.searchsorted(self.lane, lanes, side="left")
        hi = np.searchsorted(self.lane, lanes, side="right")
        out = np.empty(len(lanes), dtype=np.int64)
        for k, (a, b, t) in enumerate(zip(lo.tolist(), hi.tolist(), ts.tolist())):
            out[k] = a + np.searchsorted(self.ts[a:b], t, side=side)
        return out, lo, hi


# -- one step's DAG, as arrays ----------------------------------------------------------------------------


class _Edges:
    """Edges ``src -> dst`` of kinds ``EDGE_KINDS[kind]``, gathered in batches."""

    def __init__(self):
        self.src: list[np.ndarray] = []
        self.dst: list[np.ndarray] = []
        self.kind: list[np.ndarray] = []

    def add(self, u, v, k: str) -> None:
        u, v = np.asarray(u, dtype=np.int64), np.asarray(v, dtype=np.int64)
        self.src.append(u)
        self.dst.append(v)
        self.kind.append(np.full(len(u), EDGE_KINDS.index(k), dtype=np.int8))

    def extend(self, src: list[int], dst: list[int], kinds: list[str]) -> None:
        if src:
            self.src.append(np.array(src, dtype=np.int64))
            self.dst.append(np.array(dst, dtype=np.int64))
            self.kind.append(np.array([EDGE_KINDS.index(k) for k in kinds], dtype=np.int8))

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (np.concatenate(self.src) if self.src else np.zeros(0, dtype=np.int64),
                np.concatenate(self.dst) if self.dst else np.zeros(0, dtype=np.int64),
                np.concatenate(self.kind) if self.kind else np.zeros(0, dtype=np.int8))


class _StepDAG:
    """The DAG of one window. Nodes ``0..n-1`` are events (``rows``), ``n..`` the entries of collective members
    (``entry_of``: the member's node). Edges ``src -> dst`` of kinds ``EDGE_KINDS[kind]``."""

    def __init__(self, tt: _Table, step: int, window: tuple[float, float], dependencies: Dependencies):
        self.tt, self.step, self.window, self.base = tt, step, window, window[0]
        self.rows = np.sort(tt.overlapping(*window) if tt.has_steps else tt.cand)
        self.n = len(self.rows)
        self._clip_to_window()
        edges = _Edges()
        self._lane_edges(edges)
        self._launch_edges(edges)
        edges.extend(*self._dependency_edges(dependencies))
        self._gloo_edges(edges)
        src, dst, kind = edges.arrays()
        join_key = self._join_collectives(src, dst, kind, self._collective_groups(dependencies))
        # node times: entries are zero-length at their member's start
        self.n_start = np.concatenate([self.start, self.start[self.entry_of]])
        self.n_end = np.concatenate([self.end, self.start[self.entry_of]])
        self.n_dur = self.n_end - self.n_start
        self._order(np.where(np.isfinite(join_key), np.maximum(join_key, self.start), self.start))
        self._weigh()

    # -- construction

    def _clip_to_window(self) -> None:
        """Each event's start and end from the window's start, clipped to the window: wall-clock microseconds near
        1.7e15 keep only about 0.25 µs, and a path sums thousands of differences of them."""
        t, rows = self.tt.table, self.rows
        ws, we = self.window
        rel = t.ts[rows] - ws
        self.start = np.maximum(rel, 0.0)
        end = rel + t.dur[rows]
        limit = we - ws
        self.end = np.maximum(np.where(end > limit + _EPS_US, limit, end), self.start)
        self.own = t.step[rows] == self.step

    def _lane_edges(self, edges: "_Edges") -> None:
        """Lane order: each event to the first event of its lane that starts once it has ended."""
        t, rows, n = self.tt.table, self.rows, self.n
        device = t.device[rows].astype(np.int64)
        lane = device * self.tt.lane_max + t.lane[rows]
        _, lane_id = np.unique(lane, return_inverse=True)
        lane_id = lane_id.reshape(-1)
        self.lane_id = lane_id
        order = np.lexsort((-(self.end - self.start), self.start, lane_id))
        span = float(self.window[1] - self.window[0]) + 1.0
        key = lane_id[order] * span + self.start[order]
        nxt = np.searchsorted(key, lane_id[order] * span + self.end[order], side="left")
        nxt = np.maximum(nxt, np.arange(n) + 1)
        ok = nxt < n
        ok[ok] &= lane_id[order][nxt[ok]] == lane_id[order][ok]
        edges.add(order[ok], order[nxt[ok]], EDGE_LANE)

    def _launch_edges(self, edges: "_Edges") -> None:
        """Launches: each runtime call to the device work of its correlation id."""
        tt, rows = self.tt, self.rows
        t = tt.table
        corr = tt.pcorr[rows]
        runtime = (t.kind[rows] == Kind.RUNTIME) & (corr >= 0)
        work = ~(t.kind[rows] == Kind.RUNTIME) & (corr >= 0) & tt.is_gpu[t.device[rows].astype(np.int64)]
        calls, works = np.flatnonzero(runtime), np.flatnonzero(work)
        found = match_correlation(corr[calls], corr[works])
        edges.add(calls[found[found >= 0]], works[found >= 0], EDGE_LAUNCH)

    def _gloo_edges(self, edges: "_Edges") -> None:
        """gloo: call -> run -> the caller's next op (those with both ends in the window)."""
        for (a, b), k in ((self.tt.enqueue, EDGE_ENQUEUE), (self.tt.complete, EDGE_COMPLETE)):
            u, v = self.node_of(a), self.node_of(b)
            keep = (u >= 0) & (v >= 0)
            edges.add(u[keep], v[keep], k)

    def _join_collectives(self, src: np.ndarray, dst: np.ndarray, kind: np.ndarray,
                          groups: list[list[int]]) -> np.ndarray:
        """Collective joins: each member's entry takes its incoming edges; every entry precedes every member.
        Sets ``entry_of`` and the edges (one per pair, the first kind found, no self-loops); returns each
        member's join time (its group's last start; ``-inf`` for other events)."""
        n = self.n
        entry_of: list[int] = []
        member_entry = np.full(n, -1, dtype=np.int64)
        join_src, join_dst, join_key = [], [], np.full(n, -np.inf)
        for members in groups:
            members = [m for m in members if member_entry[m] < 0]
            if len(members) < 2:
                continue
            entries = []
            for m in members:
                member_entry[m] = n + len(entry_of)
                entries.append(member_entry[m])
                entry_of.append(m)
            last = max(self.start[m] for m in members)
            for m in members:
                join_key[m] = last
                join_src.extend(entries)
                join_dst.extend([m] * len(entries))
        self.entry_of = np.array(entry_of, dtype=np.int64)
        redirect = member_entry[dst] if len(dst) else dst
        dst = np.where(redirect >= 0, redirect, dst)
        if join_src:
            src = np.concatenate([src, np.array(join_src, dtype=np.int64)])
            dst = np.concatenate([dst, np.array(join_dst, dtype=np.int64)])
            kind = np.concatenate([kind, np.full(len(join_src), EDGE_KINDS.index(EDGE_COLLECTIVE), np.int8)])
        keep = src != dst
        src, dst, kind = src[keep], dst[keep], kind[keep]
        pair = src * max(n + len(entry_of), 1) + dst
        _, first = np.unique(pair, return_index=True)
        first.sort()
        self.src, self.dst, self.kind = src[first], dst[first], kind[first]
        return join_key

    # -- lookups

    def node_of(self, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        if not len(self.rows) or not len(rows):
            return np.full(len(rows), -1, dtype=np.int64)
        k = np.minimum(np.searchsorted(self.rows, rows), len(self.rows) - 1)
        return np.where(self.rows[k] == rows, k, -1)

    def _event_at(self, end: FlowEnd, device_codes: dict[Device, int], collective: bool = False) -> int | None:
        """The event a flow end is bound to: on its device's lane, of the events that enclose its time (within
        ``_EPS_US``; among the 64 that start last before it), the one with a start or end nearest it, the later
        starting of equals. A timeline places a flow end just inside its own slice, near its start or its end
        (``rundir.chrome_trace``); with two or more inter-op threads, other ops on the device's lane enclose that
        time too. ``collective``: only communication events (a collective's members are collectives)."""
        t = self.tt.table
        code = device_codes.get(end.device)
        lane = t.code_of(end.lane)
        if code is None or lane < 0:
            return None
        on_lane = (t.device[self.rows] == code) & (t.lane[self.rows] == lane)
        if collective:
            on_lane &= self.tt.classes[self.rows] == EventClass.COMMUNICATION
        members = np.flatnonzero(on_lane)
        if not len(members):
            return None
        members = members[np.argsort(self.start[members], kind="stable")]
        ts = end.ts - self.base
        k = int(np.searchsorted(self.start[members], ts + _EPS_US, side="right"))
        near = members[max(k - 64, 0):k]
        near = near[self.end[near] >= ts - _EPS_US]
        if not len(near):
            return None
        distance = np.minimum(np.abs(self.start[near] - ts), np.abs(self.end[near] - ts))
        best = np.flatnonzero(distance == distance.min())
        return int(near[best[-1]])

    def _dependency_edges(self, dependencies: Dependencies):
        t = self.tt.table
        src, dst, kind = [], [], []
        if dependencies.node_inputs:
            runs: dict[int, list[int]] = defaultdict(list)
            for node in np.argsort(self.start, kind="stable").tolist():
                runs[int(t.name[self.rows[node]])].append(node)
            code = {name: k for k, name in enumerate(t.strings)}
            by_end: dict[int, tuple[list[float], list[int]]] = {}
            for producer, consumer in dependencies.node_inputs:
                p_code = code.get(producer, -1)
                p_runs, c_runs = runs.get(p_code), runs.get(code.get(consumer, -1))
                if not p_runs or not c_runs:
                    continue
                if p_code not in by_end:
                    ordered = sorted(p_runs, key=lambda r: self.end[r])
                    by_end[p_code] = ([float(self.end[r]) for r in ordered], ordered)
                ends, ordered = by_end[p_code]
                for c in c_runs:
                    k = bisect.bisect_right(ends, self.start[c] + _EPS_US) - 1
                    if k >= 0:
                        src.append(ordered[k])
                        dst.append(c)
                        kind.append(EDGE_DATA)
        device_codes = {d: k for k, d in enumerate(t.devices)}
        for flow in dependencies.flows:
            if flow.kind in (EDGE_DATA, EDGE_TRANSFER):
                a, b = self._event_at(flow.source, device_codes), self._event_at(flow.target, device_codes)
                if a is not None and b is not None and self.start[a] <= self.start[b]:
                    src.append(a)
                    dst.append(b)
                    kind.append(flow.kind)
        return src, dst, kind

    def _collective_groups(self, dependencies: Dependencies) -> list[list[int]]:
        t = self.tt.table
        device_codes = {d: k for k, d in enumerate(t.devices)}
        parent: dict[int, int] = {}

        def find(x: int) -> int:
            while parent.setdefault(x, x) != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for flow in dependencies.flows:
            if flow.kind != EDGE_COLLECTIVE:
                continue
            a = self._event_at(flow.source, device_codes, collective=True)
            b = self._event_at(flow.target, device_codes, collective=True)
            if a is not None and b is not None:
                parent[find(a)] = find(b)
        groups: dict[int, list[int]] = defaultdict(list)
        for x in list(parent):
            groups[find(x)].append(x)
        found = [sorted(g) for g in groups.values() if len(g) > 1]
        for rows in self.tt.rank_rows:
            nodes = self.node_of(np.array(rows, dtype=np.int64))
            nodes = sorted(int(x) for x in nodes[nodes >= 0])
            if len(nodes) > 1:
                found.append(nodes)
        return found

    # -- order and weights

    def _order(self, key: np.ndarray) -> None:
        """A topological order: by start (a collective member at its last member's start), entries and zero-length
        events before what starts with them; a trace whose dependencies disagree with its clocks falls back to
        networkx, dropping the edges that would close a cycle."""
        total = len(self.n_start)
        k = np.concatenate([key, self.start[self.entry_of]])
        is_entry = np.arange(total) >= self.n
        order = np.lexsort((np.arange(total), self.n_end, ~is_entry, k))
        pos = np.empty(total, dtype=np.int64)
        pos[order] = np.arange(total)
        if len(self.src) and not np.all(pos[self.src] < pos[self.dst]):
            g = nx.DiGraph()
            g.add_nodes_from(range(total))
            g.add_edges_from(zip(self.src.tolist(), self.dst.tolist()))
            if not nx.is_directed_acyclic_graph(g):
                late = self.n_start[self.dst] + _EPS_US < self.n_start[self.src]
                g.remove_edges_from(zip(self.src[late].tolist(), self.dst[late].tolist()))
                while not nx.is_directed_acyclic_graph(g):
                    cycle = nx.find_cycle(g)
                    g.remove_edge(*cycle[-1][:2])
                keep = np.array([g.has_edge(u, v) for u, v in zip(self.src.tolist(), self.dst.tolist())], dtype=bool)
                self.src, self.dst, self.kind = self.src[keep], self.dst[keep], self.kind[keep]
            order = np.array(list(nx.topological_sort(g)), dtype=np.int64)
            pos[order] = np.arange(total)
        self.order, self.pos = order, pos

    def _weigh(self) -> None:
        total = len(self.n_start)
        latest = np.full(total, -np.inf)
        np.maximum.at(latest, self.dst, self.n_end[self.src])
        self.wait_in = np.where(np.isfinite(latest), self.n_start - latest, 0.0)  # the same for every edge in
        # A node without predecessors in the window (its lane's previous event ended before the window) is
        # reached from the window's start: its lead is the time from there.
        self.lead = np.where(np.isfinite(latest), 0.0, self.n_start)

    # -- the longest path

    def longest(self) -> tuple[list[int], float]:
        """The longest path ending at one of the step's own events: (nodes, length); one pass in topological order
        (``dist``: the longest path ending at each node), then one back (``tail``: the longest starting at each node
        and ending at one of the step's events), for the what-if."""
        if not self.n:
            return [], 0.0
        self._pu, self._pv = self.pos[self.src], self.pos[self.dst]
        self._dur = self.n_dur[self.order]
        self._gain = (self.n_dur + self.wait_in)[self.order]
        lead = self.lead[self.order]
        dist, back = self._pass_forward(lead)
        eligible = self._path_ends()
        ranked = np.flatnonzero(eligible)
        end = int(ranked[np.argmax(dist[ranked])])  # the first of the longest
        length = float(dist[end])
        chain = []
        while end >= 0:
            chain.append(end)
            end = back[end]
        chain.reverse()
        self._dist, self._tail, self._eligible = dist, self._pass_back(eligible), eligible
        self._prefix = np.maximum.accumulate(np.where(eligible, dist, -np.inf))
        self._suffix = np.maximum.accumulate((self._tail + lead)[::-1])[::-1]
        return [int(self.order[k]) for k in chain], length

    def _pass_forward(self, lead: np.ndarray) -> tuple[np.ndarray, list[int]]:
        """In topological order: the longest path ending at each node, and the predecessor it comes through
        (-1: it starts there)."""
        total = len(self.n_start)
        pu, pv = self._pu, self._pv
        by = np.lexsort((pu, pv))
        pred, ptr = pu[by].tolist(), np.searchsorted(pv[by], np.arange(total + 1), side="left").tolist()
        gain_l = self._gain.tolist()
        first_l = (self._dur + lead).tolist()
        dist = [0.0] * total
        back = [-1] * total
        for k in range(total):
            best, arg = first_l[k], -1
            lo, hi = ptr[k], ptr[k + 1]
            if hi > lo:
                g = gain_l[k]
                for j in range(lo, hi):
                    u = pred[j]
                    length = dist[u] + g
                    # a chain through a predecessor as long as starting here wins: it says what the node waited
                    # for (a collective member that waited all window long, for the last rank to arrive)
                    if length > best or (arg < 0 and length > best - _TIE_US):
                        best, arg = length, u
            dist[k], back[k] = best, arg
        return np.asarray(dist), back

    def _path_ends(self) -> np.ndarray:
        """Where a path may end, by topological position: the step's own events (every event when it has none)."""
        eligible = np.zeros(len(self.n_start), dtype=bool)
        eligible[self.pos[np.flatnonzero(self.own)]] = True
        if not eligible.any():
            eligible[self.pos[np.arange(self.n)]] = True
        return eligible

    def _pass_back(self, eligible: np.ndarray) -> np.ndarray:
        """In reverse topological order: the longest path starting at each node and ending where ``eligible``."""
        total = len(self.n_start)
        pu, pv = self._pu, self._pv
        by = np.lexsort((pv, pu))
        succ, sptr = pv[by].tolist(), np.searchsorted(pu[by], np.arange(total + 1), side="left").tolist()
        ok = eligible.tolist()
        dur_l, gain_l = self._dur.tolist(), self._gain.tolist()
        tail = [0.0] * total
        for k in range(total - 1, -1, -1):
            best = 0.0 if ok[k] else -np.inf
            for j in range(sptr[k], sptr[k + 1]):
                s = succ[j]
                value = tail[s] + gain_l[s] - dur_l[s]
                if value > best:
                    best = value
            tail[k] = best + dur_l[k]
        return np.asarray(tail)

    def without(self, node: int) -> float:
        """The longest path's length with ``node`` weighing nothing (waits kept): the longest through it, less its
        duration, or the longest avoiding it: ending before it, starting after it, or over an edge across its
        place in the topological order."""
        p = int(self.pos[node])
        through = self._dist[p] + self._tail[p] - 2 * self._dur[p]
        before = self._prefix[p - 1] if p > 0 else -np.inf
        after = self._suffix[p + 1] if p + 1 < len(self._suffix) else -np.inf
        across = (self._pu < p) & (self._pv > p)
        over = (self._dist[self._pu[across]] + self._gain[self._pv[across]] - self._dur[self._pv[across]]
                + self._tail[self._pv[across]]).max(initial=-np.inf)
        return float(max(through, before, after, over))


# -- the report ----------------------------------------------------------------------------------------


def _windows(tt: _Table, steps: Sequence[int]) -> dict[int, tuple[float, float]]:
    """Each step's window (docs/commands/critical-path.md), over every step of the table."""
    t = tt.table
    cand = tt.cand
    known = np.unique(t.step[cand])
    known = known[known >= 0]
    result: dict[int, tuple[float, float]] = {}
    if len(known):
        step = t.step[cand]
        keep = step >= 0
        idx = np.searchsorted(known, step[keep])
        first = np.full(len(known), np.inf)
        last = np.full(len(known), -np.inf)
        np.minimum.at(first, idx, t.ts[cand][keep])
        np.maximum.at(last, idx, t.end[cand][keep])
        reach = -np.inf
        for s, a, b in zip(known.tolist(), first.tolist(), last.tolist()):
            start = max(a, reach) if max(a, reach) < b else a
            result[s] = (start, b)
            reach = max(reach, b)
    for s in steps:
        if s not in result:
            rows = cand[t.step[cand] == s] if len(known) else cand
            if len(rows):
                result[s] = (float(t.ts[rows].min()), float(t.end[rows].max()))
    return result


def _class_name(classes: np.ndarray, row: int) -> str:
    return CLASS_NAMES.get(EventClass(int(classes[row])), "compute")


def _step_label(of_step: int, step: int) -> str:
    return "" if of_step == step else PREVIOUS_STEP if 0 <= of_step < step else NO_STEP if of_step < 0 else NEXT_STEP


def build_step_graph(table: EventTable, step: int, dependencies: Dependencies = Dependencies(),
                     classes: np.ndarray | None = None) -> nx.DiGraph:
    """The DAG of one step's window as networkx: nodes are table rows (and ``("entry", row)`` for collective
    members) with ``start``/``end``/``dur`` from the window's start; edges have ``kind`` and ``wait``."""
    classes = classify(table) if classes is None else classes
    tt = _Table(table, classes, dependencies)
    window = _windows(tt, [step]).get(step)
    g = nx.DiGraph()
    if window is None:
        return g
    dag = _StepDAG(tt, step, window, dependencies)
    names = [int(r) for r in dag.rows] + [("entry", int(dag.rows[m])) for m in dag.entry_of]
    for k, name in enumerate(names):
        g.add_node(name, start=float(dag.n_start[k]), end=float(dag.n_end[k]), dur=float(dag.n_dur[k]))
    for u, v, kind in zip(dag.src.tolist(), dag.dst.tolist(), dag.kind.tolist()):
        g.add_edge(names[u], names[v], kind=EDGE_KINDS[kind], wait=float(dag.wait_in[v]))
    return g


def _step_path(tt: _Table, step: int, window: tuple[float, float], dependencies: Dependencies,
               what_if_ops: int) -> StepPath | None:
    """One step's longest path, its events' waits split by what the lane or device did meanwhile, and the shares
    of the path by device and by class."""
    dag = _StepDAG(tt, step, window, dependencies)
    if not dag.n:
        return None
    path, length = dag.longest()
    events = _PathEvents(tt.table, dag, np.asarray(path, dtype=np.int64))
    events.split_waits(tt, window[0])
    by_device, wait_by_device = _device_shares(tt.table, events)
    edges = {EDGE_KINDS[int(code)]: int(count) for code, count in zip(*np.unique(dag.kind, return_counts=True))}
    return StepPath(step=step, length_us=float(length), span_us=float(window[1] - window[0]),
                    links=_links(tt.table, tt.classes, events, step, window[0]), by_device=by_device,
                    by_class=_class_shares(tt.classes, events, step),
                    what_if=_what_if(tt.table, dag, events, length, what_if_ops), events=dag.n, edges=edges,
                    window_us=(float(window[0]), float(window[1])), wait_by_device=wait_by_device)


def _hop_kinds(dag: _StepDAG, path: np.ndarray) -> np.ndarray:
    """The kind of each hop of the path (node to node)."""
    total = len(dag.n_start)
    keys = dag.src * total + dag.dst
    order = np.argsort(keys)
    hop = order[np.searchsorted(keys[order], path[:-1] * total + path[1:])] if len(path) > 1 else order[:0]
    return dag.kind[hop]


class _PathEvents:
    """The events of a step's longest path, in order (collective entries folded into the member that follows):
    ``wait`` (from what it waited for, or from the window's start for the first), ``into`` (the kind of the edge
    that reached it) and ``edge`` (the kind of the edge on to the next event; through an entry: the join's kind,
    unless the first hop is not a lane edge)."""

    def __init__(self, table: EventTable, dag: _StepDAG, path: np.ndarray):
        hop_kind = _hop_kinds(dag, path)
        is_event = path < dag.n
        at = np.flatnonzero(is_event)  # positions in the path of its events
        wait_in = dag.wait_in[path]
        wait_in[0] = dag.lead[path[0]]  # from the window's start
        # each event's wait: its own and its entry's (an entry's wait belongs to the member that follows)
        group = np.minimum(np.cumsum(np.concatenate([[0], is_event[:-1]])), len(at) - 1)
        self.wait = np.zeros(len(at))
        np.add.at(self.wait, group, wait_in)
        lane = EDGE_KINDS.index(EDGE_LANE)
        first_hop = at[:-1]  # the hop leaving each event (but the last)
        self.into = np.full(len(at), -1, dtype=np.int64)
        self.into[1:] = hop_kind[first_hop]
        if dag.lead[path[0]] > 0:
            self.into[0] = lane  # a thread's time before its first event in the window is its own
        edge = np.full(len(at), -1, dtype=np.int64)
        edge[:-1] = hop_kind[first_hop]
        through = (at[1:] - at[:-1]) > 1
        second = np.minimum(first_hop + 1, max(len(hop_kind) - 1, 0))
        edge[:-1] = np.where(through & (edge[:-1] == lane), hop_kind[second] if len(hop_kind) else edge[:-1],
                             edge[:-1])
        self.edge = edge
        self.nodes = path[at]
        self.rows = dag.rows[self.nodes]
        self.start, self.dur = dag.n_start[self.nodes], dag.n_dur[self.nodes]
        self.device = table.device[self.rows].astype(np.int64)
        self.of_steps = table.step[self.rows].astype(np.int64)

    def split_waits(self, tt: _Table, ws: float) -> None:
        """Positive waits: on a host thread reached along its lane (``host_gap``), the time its enclosing
        operators cover, the rest untraced; elsewhere (``other``), the time other lanes of the device were busy,
        the rest idle. Sets ``covered`` and ``rest`` (each event's wait, split) and ``gap_start``."""
        t = tt.table
        lanes = t.lane[self.rows]
        self.gap = gap = self.wait > 0
        self.gap_start = a = ws + self.start - self.wait
        b = ws + self.start
        self.host_gap = host_gap = gap & tt.is_thread[self.device] & (self.into == EDGE_KINDS.index(EDGE_LANE))
        self.other = other = gap & ~host_gap
        covered = np.zeros(len(self.rows))
        for d, ln in set(zip(self.device[host_gap].tolist(), lanes[host_gap].tolist())):
            sel = host_gap & (self.device == d) & (lanes == ln)
            covered[sel] = tt.lane_ops(d, ln).covered(a[sel], b[sel])
        for d in set(self.device[other].tolist()):
            sel = other & (self.device == d)
            covered[sel] = tt.busy(d).covered(a[sel], b[sel])
        self.covered = np.minimum(covered, np.maximum(self.wait, 0))
        self.rest = np.where(gap, self.wait - self.covered, 0.0)

    @property
    def share(self) -> np.ndarray:
        """Each event's duration less its overlap with the previous one (a negative wait)."""
        return self.dur + np.minimum(self.wait, 0.0)


def _device_shares(table: EventTable, ev: _PathEvents) -> tuple[dict[str, float], dict[str, float]]:
    """The path's time by device (events and their waits), and the idle waits (not covered by other lanes)."""
    n_dev = len(table.devices)
    labels = [d.label for d in table.devices]
    device, gap, other = ev.device, ev.gap, ev.other
    per_device = np.bincount(device, weights=ev.share, minlength=n_dev) + \
        np.bincount(device[gap], weights=ev.wait[gap], minlength=n_dev)
    by_device = {labels[d]: float(per_device[d]) for d in np.unique(device).tolist()}
    wait_dev = np.bincount(device[other], weights=ev.rest[other], minlength=n_dev)
    wait_by_device = {labels[d]: float(wait_dev[d]) for d in np.unique(device[other & (ev.rest > 0)]).tolist()}
    return by_device, wait_by_device


def _class_shares(classes: np.ndarray, ev: _PathEvents, step: int) -> dict[str, float]:
    """The path's time by class: each event's duration (less overlap) under its class, or under the step its
    work belongs to; each positive wait as ``split_waits`` split it."""
    class_names = {int(c): name for c, name in CLASS_NAMES.items()}
    of_steps = ev.of_steps
    owner = np.where(of_steps == step, classes[ev.rows].astype(np.int64),
                     np.where(of_steps < 0, -3, np.where(of_steps < step, -1, -2)))
    by_class: dict[str, float] = defaultdict(float)
    kinds, inverse = np.unique(owner, return_inverse=True)
    sums = np.bincount(inverse.reshape(-1), weights=ev.share)
    named = {-1: PREVIOUS_STEP, -2: NEXT_STEP, -3: NO_STEP}
    for kind, total in zip(kinds.tolist(), sums.tolist()):
        by_class[named.get(kind) or class_names.get(kind, "compute")] += total
    for key, mask, values in (("host", ev.host_gap, ev.covered), (UNTRACED, ev.host_gap, ev.rest),
                              (OTHER_LANES, ev.other, ev.covered), (WAIT, ev.other, ev.rest)):
        total = float(values[mask].sum())
        if total > 0:
            by_class[key] += total
    return {k: v for k, v in by_class.items() if v != 0 or k in CLASS_NAMES.values()}


def _links(table: EventTable, classes: np.ndarray, ev: _PathEvents, step: int, ws: float) -> tuple[Link, ...]:
    """The path's links, an untraced host gap long enough as a link of its own before its event."""
    strings = table.strings
    labels = [d.label for d in table.devices]
    workers = [d.worker or "host" for d in table.devices]
    class_names = {int(c): name for c, name in CLASS_NAMES.items()}
    rows = ev.rows
    names = [strings[c] for c in table.name[rows].tolist()]
    op_types = [strings[c] for c in table.op_type[rows].tolist()]
    lanes = [strings[c] for c in table.lane[rows].tolist()]
    cls_names = [class_names.get(c, "compute") for c in classes[rows].tolist()]
    edge_names = [EDGE_KINDS[e] if e >= 0 else "" for e in ev.edge.tolist()]
    waits, starts = ev.wait.tolist(), ev.start.tolist()
    untraced_link = (ev.host_gap & (ev.rest >= UNTRACED_LINK_US)).tolist()
    links: list[Link] = []
    for k, (row, dev, of_step, d) in enumerate(zip(rows.tolist(), ev.device.tolist(), ev.of_steps.tolist(),
                                                   ev.dur.tolist())):
        label, s, w = labels[dev], starts[k], waits[k]
        if untraced_link[k]:
            links.append(Link(f"untraced host time on {workers[dev]}", "", label, lanes[k], s - w, float(ev.rest[k]),
                              UNTRACED, EDGE_LANE, 0.0, float(ev.gap_start[k]), -1, step))
            w = float(ev.covered[k])
        links.append(Link(names[k], op_types[k], label, lanes[k], s, d, cls_names[k], edge_names[k], w, ws + s, row,
                          of_step))
    return tuple(links)


def _what_if(table: EventTable, dag: _StepDAG, ev: _PathEvents, length: float, what_if_ops: int
             ) -> tuple[WhatIf, ...]:
    """The path's ``what_if_ops`` longest events, each with the path's saving were it to take no time."""
    labels = [d.label for d in table.devices]
    what_if = []
    for k in np.argsort(-ev.dur, kind="stable")[:what_if_ops].tolist():
        if ev.dur[k] <= 0:
            continue
        row = int(ev.rows[k])
        what_if.append(WhatIf(name=table.strings[table.name[row]], device=labels[table.device[row]],
                              dur_us=float(ev.dur[k]),
                              saving_us=max(0.0, float(length - dag.without(int(ev.nodes[k]))))))
    what_if.sort(key=lambda x: -x.saving_us)
    return tuple(what_if)


def analyze_critical_path(table: EventTable, dependencies: Dependencies = Dependencies(),
                          steps: Iterable[int] | None = None, comm_patterns: Iterable[str] = (),
                          what_if_ops: int = WHAT_IF_OPS, classes: np.ndarray | None = None) -> CriticalPathReport:
    """The critical path of each step (``steps``: those of the table by default; -1: events of no step);
    ``classes``: ``classify(table, comm_patterns)``, when the caller has it already."""
    classes = classify(table, comm_patterns) if classes is None else classes
    if steps is None:  # a trace without step markers (a TF1 timeline) is one step, numbered -1
        steps = table.steps() if len(table.steps()) else ([-1] if len(table) else [])
    wanted = [int(s) for s in steps]
    tt = _Table(table, classes, dependencies)
    windows = _windows(tt, wanted)
    paths = [p for p in (_step_path(tt, s, windows[s], dependencies, what_if_ops) for s in wanted if s in windows)
             if p is not None]
    return CriticalPathReport(steps=tuple(paths), lacks=tuple(dependencies.lacks),
                              workers=tuple(sorted({d.worker for d in table.devices} - {""})))
