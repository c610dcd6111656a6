"""The longest path of a step's DAG that ends at one of the step's own events, by one pass in topological order
over arrays; one pass back gives, for any node, the length were that node to weigh nothing (``without``). A DAG
wide enough (a job's ranks side by side) is passed a level at a time in arrays, else node by node; both make the
same operations on the same numbers."""

from __future__ import annotations

import numpy as np

from rnnprof.analyzers.critical_path.graph import StepDAG, dag_levels

_TIE_US = 1e-6  # lengths this close are equal (sums of the same times in another order)
_PROBE_LEVELS = 64  # levels seen before a DAG may be found too narrow for the passes by levels
_MIN_WIDTH = 32  # nodes per level, on average, below which the passes go node by node


class LongestPath:
    """The longest path of ``dag`` ending at one of the step's own events: ``nodes`` and ``length``; one pass in
    topological order (``dist``: the longest path ending at each node), then one back (``tail``: the longest
    starting at each node and ending at one of the step's events), for ``without``."""

    def __init__(self, dag: StepDAG):
        self.nodes: list[int] = []
        self.length = 0.0
        if not dag.n:
            return
        self._total, self._pos = len(dag.n_start), dag.pos
        self._pu, self._pv = dag.pos[dag.src].astype(np.int32), dag.pos[dag.dst].astype(np.int32)
        self._dur = dag.n_dur[dag.order]
        self._gain = (dag.n_dur + dag.wait_in)[dag.order]
        lead = dag.lead[dag.order]
        self._level = dag_levels(self._total, self._pu, self._pv, _PROBE_LEVELS, _MIN_WIDTH)
        dist, back = self._pass_forward(lead) if self._level is None else self._forward_by_levels(lead)
        eligible = _path_ends(dag)
        ranked = np.flatnonzero(eligible)
        end = int(ranked[np.argmax(dist[ranked])])  # the first of the longest
        self.length = float(dist[end])
        chain = []
        while end >= 0:
            chain.append(end)
            end = int(back[end])
        chain.reverse()
        self._dist = dist
        self._tail = self._pass_back(eligible) if self._level is None else self._back_by_levels(eligible)
        self._prefix = np.maximum.accumulate(np.where(eligible, dist, -np.inf))
        self._suffix = np.maximum.accumulate((self._tail + lead)[::-1])[::-1]
        self.nodes = [int(dag.order[k]) for k in chain]

    def _pass_forward(self, lead: np.ndarray) -> tuple[np.ndarray, list[int]]:
        """In topological order: the longest path ending at each node, and the predecessor it comes through
        (-1: it starts there)."""
        total = self._total
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

    def _pass_back(self, eligible: np.ndarray) -> np.ndarray:
        """In reverse topological order: the longest path starting at each node and ending where ``eligible``."""
        total = self._total
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

    def _forward_by_levels(self, lead: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``_pass_forward``'s lengths and predecessors, a level at a time: a node's longest chain through a
        predecessor is the first largest over its edges (in the loop's order), taken where the loop takes it."""
        src_n, count, nodes, seg, bounds = _by_target(self._total, self._pu, self._pv, self._level)
        dist = self._dur + lead
        back = np.full(self._total, -1, dtype=np.int64)
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            if a == b:
                continue
            ea, eb = int(seg[a]), int(seg[b])
            v = nodes[a:b]
            owner = np.repeat(np.arange(b - a), count[v])
            length = dist[src_n[ea:eb]] + self._gain[v][owner]
            best = np.maximum.reduceat(length, seg[a:b] - ea)
            hit = np.flatnonzero(length == best[owner])
            first = hit[np.r_[True, owner[hit][1:] != owner[hit][:-1]]]
            take = best > dist[v] - _TIE_US
            dist[v] = np.where(take, best, dist[v])
            back[v] = np.where(take, src_n[ea:eb][first], -1)
        return dist, back

    def _back_by_levels(self, eligible: np.ndarray) -> np.ndarray:
        """``_pass_back``'s lengths, a level at a time from the last."""
        succ, _, nodes, seg, bounds = _by_target(self._total, self._pv, self._pu, self._level)
        dur, gain = self._dur, self._gain
        tail = np.where(eligible, 0.0, -np.inf) + dur
        for a, b in zip(bounds[:-1].tolist()[::-1], bounds[1:].tolist()[::-1]):
            if a == b:
                continue
            ea, eb = int(seg[a]), int(seg[b])
            s = succ[ea:eb]
            best = np.maximum.reduceat(tail[s] + gain[s] - dur[s], seg[a:b] - ea)
            v = nodes[a:b]
            tail[v] = np.maximum(np.where(eligible[v], 0.0, -np.inf), best) + dur[v]
        return tail

    def without(self, node: int) -> float:
        """The longest path's length with ``node`` weighing nothing (waits kept): the longest through it, less its
        duration, or the longest avoiding it: ending before it, starting after it, or over an edge across its
        place in the topological order."""
        p = int(self._pos[node])
        through = self._dist[p] + self._tail[p] - 2 * self._dur[p]
        before = self._prefix[p - 1] if p > 0 else -np.inf
        after = self._suffix[p + 1] if p + 1 < len(self._suffix) else -np.inf
        across = (self._pu < p) & (self._pv > p)
        over = (self._dist[self._pu[across]] + self._gain[self._pv[across]] - self._dur[self._pv[across]]
                + self._tail[self._pv[across]]).max(initial=-np.inf)
        return float(max(through, before, after, over))


def _path_ends(dag: StepDAG) -> np.ndarray:
    """Where a path may end, by topological position: the step's own events (every event when it has none)."""
    eligible = np.zeros(len(dag.n_start), dtype=bool)
    eligible[dag.pos[np.flatnonzero(dag.own)]] = True
    if not eligible.any():
        eligible[dag.pos[np.arange(dag.n)]] = True
    return eligible


def _by_target(total: int, src: np.ndarray, dst: np.ndarray, level: np.ndarray):
    """The edges ``src -> dst`` grouped by target, each target's sources in increasing order, the targets with
    edges taken by level: ``(sources, count, nodes, seg, bounds)``: ``nodes`` the targets by level, ``count`` each
    node's edges, ``sources`` their sources in that order (node after node), ``seg`` where each node's start in
    ``sources``, ``bounds`` where each level starts in ``nodes``. Only these outlive the call (a job's step holds
    a million edges)."""
    by = np.lexsort((src, dst))
    ptr = np.searchsorted(dst[by], np.arange(total + 1), side="left").astype(np.int32)
    sources = src[by]
    del by
    count = np.diff(ptr)
    nodes = np.flatnonzero(count).astype(np.int32)
    nodes = nodes[np.argsort(level[nodes], kind="stable")]
    seg = np.concatenate([[0], np.cumsum(count[nodes])])
    edges = np.repeat(ptr[nodes] - seg[:-1], count[nodes]).astype(np.int32)
    edges += np.arange(seg[-1], dtype=np.int32)
    sources = sources[edges]
    del edges
    bounds = np.searchsorted(level[nodes], np.arange(int(level.max(initial=0)) + 2), side="left")
    return sources, count, nodes, seg, bounds
