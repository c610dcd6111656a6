"""The replay: earliest starts in dependency order. A node starts when the last of its dependencies allows (an
edge's source's end, or its start for a launch, plus the edge's delay), after its own host work before it
(``pre``), and ends its own work later; ``calibrate`` sets the delays and the host work so that, unchanged, the
replay gives the measured times."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from rnnprof.analyzers.replay.graph import ARRIVAL, DONE, ReplayGraph

_TIE_US = 1e-6


@dataclass
class Schedule:
    """Replayed times per node; ``bind``: the node each one waited for last (-1: none, or its own host work)."""

    start: np.ndarray
    end: np.ndarray
    bind: np.ndarray
    ready: np.ndarray  # when its dependencies allowed it to start (before its host work)


def replay_order(graph: ReplayGraph) -> tuple[np.ndarray, np.ndarray]:
    """An order in which every edge's source comes first (by measured start, arrivals and done nodes before
    events starting with them), and the mask of the edges kept: a graph whose measured clocks disagree with
    its dependencies (a cycle) loses the edges into the earliest node still waiting, counted by the caller."""
    rank = np.where(np.isin(graph.node_kind, [ARRIVAL, DONE]), 0, 1)
    order = np.lexsort((graph.end, rank, graph.start))
    pos = np.empty(graph.size, dtype=np.int64)
    pos[order] = np.arange(graph.size)
    keep = np.ones(len(graph.src), dtype=bool)
    if not len(graph.src) or np.all(pos[graph.src] < pos[graph.dst]):
        return order, keep
    moved = _moved_after_sources(graph, pos)
    if moved is not None:  # no cycle: any order with every source first gives the same replay
        return moved, keep
    return _kahn(graph, pos, keep)


_PASSES = 64  # of _moved_after_sources before a cycle is presumed (and _kahn breaks it)


def _moved_after_sources(graph: ReplayGraph, pos: np.ndarray) -> np.ndarray | None:
    """The measured order with each node that starts before a source of its moved just after it, pass by pass;
    None when edges still point backwards after ``_PASSES`` passes (a cycle, or a long chain of them)."""
    key = pos.astype(np.float64)
    src, dst = graph.src, graph.dst
    for _ in range(_PASSES):
        order = np.argsort(key, kind="stable")
        at = np.empty(graph.size, dtype=np.int64)
        at[order] = np.arange(graph.size)
        back = at[src] >= at[dst]
        if not back.any():
            return order
        np.maximum.at(key, dst[back], key[src[back]] + 1e-6)
    return None


def _kahn(graph: ReplayGraph, pos: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    total = graph.size
    src, dst = graph.src.tolist(), graph.dst.tolist()
    indeg = np.bincount(graph.dst, minlength=total).tolist()
    out: list[list[int]] = [[] for _ in range(total)]
    into: list[list[int]] = [[] for _ in range(total)]
    for j, (u, v) in enumerate(zip(src, dst)):
        out[u].append(j)
        into[v].append(j)
    key = pos.tolist()
    heap = [(key[v], v) for v in range(total) if indeg[v] == 0]
    heapq.heapify(heap)
    waiting = sorted(range(total), key=key.__getitem__)
    placed = [False] * total
    order: list[int] = []
    cursor = 0
    while len(order) < total:
        if not heap:  # a cycle: the earliest node still waiting loses the edges still into it
            while placed[waiting[cursor]]:
                cursor += 1
            v = waiting[cursor]
            for j in into[v]:
                if keep[j] and not placed[src[j]]:
                    keep[j] = False
            indeg[v] = 0
            heapq.heappush(heap, (key[v], v))
        _, v = heapq.heappop(heap)
        if placed[v]:
            continue
        placed[v] = True
        order.append(v)
        for j in out[v]:
            if keep[j]:
                w = dst[j]
                indeg[w] -= 1
                if indeg[w] == 0 and not placed[w]:
                    heapq.heappush(heap, (key[w], w))
    return np.array(order, dtype=np.int64), keep


def _refs(graph: ReplayGraph, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    return np.where(graph.from_start, start[graph.src], end[graph.src])


def calibrate(graph: ReplayGraph, keep: np.ndarray) -> np.ndarray:
    """Set ``graph.lag`` and ``graph.pre`` from the measured times, and return each node's ``base`` (its earliest
    start from the window's start): an edge whose target started before its source ended overlaps by that much
    (a negative delay); the rest of a gap before a node is its host work on a host thread, else a delay of the
    edge it waited for last (or of the window's start)."""
    s, total = graph.start, graph.size
    ref = _refs(graph, graph.start, graph.end)
    lag = np.where(keep, np.minimum(0.0, s[graph.dst] - ref), 0.0)
    value = np.where(keep, ref + lag, -np.inf)
    best = np.zeros(total)  # the window's start
    np.maximum.at(best, graph.dst, value)
    gap = np.maximum(s - best, 0.0)
    base = np.zeros(total)
    pre = np.where(graph.host, gap, 0.0)
    other = ~graph.host & (gap > 0)
    # the edge each node waited for last: the first of its largest values
    by = np.lexsort((-value, graph.dst))
    first = np.ones(len(by), dtype=bool)
    first[1:] = graph.dst[by][1:] != graph.dst[by][:-1]
    binding = by[first]
    binding = binding[(value[binding] >= best[graph.dst[binding]] - _TIE_US) & (value[binding] > 0)]
    has_edge = np.zeros(total, dtype=bool)
    has_edge[graph.dst[binding]] = True
    delayed = binding[other[graph.dst[binding]]]
    lag[delayed] += gap[graph.dst[delayed]]
    from_window = other & ~has_edge
    base[from_window] = s[from_window]
    graph.lag, graph.pre = lag, pre
    return base


def replay(graph: ReplayGraph, order: np.ndarray, keep: np.ndarray, dur: np.ndarray, pre: np.ndarray,
           lag: np.ndarray, base: np.ndarray) -> Schedule:
    """Earliest start times in ``order``, with these durations, host work and delays, over the edges ``keep``."""
    total = graph.size
    e = np.flatnonzero(keep)
    by = e[np.argsort(graph.dst[e], kind="stable")]
    ptr = np.searchsorted(graph.dst[by], np.arange(total + 1), side="left").tolist()
    src_l, lag_l, fs_l = graph.src[by].tolist(), lag[by].tolist(), graph.from_start[by].tolist()
    dur_l, pre_l, base_l = dur.tolist(), pre.tolist(), base.tolist()
    start = [0.0] * total
    end = [0.0] * total
    ready = [0.0] * total
    bind = [-1] * total
    for v in order.tolist():
        t, arg = base_l[v], -1
        for j in range(ptr[v], ptr[v + 1]):
            u = src_l[j]
            x = (start[u] if fs_l[j] else end[u]) + lag_l[j]
            if x > t:
                t, arg = x, u
        ready[v] = t
        t += pre_l[v]
        start[v] = t
        end[v] = t + dur_l[v]
        bind[v] = arg
    return Schedule(np.asarray(start), np.asarray(end), np.asarray(bind, dtype=np.int64), np.asarray(ready))
