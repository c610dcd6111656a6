"""What the critical path knows of the whole table, computed once for every step: the DAG's candidate events
(every event but a host thread's enclosing operators), lookups by time, lane and device, the gloo
call/run pairs, the collectives matched across ranks, and each step's window."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rnnprof.analyzers.classify import EventClass, collective_types
from rnnprof.analyzers.collectives import matched_rows
from rnnprof.analyzers.critical_path.result import Dependencies
from rnnprof.analyzers.device_work import host_operator_devices
from rnnprof.events import EventTable
from rnnprof.events.names import CPU_COLLECTIVE_CALL, CPU_COLLECTIVE_RUN

EPS_US = 0.5  # flow ends and data edges tolerate this much clock rounding
_LONG_EVENTS = 1000  # the longest events are looked up apart, so a window's overlap query stays short


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


class Intervals:
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

    @classmethod
    def of(cls, s: np.ndarray, e: np.ndarray, cum: np.ndarray) -> "Intervals":
        """The union already computed (``s``, ``e``, ``cum`` of another ``Intervals``)."""
        made = cls.__new__(cls)
        made.s, made.e, made.cum = s, e, cum
        return made

    def _upto(self, t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(self.s, t, side="right")
        inside = np.minimum(t, self.e[np.maximum(k - 1, 0)]) - self.s[np.maximum(k - 1, 0)]
        return self.cum[np.maximum(k - 1, 0)] + np.where(k > 0, np.maximum(inside, 0.0), 0.0)

    def covered(self, a, b) -> np.ndarray:
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        if not len(self.s):
            return np.zeros(a.shape)
        return np.maximum(self._upto(b) - self._upto(a), 0.0)


class TableIndex:
    """The table's DAG candidates and lookups shared by every step."""

    def __init__(self, table: EventTable, classes: np.ndarray, dependencies: Dependencies):
        self.table, self.classes = table, classes
        threads = host_operator_devices(table)  # CPU ranks: devices measured by their host threads' operators
        is_host = np.array([d.kind == "host" or d in threads for d in table.devices] or [False], dtype=bool)
        self.is_thread = is_host
        self.is_gpu = np.array([d.kind == "gpu" for d in table.devices] or [False], dtype=bool)
        rows = np.flatnonzero((classes != EventClass.ANNOTATION) & (table.dur >= 0))
        on_host = is_host[table.device[rows]]
        self.host_ops = rows[on_host]  # every op of a host thread (its leaves and the ops enclosing them)
        host, self.apart = _collective_runs(table, self.host_ops, classes)
        cand = np.concatenate([rows[~on_host], host[_leaf_mask(table, host)], self.apart])
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
        self.rank_rows, self.senders = matched_rows(table) if dependencies.match_ranks else ([], [])
        self.enqueue, self.complete = _gloo_edges(table, self.host_ops, cand[~np.isin(cand, self.apart)])
        self._busy: dict[int, Intervals] = {}
        self._lane_ops: dict[tuple[int, int], Intervals] = {}
        self.lane_max = int(table.lane.max(initial=0)) + 1
        self.has_steps = bool(len(table.steps()))

    def first_op_starts(self) -> dict[int, float]:
        """Step -> the first start of its host threads' operators, enclosing ones too (the replay's windows)."""
        t, ops = self.table, self.host_ops
        steps, at = np.unique(t.step[ops], return_inverse=True)
        first = np.full(len(steps), np.inf)
        np.minimum.at(first, at, t.ts[ops])
        return dict(zip(steps.tolist(), first.tolist()))

    def overlapping(self, start: float, end: float) -> np.ndarray:
        t = self.table
        lo = np.searchsorted(self.short_ts, start - self.short_max, side="left")
        hi = np.searchsorted(self.short_ts, end, side="right")
        rows = np.concatenate([self.short[lo:hi], self.long])
        ts, e = t.ts[rows], t.end[rows]
        return rows[(ts <= end) & ((e > start) | ((ts >= start) & (t.dur[rows] == 0)))]

    def busy(self, device: int) -> Intervals:
        """When ``device`` ran any event (every lane, every step)."""
        if device not in self._busy:
            t = self.table
            rows = np.flatnonzero((t.device == device) & (self.classes != EventClass.ANNOTATION) & (t.dur > 0))
            self._busy[device] = Intervals(t.ts[rows], t.end[rows])
        return self._busy[device]

    def lane_ops(self, device: int, lane: int) -> Intervals:
        """When a host thread ran any operator (its leaves and the operators enclosing them)."""
        key = (device, lane)
        if key not in self._lane_ops:
            t, rows = self.table, self.host_ops
            rows = rows[(t.device[rows] == device) & (t.lane[rows] == lane)]
            self._lane_ops[key] = Intervals(t.ts[rows], t.end[rows])
        return self._lane_ops[key]


def _lane_keys(table: EventTable, rows: np.ndarray, times: np.ndarray) -> np.ndarray:
    """One sortable number per row: its lane (device and thread) first, then ``times`` (from the table's first)."""
    width = int(table.lane.max(initial=0)) + 1
    first = float(table.ts.min(initial=0.0))
    span = float(table.end.max(initial=0.0)) - first + 1.0
    return (table.device[rows].astype(np.int64) * width + table.lane[rows]) * span + (times - first)


def _enclosed(table: EventTable, rows: np.ndarray, outer: np.ndarray) -> np.ndarray:
    """Of ``rows``, those inside one of ``outer`` (not itself) on its lane (``outer`` do not nest)."""
    if not len(outer) or not len(rows):
        return np.zeros(len(rows), dtype=bool)
    outer = outer[np.argsort(_lane_keys(table, outer, table.ts[outer]), kind="stable")]
    starts, ends = _lane_keys(table, outer, table.ts[outer]), _lane_keys(table, outer, table.end[outer])
    k = np.searchsorted(starts, _lane_keys(table, rows, table.ts[rows]), side="right") - 1
    inside = (k >= 0) & (_lane_keys(table, rows, table.end[rows]) <= ends[np.maximum(k, 0)] + EPS_US)
    return inside & (outer[np.maximum(k, 0)] != rows)


def _collective_runs(table: EventTable, host_ops: np.ndarray, classes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The host operators among which the leaves are found, and the collective runs kept apart from their lane.

    A gloo collective's run (``gloo:*``) on a worker thread of its own is that thread's work: the copies it makes
    inside (an all-gather's unpacking) are part of it, so the run is the leaf. A run on the thread that called it
    (a pipeline's ``gloo:send``) is the work's lifetime, not the thread's: where the thread went on with other
    operators inside it, the run is kept apart from the thread's lane (``apart``), reached from its call (gloo's
    enqueue edge) and holding the thread back only where it waited for it (gloo's complete edge)."""
    names = table.strings
    is_run = np.fromiter((bool(CPU_COLLECTIVE_RUN.match(s)) for s in names), dtype=bool, count=len(names))
    is_call = np.fromiter((bool(CPU_COLLECTIVE_CALL.match(s)) for s in names), dtype=bool, count=len(names))
    runs = host_ops[is_run[table.name[host_ops]] & (classes[host_ops] == EventClass.COMMUNICATION)]
    if not len(runs):
        return host_ops, np.zeros(0, dtype=np.int64)
    width = int(table.lane.max(initial=0)) + 1
    lane_of = table.device.astype(np.int64) * width + table.lane
    calling = np.isin(lane_of[runs], lane_of[host_ops[is_call[table.name[host_ops]]]])
    inner = _enclosed(table, host_ops, runs[~calling])  # a worker thread's run: its inner copies are part of it
    own = runs[calling]
    # the calling thread's runs inside which another operator of the thread starts
    keys = np.sort(_lane_keys(table, host_ops, table.ts[host_ops]))
    later = np.searchsorted(keys, _lane_keys(table, own, table.end[own]), side="left") - \
        np.searchsorted(keys, _lane_keys(table, own, table.ts[own]), side="right")
    apart = own[later > 0]
    return host_ops[~inner & ~np.isin(host_ops, apart)], apart


def _gloo_edges(table: EventTable, host_ops: np.ndarray, cand: np.ndarray
                ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """``enqueue`` (call's last leaf -> run) and ``complete`` (run -> the caller's next leaf) pairs of rows: on
    each rank, the k-th ``c10d::*`` call and the k-th ``gloo:*`` run of one collective type."""
    empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    call, run = _gloo_calls_and_runs(table, host_ops)
    if not len(call):
        return empty, empty
    # the last leaf of the caller that starts within the call (the call itself when it is a leaf), not the run
    # itself where it runs on the caller's thread (a pipeline's gloo:recv, which starts inside its c10d::recv_)
    calls = _LaneLeaves(table, cand[~np.isin(cand, run)])
    pos, lo, _ = calls.position(call, table.end[call], "right")
    last = pos - 1
    ok_e = (last >= lo) & (calls.ts[np.maximum(last, 0)] >= table.ts[call] - EPS_US)
    enqueue = (calls.rows[last[ok_e]], run[ok_e])
    leaves = _LaneLeaves(table, cand)
    # the first leaf of the caller that starts after the run ended
    pos, _, hi = leaves.position(call, table.end[run] - EPS_US, "left")
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
            ok = table.ts[c] <= table.ts[r] + EPS_US
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


def dag_windows(tt: TableIndex, steps: Sequence[int]) -> dict[int, tuple[float, float]]:
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

