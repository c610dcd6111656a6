"""One step's replay graph, from the critical path's DAG (``critical_path.graph.StepDAG``): each node's own work
split from its waits (docs/commands/whatif.md).

Nodes: the DAG's events; an *arrival* per collective member (when its rank got there); a *done* node per
collective (the last arrival plus the transfer); a *sync end* per synchronizing call that waited for the GPU. A
member's run starts when its collective is done and lasts its own tail; a call that waits for the GPU ends
after the GPU work it waited for. A gap before a node that its dependencies do not explain is work on a host
thread (``pre``: untraced host time) and a delay of the binding edge elsewhere (an idle gap before a kernel is a
dependency, not a duration). Edges keep the DAG's kinds, with ``arrival``, ``done`` and ``sync``; a launch
edge runs from the launching call's start.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rnnprof.analyzers.classify import EventClass
from rnnprof.analyzers.critical_path import (EDGE_COLLECTIVE, EDGE_COMPLETE, EDGE_ENQUEUE, EDGE_KINDS,
                                             EDGE_LAUNCH)
from rnnprof.analyzers.critical_path.graph import StepDAG
from rnnprof.analyzers.syncs import SYNC_CALL
from rnnprof.events import EventTable, Kind

EDGE_ARRIVAL = "arrival"  # a member's arrival -> its collective's done node, and -> the member's run
EDGE_DONE = "done"  # a collective's done node -> its member's run, and -> the thread that waited for it
EDGE_SYNC = "sync"  # a call's start and the GPU work it waited for -> the call's end
REPLAY_EDGES = (*EDGE_KINDS, EDGE_ARRIVAL, EDGE_DONE, EDGE_SYNC)

EVENT, ARRIVAL, DONE, SYNC_END = 0, 1, 2, 3  # node kinds
NODE_KINDS = ("event", "arrival", "done", "sync end")
_EPS_US = 0.5


@dataclass
class ReplayGraph:
    """Arrays per node (``row``: the table row it stands for, the member's for arrivals and done nodes) and per
    edge; ``start``/``end`` are measured, from the window's start; ``dur`` and ``pre`` are work, ``lag`` delay."""

    rows: np.ndarray
    node_kind: np.ndarray
    group: np.ndarray  # the collective of members, arrivals and done nodes; -1 for others
    start: np.ndarray
    end: np.ndarray
    dur: np.ndarray
    pre: np.ndarray
    host: np.ndarray  # a node of a host thread (its gaps are the thread's work)
    own: np.ndarray  # an event of the step itself (the step's time is the last end of these)
    earlier: np.ndarray  # an earlier step's GPU work still running in this step's window (the step starts at its end)
    src: np.ndarray
    dst: np.ndarray
    kind: np.ndarray  # index into REPLAY_EDGES
    from_start: np.ndarray  # the edge runs from its source's start (a launch), not its end
    lag: np.ndarray
    skewed: int = 0  # members that ended before their collective's last arrival (clocks of ranks disagree)

    @property
    def size(self) -> int:
        return len(self.rows)

    def edge_kind(self, name: str) -> np.ndarray:
        return self.kind == REPLAY_EDGES.index(name)


class _Builder:
    """Nodes and edges gathered while the DAG is turned into a replay graph."""

    def __init__(self, dag: StepDAG, n_nodes: int):
        self.rows = [np.asarray(dag.rows, dtype=np.int64)]
        self.node_kind = [np.zeros(dag.n, dtype=np.int8)]
        self.start = [np.asarray(dag.n_start[:dag.n], dtype=np.float64).copy()]
        self.end = [np.asarray(dag.n_end[:dag.n], dtype=np.float64).copy()]
        self.group = [np.full(dag.n, -1, dtype=np.int64)]
        self.count = dag.n
        self.src: list[np.ndarray] = []
        self.dst: list[np.ndarray] = []
        self.kind: list[np.ndarray] = []
        self.sync: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # calls, their ends, the GPU work

    def nodes(self, rows, kind: int, start, end, group) -> np.ndarray:
        k = len(rows)
        self.rows.append(np.asarray(rows, dtype=np.int64))
        self.node_kind.append(np.full(k, kind, dtype=np.int8))
        self.start.append(np.asarray(start, dtype=np.float64))
        self.end.append(np.asarray(end, dtype=np.float64))
        self.group.append(np.asarray(group, dtype=np.int64))
        ids = np.arange(self.count, self.count + k)
        self.count += k
        return ids

    def edges(self, src, dst, kind) -> None:
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        self.src.append(src)
        self.dst.append(dst)
        self.kind.append(np.asarray(kind, dtype=np.int8) if not isinstance(kind, str)
                         else np.full(len(src), REPLAY_EDGES.index(kind), dtype=np.int8))

    def cat(self, parts: list[np.ndarray], dtype) -> np.ndarray:
        return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)


def replay_graph(dag: StepDAG, table: EventTable, classes: np.ndarray, is_thread: np.ndarray) -> ReplayGraph:
    """The replay graph of one step's DAG. ``is_thread``: per device code, whether it is a host thread's (CPU
    ranks, host lanes), whose untraced gaps are its work."""
    n = dag.n
    b = _Builder(dag, n)
    src, dst, kind = (np.asarray(a) for a in (dag.src, dag.dst, dag.kind))
    entry_of = np.asarray(dag.entry_of, dtype=np.int64)
    collective = kind == EDGE_KINDS.index(EDGE_COLLECTIVE)
    groups = _groups(n, entry_of, src[collective], dst[collective])
    # the DAG's entries become arrivals: they keep the edges into them (a member's own predecessors)
    arrivals = b.nodes(dag.rows[entry_of], ARRIVAL, dag.n_start[entry_of], dag.n_start[entry_of],
                       groups[entry_of])
    redirect = np.arange(n + len(entry_of))
    redirect[n:] = arrivals
    # a grouped member's ``complete`` edge gives way to its collective's done node (``_waiters``)
    grouped = np.zeros(n + len(entry_of), dtype=bool)
    grouped[:n] = (groups >= 0) & ~dag.sends  # a send's thread waits for it, not for its receive
    keep = ~collective & ~((kind == EDGE_KINDS.index(EDGE_COMPLETE)) & grouped[src])
    b.edges(redirect[src[keep]], redirect[dst[keep]], kind[keep])
    skewed = _collectives(b, dag, table, entry_of, arrivals, groups, src, dst, kind)
    _syncs(b, dag, table, classes)
    return _finish(b, dag, table, is_thread, skewed)


def _groups(n: int, entry_of: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Each event's collective (its members joined by the DAG's collective edges, entry -> member); -1."""
    parent = np.arange(n)

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for u, v in zip(entry_of[src - n].tolist() if len(src) else [], dst.tolist()):
        a, c = find(u), find(v)
        if a != c:
            parent[a] = c
    members = np.unique(entry_of)
    roots = np.array([find(int(m)) for m in members], dtype=np.int64)
    group = np.full(n, -1, dtype=np.int64)
    if len(members):
        _, ids = np.unique(roots, return_inverse=True)
        group[members] = ids.reshape(-1)
        sizes = np.bincount(ids.reshape(-1))
        group[members[sizes[ids.reshape(-1)] < 2]] = -1
    return group


def _collectives(b: _Builder, dag: StepDAG, table: EventTable, entry_of: np.ndarray, arrivals: np.ndarray,
                 groups: np.ndarray, src: np.ndarray, dst: np.ndarray, kind: np.ndarray) -> int:
    """A done node per collective: its last arrival, then the transfer until the data was there: its first
    member's end, or earlier where a caller's thread, idle when the last member arrived, went on before that
    (gloo's thread may record its end late, waiting for a core). Each member's run follows its arrival and its
    done node; each waiting caller's thread follows the done node. A send (``StepDAG.sends``) is no such
    member: its receive's done node waits for its arrival, and its run follows its own arrival alone. Returns the members whose end precedes the
    last arrival (clock skew between ranks)."""
    member_groups = groups[entry_of]
    ids = np.unique(member_groups[member_groups >= 0])
    if not len(ids):
        return 0
    ok = member_groups >= 0
    start, end = dag.n_start[entry_of][ok], dag.n_end[entry_of][ok]
    members, arr = entry_of[ok], arrivals[ok]
    sends = dag.sends[members]  # a send's run follows its own arrival; its receive waits for it (done)
    g = np.searchsorted(ids, member_groups[ok])
    last = np.full(len(ids), -np.inf)
    first_end = np.full(len(ids), np.inf)
    np.maximum.at(last, g, start)
    np.minimum.at(first_end, g[~sends], end[~sends])
    waiter, resumed = _waiters(dag, table, members, last[g], src, dst, kind)
    has = (waiter >= 0) & ~sends
    np.minimum.at(first_end, g[has], resumed[has])
    done_at = np.maximum(first_end, last)
    done = b.nodes(dag.rows[members][np.unique(g, return_index=True)[1]], DONE, last, done_at, ids)
    b.edges(arr, done[g], EDGE_ARRIVAL)
    b.edges(arr, members, EDGE_ARRIVAL)
    b.edges(done[g][~sends], members[~sends], EDGE_DONE)
    b.edges(done[g][has], waiter[has], EDGE_DONE)
    takes = members[~sends]
    b.start[0][takes] = done_at[g][~sends]
    skewed = int(np.sum(end[~sends] < done_at[g][~sends] - _EPS_US))
    b.end[0][takes] = np.maximum(end[~sends], done_at[g][~sends])
    return skewed


def _lanes(dag: StepDAG, table: EventTable) -> np.ndarray:
    """Each event's lane; a run kept apart from its thread's lane (``StepDAG.apart``) on one of its own."""
    rows = dag.rows
    lane = table.device[rows].astype(np.int64) * (int(table.lane.max(initial=0)) + 1) + table.lane[rows]
    apart = dag.apart[dag.apart >= 0]
    lane[apart] = -1 - np.arange(len(apart))
    return lane


def _waiters(dag: StepDAG, table: EventTable, members: np.ndarray, last: np.ndarray, src: np.ndarray,
             dst: np.ndarray, kind: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each member handed over by a call (an enqueue edge), the node of the caller's lane that waited for its
    collective: the first that starts once the last member arrived (``last``), where the lane sat idle then;
    and when it started (-1 and inf where none)."""
    n = dag.n
    entry_of = np.asarray(dag.entry_of, dtype=np.int64)
    enq = kind == EDGE_KINDS.index(EDGE_ENQUEUE)
    caller, into = src[enq], dst[enq]
    member = np.where(into >= n, entry_of[np.minimum(np.maximum(into - n, 0), max(len(entry_of) - 1, 0))], into)
    lane = _lanes(dag, table)
    order = np.lexsort((dag.n_start[:n], lane))
    o_lane, o_start, o_end = lane[order], dag.n_start[:n][order], dag.n_end[:n][order]
    reach = _lane_reach(o_lane, o_end)
    position = {int(m): k for k, m in enumerate(members.tolist())}
    waiter, resumed = np.full(len(members), -1, dtype=np.int64), np.full(len(members), np.inf)
    for c, m in zip(caller.tolist(), member.tolist()):
        k = position.get(m)
        if k is None or c >= n:
            continue
        t, ln = float(last[k]), lane[c]
        lo, hi = np.searchsorted(o_lane, ln, "left"), np.searchsorted(o_lane, ln, "right")
        p = lo + int(np.searchsorted(o_start[lo:hi], t - _EPS_US, "left"))
        if p < hi and p > lo and reach[p - 1] <= t + _EPS_US:
            waiter[k], resumed[k] = int(order[p]), float(o_start[p])
    return waiter, resumed


def _lane_reach(lane: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The latest end so far within each lane (lanes sorted together)."""
    reach = end.copy()
    if not len(end):
        return reach
    first = np.flatnonzero(np.concatenate([[True], lane[1:] != lane[:-1]]))
    for a, z in zip(first.tolist(), [*first[1:].tolist(), len(end)]):
        reach[a:z] = np.maximum.accumulate(end[a:z])
    return reach


def _syncs(b: _Builder, dag: StepDAG, table: EventTable, classes: np.ndarray) -> None:
    """A synchronizing call (``syncs.SYNC_CALL``) that ended with GPU work of its process: split into its start
    (no work) and a *sync end* that waits for that GPU work, then does the call's own rest."""
    n, rows = dag.n, dag.rows
    names = np.array([bool(SYNC_CALL.match(s)) for s in table.strings] or [False], dtype=bool)
    calls = np.flatnonzero((table.kind[rows] == Kind.RUNTIME) & names[table.name[rows]])
    if not len(calls):
        return
    worker = np.array([d.worker for d in table.devices] or [""], dtype=object)
    on_gpu = np.array([d.kind == "gpu" for d in table.devices] or [False], dtype=bool)[table.device[rows]]
    gpu = np.flatnonzero(on_gpu & (classes[rows] != EventClass.ANNOTATION))
    gpu = gpu[np.argsort(dag.n_end[gpu], kind="stable")]
    g_end, g_worker = dag.n_end[gpu], worker[table.device[rows[gpu]]]
    waited, on = [], []
    for c in calls.tolist():
        s, e = dag.n_start[c], dag.n_end[c]
        k = int(np.searchsorted(g_end, e + _EPS_US, "right")) - 1
        lo = int(np.searchsorted(g_end, s, "left"))
        w = worker[table.device[rows[c]]]
        while k >= lo and g_worker[k] != w:
            k -= 1
        if k >= lo:
            waited.append(c)
            on.append(int(gpu[k]))
    if waited:
        waited_a, on_a = np.array(waited), np.array(on)
        ends = b.nodes(rows[waited_a], SYNC_END, np.maximum(dag.n_start[waited_a], dag.n_end[on_a]),
                       dag.n_end[waited_a], np.full(len(waited_a), -1))
        b.sync = (waited_a, ends, on_a)


def _finish(b: _Builder, dag: StepDAG, table: EventTable, is_thread: np.ndarray, skewed: int) -> ReplayGraph:
    rows = b.cat(b.rows, np.int64)
    node_kind = b.cat(b.node_kind, np.int8)
    start, end = b.cat(b.start, np.float64), b.cat(b.end, np.float64)
    src, dst, kind = b.cat(b.src, np.int64), b.cat(b.dst, np.int64), b.cat(b.kind, np.int8)
    group = b.cat(b.group, np.int64)
    b.rows = b.node_kind = b.start = b.end = b.src = b.dst = b.kind = b.group = []  # their parts, let go
    sync = b.sync
    if sync is not None:
        calls, ends, on = sync
        end_of = np.arange(len(rows))
        end_of[calls] = ends
        moved = ~np.isin(kind, [REPLAY_EDGES.index(EDGE_LAUNCH)])
        src = np.where(moved, end_of[src], src)  # the call's successors follow its end
        end[calls] = start[calls]
        src = np.concatenate([src, calls, on])
        dst = np.concatenate([dst, ends, ends])
        kind = np.concatenate([kind, np.full(2 * len(calls), REPLAY_EDGES.index(EDGE_SYNC), dtype=np.int8)])
    _, first = np.unique(src * len(rows) + dst, return_index=True)
    first.sort()
    # int32 node indices: half the memory of a job's step (far fewer nodes than 2**31)
    src, dst, kind = src[first].astype(np.int32), dst[first].astype(np.int32), kind[first]
    own = np.zeros(len(rows), dtype=bool)
    own[:dag.n] = np.asarray(dag.own, dtype=bool)
    earlier = np.zeros(len(rows), dtype=bool)
    earlier[:dag.n] = np.asarray(dag.earlier, dtype=bool)
    host = np.zeros(len(rows), dtype=bool)
    host[:dag.n] = is_thread[table.device[rows[:dag.n]]] & (node_kind[:dag.n] == EVENT)
    graph = ReplayGraph(rows=rows, node_kind=node_kind, group=group, start=start, end=end,
                        dur=end - start, pre=np.zeros(len(rows)), host=host, own=own, earlier=earlier, src=src,
                        dst=dst, kind=kind, from_start=kind == REPLAY_EDGES.index(EDGE_LAUNCH), lag=np.zeros(len(src)),
                        skewed=skewed)
    return graph
