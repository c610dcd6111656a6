"""The replay: earliest starts in dependency order. A node starts when the last of its dependencies allows (an
edge's source's end, or its start for a launch, plus the edge's delay), after its own host work before it
(``pre``), and ends its own work later; ``calibrate`` sets the delays and the host work so that, unchanged, the
replay gives the measured times."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from rnnprof.analyzers.critical_path.graph import dag_levels, sources_first
from rnnprof.analyzers.replay.graph import ARRIVAL, DONE, ReplayGraph

_TIE_US = 1e-6


@dataclass(frozen=True)
class Layering:
    """How a graph was replayed: each node's level (``level``; its sources on lower levels), or None where the
    graph is too narrow for levels and was replayed node by node. A replay over some of the same edges (a change
    that drops edges) may reuse it: a node's sources still lie on lower levels."""

    level: np.ndarray | None


@dataclass
class Schedule:
    """Replayed times per node; ``bind``: the node each one waited for last (-1: none, or its own host work)."""

    start: np.ndarray
    end: np.ndarray
    bind: np.ndarray
    ready: np.ndarray  # when its dependencies allowed it to start (before its host work)
    layering: Layering = Layering(None)


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
    moved = sources_first(graph.size, graph.src, graph.dst, pos)
    if moved is not None:  # no cycle: any order with every source first gives the same replay
        return moved, keep
    return _kahn(graph, pos, keep)


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
           lag: np.ndarray, base: np.ndarray, layering: Layering | None = None) -> Schedule:
    """Earliest start times in ``order``, with these durations, host work and delays, over the edges ``keep``:
    an edge whose source comes after its target in ``order`` reads the source's times before they are set
    (zero). A graph wide enough (a job's ranks side by side) is replayed level by level in arrays, else node by
    node; both make the same operations on the same numbers, so the schedules are the same. ``layering``: that
    of a replay of the same graph and order over these edges or more (``Schedule.layering``), reused."""
    total = graph.size
    by = np.flatnonzero(keep)
    by = by[np.argsort(graph.dst[by], kind="stable")]  # the edges into each node, in edge order
    src, dst = graph.src[by], graph.dst[by]
    ptr = np.searchsorted(dst, np.arange(total + 1), side="left")
    pos = np.empty(total, dtype=np.int64)
    pos[order] = np.arange(total)
    forward = pos[src] < pos[dst]
    del pos
    # where an edge reads its source's time: starts at 0.., ends at total.., a zero at 2 total (not yet set)
    ref = np.where(graph.from_start[by], src, src + total).astype(_INDEX)
    ref[~forward] = 2 * total
    if layering is None:
        layering = Layering(dag_levels(total, src[forward], dst[forward], _PROBE_LEVELS, _MIN_WIDTH))
    del forward
    lag = lag[by]
    del by
    if layering.level is None:
        times, ready = _in_order(total, order, ref, ptr, lag, dur, pre, base)
    else:
        times, ready = _by_levels(total, layering.level, ref, ptr, lag, dur, pre, base)
    del ptr
    x = times[ref]
    del ref
    x += lag
    del lag
    hit = np.flatnonzero((x == ready[dst]) & (x > base[dst]))  # the first edge giving a node's start: bound
    del x
    first = hit[np.r_[True, dst[hit][1:] != dst[hit][:-1]]] if len(hit) else hit
    bind = np.full(total, -1, dtype=np.int64)
    bind[dst[first]] = src[first]
    return Schedule(times[:total].copy(), times[total:2 * total].copy(), bind, ready, layering)


_INDEX = np.int32  # the dtype of the replay's node and edge indices (half of int64's memory on a job's step)
_PROBE_LEVELS = 64  # levels seen before a graph may be found too narrow for the replay by levels
_MIN_WIDTH = 32  # nodes per level, on average, below which the replay goes node by node


def _by_levels(total: int, level: np.ndarray, ref: np.ndarray, ptr: np.ndarray, lag: np.ndarray,
               dur: np.ndarray, pre: np.ndarray, base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``_in_order``'s times and readiness, a level at a time (a node's sources set before it)."""
    times = np.zeros(2 * total + 1)
    count = ptr[1:] - ptr[:-1]
    alone = np.flatnonzero(count == 0)
    ready = base.copy()
    times[alone] = base[alone] + pre[alone]
    times[alone + total] = times[alone] + dur[alone]
    del alone
    nodes = np.flatnonzero(count).astype(_INDEX)
    nodes = nodes[np.argsort(level[nodes], kind="stable")]
    n_edges = count[nodes]
    del count
    seg = np.concatenate([[0], np.cumsum(n_edges)])
    edges = np.repeat(ptr[nodes] - seg[:-1], n_edges).astype(_INDEX)
    del n_edges
    edges += np.arange(seg[-1], dtype=_INDEX)
    ref_n, lag_n = ref[edges], lag[edges]
    del edges
    base_n, pre_n, dur_n = base[nodes], pre[nodes], dur[nodes]
    bounds = np.searchsorted(level[nodes], np.arange(int(level[nodes].max(initial=0)) + 2), side="left")
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        if a == b:
            continue
        ea, eb = seg[a], seg[b]
        x = times[ref_n[ea:eb]] + lag_n[ea:eb]
        t = np.maximum(base_n[a:b], np.maximum.reduceat(x, seg[a:b] - ea))
        v = nodes[a:b]
        ready[v] = t
        t = t + pre_n[a:b]
        times[v] = t
        times[v + total] = t + dur_n[a:b]
    return times, ready


def _in_order(total: int, order: np.ndarray, ref: np.ndarray, ptr: np.ndarray, lag: np.ndarray,
              dur: np.ndarray, pre: np.ndarray, base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each node's start and end (``ref``'s layout) and when its dependencies allowed it, node by node."""
    ref_l, lag_l, ptr_l = ref.tolist(), lag.tolist(), ptr.tolist()
    times = [0.0] * (2 * total + 1)
    ready = [0.0] * total
    for v, b, p, d in zip(order.tolist(), base[order].tolist(), pre[order].tolist(), dur[order].tolist()):
        for j in range(ptr_l[v], ptr_l[v + 1]):
            x = times[ref_l[j]] + lag_l[j]
            if x > b:
                b = x
        ready[v] = b
        b += p
        times[v] = b
        times[v + total] = b + d
    return np.asarray(times), np.asarray(ready)
