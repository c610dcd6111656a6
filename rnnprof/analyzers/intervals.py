"""Vectorized interval maths: unions, overlaps and spans of many interval sets at once.

Every function works on parallel numpy arrays (``starts``, ``ends``) and sorts
once; there is no Python loop over intervals. Intervals are half-open
``[start, end)``, so touching intervals do not overlap and zero-length ones
cover nothing.

The core is one sweep (``sweep_segments``): all interval boundaries, sorted by
``(group, time)``, with a running count per *layer* (e.g. compute vs
communication). Because every group's +1/-1 steps sum to zero, a single
``cumsum`` over all groups gives each group's own coverage count, so many
devices and steps are measured in one pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as sorted, disjoint ``(starts, ends)``; empty intervals are dropped."""
    starts = np.asarray(starts, dtype=np.float64)
    ends = np.asarray(ends, dtype=np.float64)
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if len(starts) == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    # A new merged interval begins where the start lies beyond everything before it.
    begins = np.empty(len(starts), dtype=bool)
    begins[0] = True
    begins[1:] = starts[1:] > reach[:-1]
    first = np.flatnonzero(begins)
    last = np.append(first[1:], len(starts)) - 1
    return starts[first], reach[last]


def subtract(starts: np.ndarray, ends: np.ndarray, cut_starts: np.ndarray,
             cut_ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each interval minus the union of the cuts: ``(piece_starts, piece_ends, origin)``, ``origin`` being
    the index of the interval each non-empty piece comes from."""
    starts = np.asarray(starts, dtype=np.float64)
    ends = np.asarray(ends, dtype=np.float64)
    cuts_s, cuts_e = merge(cut_starts, cut_ends)
    # The cuts that reach into interval k are cuts[first[k]:last[k]] (sorted and disjoint).
    first = np.searchsorted(cuts_e, starts, side="right")
    last = np.maximum(np.searchsorted(cuts_s, ends, side="left"), first)
    pieces = last - first + 1
    origin = np.repeat(np.arange(len(starts)), pieces)
    position = np.arange(len(origin)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    cut = first[origin] + position  # the cut that ends piece ``position`` (none for the last piece)
    is_first, is_last = position == 0, position == pieces[origin] - 1
    piece_s = np.where(is_first, starts[origin], cuts_e[np.clip(cut - 1, 0, max(len(cuts_e) - 1, 0))]
                       if len(cuts_e) else starts[origin])
    piece_e = np.where(is_last, ends[origin], cuts_s[np.clip(cut, 0, max(len(cuts_s) - 1, 0))]
                       if len(cuts_s) else ends[origin])
    piece_s = np.maximum(piece_s, starts[origin])
    piece_e = np.minimum(piece_e, ends[origin])
    keep = piece_e > piece_s
    return piece_s[keep], piece_e[keep], origin[keep]


def concurrency(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """How many intervals are open between consecutive boundaries: the sorted boundary times (n + 1 of them,
    an interval that ends where another starts closing first) and the level from ``times[i]`` to
    ``times[i + 1]`` (n values)."""
    times = np.concatenate([starts, ends])
    delta = np.concatenate([np.ones(len(starts)), -np.ones(len(ends))])
    order = np.lexsort((delta, times))  # at one instant, ends (-1) before starts (+1)
    times, delta = times[order], delta[order]
    return times, np.cumsum(delta)[:-1]


def union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Total time covered by at least one interval."""
    merged_starts, merged_ends = merge(starts, ends)
    return float((merged_ends - merged_starts).sum())


def covered(union_starts: np.ndarray, union_ends: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each interval ``[starts[i], ends[i])``, the time inside it that the union (sorted, disjoint intervals,
    as ``merge`` gives them) covers."""
    lengths = union_ends - union_starts
    before = np.concatenate([[0.0], np.cumsum(lengths)])

    def up_to(t: np.ndarray) -> np.ndarray:  # union time before t
        k = np.searchsorted(union_starts, t, side="right") - 1
        inside = np.clip(t - union_starts[np.maximum(k, 0)], 0.0, lengths[np.maximum(k, 0)]) if len(lengths) else 0.0
        return np.where(k >= 0, before[np.maximum(k, 0)] + inside, 0.0)

    starts, ends = np.asarray(starts, dtype=np.float64), np.asarray(ends, dtype=np.float64)
    return np.maximum(up_to(ends) - up_to(starts), 0.0)


def overlap_length(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    """Time covered by at least one interval of ``a`` and at the same moment by one of ``b``."""
    result = sweep_segments(
        np.concatenate([a[0], b[0]]),
        np.concatenate([a[1], b[1]]),
        groups=np.zeros(len(a[0]) + len(b[0]), dtype=np.int64),
        n_groups=1,
        layers=np.repeat(np.array([0, 1], dtype=np.int64), [len(a[0]), len(b[0])]),
        n_layers=2,
    )
    return float(result.overlap([0], [1])[0])


@dataclass(frozen=True)
class Segments:
    """Elementary segments between consecutive boundaries of each group.

    ``group[i]`` and ``dt[i]`` describe segment i; ``active[i, k]`` says whether
    layer k covers it. ``start``/``end`` give each group's first start and last
    end (NaN for groups without intervals).
    """

    n_groups: int
    group: np.ndarray
    dt: np.ndarray
    active: np.ndarray
    start: np.ndarray
    end: np.ndarray

    @property
    def span(self) -> np.ndarray:
        return np.nan_to_num(self.end - self.start, nan=0.0)

    def _time(self, mask: np.ndarray) -> np.ndarray:
        return np.bincount(self.group, weights=np.where(mask, self.dt, 0.0), minlength=self.n_groups)

    def union(self, layers=None) -> np.ndarray:
        """Per group: time at least one interval of the given layers (all by default) is active."""
        cols = self.active if layers is None else self.active[:, list(layers)]
        return self._time(cols.any(axis=1))

    def overlap(self, layers_a, layers_b) -> np.ndarray:
        """Per group: time some interval of ``layers_a`` and some of ``layers_b`` are active together."""
        a = self.active[:, list(layers_a)].any(axis=1)
        b = self.active[:, list(layers_b)].any(axis=1)
        return self._time(a & b)


def sweep_segments(
    starts: np.ndarray,
    ends: np.ndarray,
    groups: np.ndarray | None = None,
    n_groups: int | None = None,
    layers: np.ndarray | None = None,
    n_layers: int = 1,
) -> Segments:
    """Sweep intervals partitioned into ``groups`` (ints in ``[0, n_groups)``), each in one of ``n_layers`` layers."""
    starts = np.asarray(starts, dtype=np.float64)
    ends = np.asarray(ends, dtype=np.float64)
    n = len(starts)
    groups = np.zeros(n, dtype=np.int64) if groups is None else np.asarray(groups, dtype=np.int64)
    layers = np.zeros(n, dtype=np.int64) if layers is None else np.asarray(layers, dtype=np.int64)
    if n_groups is None:
        n_groups = int(groups.max()) + 1 if n else 0
    keep = ends > starts
    if not keep.all():
        starts, ends, groups, layers = starts[keep], ends[keep], groups[keep], layers[keep]
    first_start, last_end = _group_spans(starts, ends, groups, n_groups)
    times, boundary_group, counts = _boundaries(starts, ends, groups, layers, n_layers)
    # Segment i runs from boundary i to boundary i+1 when both belong to the same group.
    same = boundary_group[1:] == boundary_group[:-1]
    return Segments(
        n_groups=n_groups,
        group=boundary_group[:-1][same],
        dt=np.diff(times)[same],
        active=counts[:-1][same] > 0,
        start=first_start,
        end=last_end,
    )


def _group_spans(starts: np.ndarray, ends: np.ndarray, groups: np.ndarray, n_groups: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Each group's first start and last end (NaN for groups without intervals)."""
    first_start = np.full(n_groups, np.inf)
    last_end = np.full(n_groups, -np.inf)
    np.minimum.at(first_start, groups, starts)
    np.maximum.at(last_end, groups, ends)
    empty = ~np.isfinite(first_start)
    first_start[empty] = np.nan
    last_end[empty] = np.nan
    return first_start, last_end


def _boundaries(starts: np.ndarray, ends: np.ndarray, groups: np.ndarray, layers: np.ndarray, n_layers: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every start and end, in order by group then time: its time, its group, and how many intervals of each
    layer are active from it on."""
    n = len(starts)
    times = np.concatenate([starts, ends])
    boundary_group = np.concatenate([groups, groups])
    order = np.lexsort((times, boundary_group))
    # Per-layer +1/-1 steps; a running sum over all groups stays per group (each group nets to zero).
    steps = np.zeros((2 * n, n_layers), dtype=np.int32)
    rows = np.arange(2 * n)
    steps[rows, np.concatenate([layers, layers])] = np.concatenate(
        [np.ones(n, dtype=np.int32), -np.ones(n, dtype=np.int32)]
    )
    return times[order], boundary_group[order], np.cumsum(steps[order], axis=0)

