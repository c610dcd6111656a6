"""One step's DAG, as arrays: the events overlapping the step's window and the edges that say "could not start
before" (lane, launch, data, transfer, collective joins, enqueue and complete), in topological order and
weighed; ``build_step_graph`` gives it as networkx."""

from __future__ import annotations

import bisect
from collections import defaultdict

import networkx as nx
import numpy as np

from rnnprof.analyzers.classify import EventClass, classify
from rnnprof.analyzers.critical_path.result import (EDGE_COLLECTIVE, EDGE_COMPLETE, EDGE_DATA, EDGE_ENQUEUE,
                                                    EDGE_KINDS, EDGE_LANE, EDGE_LAUNCH, EDGE_TRANSFER, Dependencies,
                                                    FlowEnd)
from rnnprof.analyzers.critical_path.table_index import EPS_US, TableIndex, dag_windows
from rnnprof.events import Device, EventTable, Kind, match_correlation


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


class StepDAG:
    """The DAG of one window. Nodes ``0..n-1`` are events (``rows``), ``n..`` the entries of collective members
    (``entry_of``: the member's node). Edges ``src -> dst`` of kinds ``EDGE_KINDS[kind]``."""

    def __init__(self, tt: TableIndex, step: int, window: tuple[float, float], dependencies: Dependencies,
                 ordered: bool = True):
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
        self.earlier = self._earlier_gpu_work(dst[kind == EDGE_KINDS.index(EDGE_LAUNCH)])
        join_key = self._join_collectives(src, dst, kind, self._collective_groups(dependencies))
        # node times: entries are zero-length at their member's start
        self.n_start = np.concatenate([self.start, self.start[self.entry_of]])
        self.n_end = np.concatenate([self.end, self.start[self.entry_of]])
        self.start, self.end = self.n_start[:self.n], self.n_end[:self.n]  # the events' own, held once
        self.n_dur = self.n_end - self.n_start
        key = np.where(np.isfinite(join_key), np.maximum(join_key, self.start), self.start)
        if ordered:  # the path's order and weights (without: the edges only, as the path's DAG has them)
            self._order(key)
            self._weigh()
        elif not self._acyclic(key):
            self._order(key)  # drops the edges that close a cycle

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
        self.end = np.maximum(np.where(end > limit + EPS_US, limit, end), self.start)
        self.own = t.step[rows] == self.step

    def _earlier_gpu_work(self, launched: np.ndarray) -> np.ndarray:
        """The GPU work of earlier steps still running in the window (``launched``: the nodes whose launch is in
        it). A device runs its queue in order, so this step's device work, and a host call that waits for it,
        begin after it; a host thread's tail (gloo's) runs beside the step and is not counted. Work of no step
        that was launched before the window (its launch is not in it) and starts on its stream before this step's
        first work there is a tail too: the step before the trace's first step, whose launches it does not hold."""
        t, rows = self.tt.table, self.rows
        gpu = self.tt.is_gpu[t.device[rows].astype(np.int64)]
        step = t.step[rows]
        earlier = gpu & (step >= 0) & (step < self.step)
        mine = gpu & self.own
        if mine.any():
            lane = t.device[rows].astype(np.int64) * self.tt.lane_max + t.lane[rows]
            _, lane = np.unique(lane, return_inverse=True)
            first = np.full(int(lane.max()) + 1, np.inf)
            np.minimum.at(first, lane[mine], self.start[mine])  # each stream's first work of this step
            outside = np.ones(self.n, dtype=bool)
            outside[launched[launched < self.n]] = False
            earlier |= gpu & (step < 0) & outside & (self.start < first[lane])
        return earlier

    def _lane_edges(self, edges: _Edges) -> None:
        """Lane order: each event to the first event of its lane that starts once it has ended."""
        t, rows, n = self.tt.table, self.rows, self.n
        device = t.device[rows].astype(np.int64)
        lane = device * self.tt.lane_max + t.lane[rows]
        self.apart = apart = self.node_of(self.tt.apart)
        apart = apart[apart >= 0]
        lane[apart] = -1 - np.arange(len(apart))  # a run kept apart from its thread's lane: a lane of its own
        _, lane_id = np.unique(lane, return_inverse=True)
        lane_id = lane_id.reshape(-1)
        order = np.lexsort((-(self.end - self.start), self.start, lane_id))
        span = float(self.window[1] - self.window[0]) + 1.0
        key = lane_id[order] * span + self.start[order]
        nxt = np.searchsorted(key, lane_id[order] * span + self.end[order], side="left")
        nxt = np.maximum(nxt, np.arange(n) + 1)
        ok = nxt < n
        ok[ok] &= lane_id[order][nxt[ok]] == lane_id[order][ok]
        edges.add(order[ok], order[nxt[ok]], EDGE_LANE)

    def _launch_edges(self, edges: _Edges) -> None:
        """Launches: each runtime call to the device work of its correlation id."""
        tt, rows = self.tt, self.rows
        t = tt.table
        corr = tt.pcorr[rows]
        runtime = (t.kind[rows] == Kind.RUNTIME) & (corr >= 0)
        work = ~(t.kind[rows] == Kind.RUNTIME) & (corr >= 0) & tt.is_gpu[t.device[rows].astype(np.int64)]
        calls, works = np.flatnonzero(runtime), np.flatnonzero(work)
        found = match_correlation(corr[calls], corr[works])
        edges.add(calls[found[found >= 0]], works[found >= 0], EDGE_LAUNCH)

    def _gloo_edges(self, edges: _Edges) -> None:
        """gloo: call -> run -> the caller's next op (those with both ends in the window)."""
        for (a, b), k in ((self.tt.enqueue, EDGE_ENQUEUE), (self.tt.complete, EDGE_COMPLETE)):
            u, v = self.node_of(a), self.node_of(b)
            keep = (u >= 0) & (v >= 0)
            edges.add(u[keep], v[keep], k)

    def _join_collectives(self, src: np.ndarray, dst: np.ndarray, kind: np.ndarray,
                          groups: list[list[int]]) -> np.ndarray:
        """Collective joins: each member's entry takes its incoming edges; every entry precedes every member, but
        a send (``sends``), which its own entry alone precedes: its receive waits for it, it waits for no receive.
        Sets ``entry_of`` and the edges (one per pair, the first kind found, no self-loops); returns each
        member's join time (its group's last start, a send's own start; ``-inf`` for other events)."""
        n = self.n
        entry_of: list[np.ndarray] = []
        member_entry = np.full(n, -1, dtype=np.int64)
        join_src, join_dst, join_key = [], [], np.full(n, -np.inf)
        count = 0
        for group in groups:
            members = np.array(group, dtype=np.int64)
            members = members[member_entry[members] < 0]
            if len(members) < 2:
                continue
            entries = np.arange(n + count, n + count + len(members))
            member_entry[members] = entries
            entry_of.append(members)
            count += len(members)
            sends = self.sends[members]
            join_key[members] = np.where(sends, self.start[members], self.start[members].max())
            join_src.append(np.tile(entries, int((~sends).sum())))  # every entry into each member but a send
            join_dst.append(np.repeat(members[~sends], len(members)))
            join_src.append(entries[sends])  # a send waits for no receive: its own entry alone
            join_dst.append(members[sends])
        self.entry_of = np.concatenate(entry_of) if entry_of else np.zeros(0, dtype=np.int64)
        redirect = member_entry[dst] if len(dst) else dst
        dst = np.where(redirect >= 0, redirect, dst)
        if join_src:
            src = np.concatenate([src, *join_src])
            dst = np.concatenate([dst, *join_dst])
            kind = np.concatenate([kind, np.full(len(src) - len(kind), EDGE_KINDS.index(EDGE_COLLECTIVE), np.int8)])
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
        ``EPS_US``; among the 64 that start last before it), the one with a start or end nearest it, the later
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
        k = int(np.searchsorted(self.start[members], ts + EPS_US, side="right"))
        near = members[max(k - 64, 0):k]
        near = near[self.end[near] >= ts - EPS_US]
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
                    k = bisect.bisect_right(ends, self.start[c] + EPS_US) - 1
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
        self.sends = np.zeros(self.n, dtype=bool)
        senders = self.node_of(np.array(self.tt.senders, dtype=np.int64))
        self.sends[senders[senders >= 0]] = True
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
            order = topological_order(total, self.src, self.dst)
            if order is not None:
                pos[order] = np.arange(total)
                self.order, self.pos = order, pos
                return
            g = nx.DiGraph()
            g.add_nodes_from(range(total))
            g.add_edges_from(zip(self.src.tolist(), self.dst.tolist()))
            if not nx.is_directed_acyclic_graph(g):
                late = self.n_start[self.dst] + EPS_US < self.n_start[self.src]
                g.remove_edges_from(zip(self.src[late].tolist(), self.dst[late].tolist()))
                while not nx.is_directed_acyclic_graph(g):
                    cycle = nx.find_cycle(g)
                    g.remove_edge(*cycle[-1][:2])
                keep = np.array([g.has_edge(u, v) for u, v in zip(self.src.tolist(), self.dst.tolist())], dtype=bool)
                self.src, self.dst, self.kind = self.src[keep], self.dst[keep], self.kind[keep]
            order = np.array(list(nx.topological_sort(g)), dtype=np.int64)
            pos[order] = np.arange(total)
        self.order, self.pos = order, pos

    def _acyclic(self, key: np.ndarray) -> bool:
        """Whether an order with every edge's source first is found in arrays (``sources_first`` of ``_order``'s
        first order): then the edges make no cycle and ``_order`` would keep them all."""
        total = len(self.n_start)
        k = np.concatenate([key, self.start[self.entry_of]])
        order = np.lexsort((np.arange(total), self.n_end, ~(np.arange(total) >= self.n), k))
        pos = np.empty(total, dtype=np.int64)
        pos[order] = np.arange(total)
        return sources_first(total, self.src, self.dst, pos) is not None

    def _weigh(self) -> None:
        total = len(self.n_start)
        latest = np.full(total, -np.inf)
        np.maximum.at(latest, self.dst, self.n_end[self.src])
        self.wait_in = np.where(np.isfinite(latest), self.n_start - latest, 0.0)  # the same for every edge in
        # A node without predecessors in the window (its lane's previous event ended before the window) is
        # reached from the window's start: its lead is the time from there.
        self.lead = np.where(np.isfinite(latest), 0.0, self.n_start)


_PASSES = 64  # of ``sources_first`` before a cycle is presumed
_PROBE_LEVELS = 64  # generations of ``topological_order`` taken in arrays before it may go on node by node
_MIN_WIDTH = 32  # nodes per generation, on average, below which it goes on node by node


def sources_first(total: int, src: np.ndarray, dst: np.ndarray, pos: np.ndarray) -> np.ndarray | None:
    """The order ``pos`` (each node's place) with each node that comes before a source of its moved just after
    it, pass by pass: an order of nodes ``0..total-1`` with every edge's source first; None when edges still
    point backwards after ``_PASSES`` passes (a cycle, or a long chain of them)."""
    key = pos.astype(np.float64)
    for _ in range(_PASSES):
        order = np.argsort(key, kind="stable")
        at = np.empty(total, dtype=np.int64)
        at[order] = np.arange(total)
        back = at[src] >= at[dst]
        if not back.any():
            return order
        np.maximum.at(key, dst[back], key[src[back]] + 1e-6)
    return None


def dag_levels(total: int, src: np.ndarray, dst: np.ndarray, probe: int, min_width: float) -> np.ndarray | None:
    """Each node's level (0: no edge in; else one more than its highest source's) over edges ``src -> dst`` of
    a DAG of nodes ``0..total-1``; None once ``probe`` levels or more hold fewer than ``min_width`` nodes each on
    average (a chain, mostly: arrays a level at a time would cost more than a loop node by node)."""
    waiting = np.bincount(dst, minlength=total).astype(np.int32)
    by = np.argsort(src, kind="stable")
    children = dst[by].astype(np.int32)
    optr = np.searchsorted(src[by], np.arange(total + 1), side="left").astype(np.int32)
    del by
    level = np.zeros(total, dtype=np.int32)
    slot = np.zeros(total, dtype=np.int32)
    free = np.flatnonzero(waiting == 0)
    k = done = 0
    while len(free):
        level[free] = k
        k, done = k + 1, done + len(free)
        if k >= probe and done < k * min_width:
            return None
        starts = optr[free]
        counts = optr[free + 1] - starts
        n = int(counts.sum())
        if not n:
            break
        kids = children[np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(n)]
        np.subtract.at(waiting, kids, 1)
        free = kids[waiting[kids] == 0]
        slot[free] = np.arange(len(free))  # a node freed by two sources at once is kept once
        free = free[slot[free] == np.arange(len(free))]
    return level


def topological_order(total: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray | None:
    """``networkx.topological_sort``'s order of the graph of nodes ``0..total-1`` and edges ``src -> dst`` added in
    this order (generation by generation, each in the order its nodes became free), without building the graph;
    None when it has a cycle. Generations are taken in arrays while they are wide (a job's ranks side by side: a
    node is freed where the last of its edges from the generation is), then node by node."""
    by_src = np.argsort(src, kind="stable")
    children = dst[by_src]
    ptr = np.searchsorted(src[by_src], np.arange(total + 1), side="left")
    waiting = np.bincount(dst, minlength=total)
    free = np.flatnonzero(waiting == 0)
    done: list[np.ndarray] = []
    count = 0
    while len(free) and (len(done) < _PROBE_LEVELS or count >= len(done) * _MIN_WIDTH):
        done.append(free)
        count += len(free)
        starts = ptr[free]
        counts = ptr[free + 1] - starts
        kids = children[np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))]
        np.subtract.at(waiting, kids, 1)
        freed = kids[waiting[kids] == 0]
        _, last = np.unique(freed[::-1], return_index=True)
        free = freed[np.sort(len(freed) - 1 - last)]
    order = np.concatenate([*done, _generations(free, children, ptr, waiting)]) if done else \
        _generations(free, children, ptr, waiting)
    return order if len(order) == total else None


def _generations(free: np.ndarray, children: np.ndarray, ptr: np.ndarray, waiting: np.ndarray) -> np.ndarray:
    """``topological_order``'s generations from ``free`` on, node by node (``waiting``: each node's edges not yet
    taken)."""
    if not len(free):
        return np.zeros(0, dtype=np.int64)
    children_l, ptr_l, waiting_l = children.tolist(), ptr.tolist(), waiting.tolist()
    free_l = free.tolist()
    order: list[int] = []
    while free_l:
        generation, free_l = free_l, []
        for node in generation:
            for child in children_l[ptr_l[node]:ptr_l[node + 1]]:
                waiting_l[child] -= 1
                if not waiting_l[child]:
                    free_l.append(child)
        order.extend(generation)
    return np.array(order, dtype=np.int64)


def build_step_graph(table: EventTable, step: int, dependencies: Dependencies = Dependencies(),
                     classes: np.ndarray | None = None) -> nx.DiGraph:
    """The DAG of one step's window as networkx: nodes are table rows (and ``("entry", row)`` for collective
    members) with ``start``/``end``/``dur`` from the window's start; edges have ``kind`` and ``wait``."""
    classes = classify(table) if classes is None else classes
    tt = TableIndex(table, classes, dependencies)
    window = dag_windows(tt, [step]).get(step)
    g = nx.DiGraph()
    if window is None:
        return g
    dag = StepDAG(tt, step, window, dependencies)
    names = [int(r) for r in dag.rows] + [("entry", int(dag.rows[m])) for m in dag.entry_of]
    for k, name in enumerate(names):
        g.add_node(name, start=float(dag.n_start[k]), end=float(dag.n_end[k]), dur=float(dag.n_dur[k]))
    for u, v, kind in zip(dag.src.tolist(), dag.dst.tolist(), dag.kind.tolist()):
        g.add_edge(names[u], names[v], kind=EDGE_KINDS[kind], wait=float(dag.wait_in[v]))
    return g

