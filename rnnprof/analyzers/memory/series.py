"""One device's allocated memory over time: the running sum of its allocations and frees from its baseline, each
allocation paired with its free (by address), and what was live at the peak, by category and by operator.

A free the records miss: torch's profiler records an allocator event only on a thread whose profiler state is set,
so a block released elsewhere (FSDP2 on gloo: a collective's buffers, released with its work, after the
work's own profiled scope) leaves no record, and the running sum would hold it for ever. The allocator never hands
out an address it still holds, so a block whose address is allocated again before any free of it was freed by then:
it is released there (``Series.lost``), and counted."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .context import BACKWARD, FORWARD, OPTIMIZER, RecordContext
from .result import (ACTIVATION, AUTOGRAD_DETAIL, BEFORE_WINDOW, CATEGORIES, GRADIENT, OPTIMIZER_STATE, TEMPORARY,
                     UNKNOWN, Share)

NO_OPERATOR = "(no operator)"


@dataclass(frozen=True)
class Series:
    """A device's records (indices into the table's memory records, in time order) and its allocated bytes after
    each."""

    rows: np.ndarray
    nbytes: np.ndarray  # of each row
    allocated: np.ndarray  # int64, baseline + running sum
    baseline: int
    baseline_known: bool  # the allocator's Total Allocated gave it
    free_of: np.ndarray  # for each row that allocates, the position of its free in ``rows`` (len(rows): never); for
    # a block whose free the records miss, the position of the next allocation of its address
    mismatches: int  # records whose reported total disagrees with the records' own running sum
    window: np.ndarray | None = None  # where each step is recorded apart: the step of each position
    lost: np.ndarray | None = None  # allocations whose free the records miss (their address allocated again)

    @property
    def missing_frees(self) -> np.ndarray:
        """The positions of the allocations whose free the records miss."""
        return np.zeros(0, dtype=np.int64) if self.lost is None else np.flatnonzero(self.lost)


def device_series(nbytes: np.ndarray, addr: np.ndarray, total: np.ndarray, rows: np.ndarray,
                  total_is_baseline: bool = True) -> Series:
    """The series of one device's records ``rows`` (time-ordered). With ``total_is_baseline`` the allocator's first
    Total Allocated less the first record's bytes is the baseline; otherwise (a CPU's, whose total counts only what
    profiling saw, across the process's profiling sessions) the baseline is 0 and the totals are checked by their
    changes."""
    b = nbytes[rows]
    first_total = int(total[rows[0]]) if len(rows) else -1
    known = first_total >= 0 and total_is_baseline
    offset = first_total - int(b[0]) if first_total >= 0 else 0
    baseline = offset if known else 0
    recorded = baseline + np.cumsum(b)
    reported = total[rows]
    mismatches = int(((reported >= 0) & (reported != recorded + (offset - baseline))).sum())
    free_of, lost = _pair(b, addr[rows])
    return Series(rows, b, recorded - np.cumsum(released(b, free_of, lost)), baseline, known, free_of, mismatches,
                  lost=lost)


def released(nbytes: np.ndarray, free_of: np.ndarray, lost: np.ndarray | None) -> np.ndarray:
    """The bytes released at each position by the frees the records miss (``Series.lost``)."""
    out = np.zeros(len(nbytes), dtype=np.int64)
    if lost is not None:
        np.add.at(out, free_of[lost], nbytes[lost])
    return out


def _pair(b: np.ndarray, addr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each allocation the position of the next free of its address, len(b) where none follows; and which
    allocations are followed at their address by another allocation before any free (their free missing from the
    records), whose position is then given instead."""
    n = len(b)
    free_of = np.full(n, n, dtype=np.int64)
    order = np.lexsort((np.arange(n), addr))
    a, s = addr[order], b[order]
    same = np.zeros(n, dtype=bool)
    same[:-1] = (a[:-1] == a[1:]) & (s[:-1] > 0)
    follows = same & np.concatenate((s[1:] < 0, [False]))
    again = same & np.concatenate((s[1:] > 0, [False])) & (a >= 0)  # -1: an address the source did not give
    free_of[order[follows | again]] = order[np.flatnonzero(follows | again) + 1]
    lost = np.zeros(n, dtype=bool)
    lost[order[again]] = True
    return free_of, lost


def allocation_categories(series: Series, ctx: RecordContext, end_phase: np.ndarray) -> np.ndarray:
    """The index into CATEGORIES of every position: an allocation's own category (``_category_masks``), a free's
    the category of the allocation it frees, BEFORE_WINDOW for a free of memory allocated before the window.

    ``end_phase[k]``: the phase of the record that frees allocation k."""
    n = len(series.rows)
    cats = np.full(n, CATEGORIES.index(BEFORE_WINDOW), dtype=np.int8)
    allocs = np.flatnonzero(series.nbytes > 0)
    for category, mask in _category_masks(series, allocs, series.rows[allocs], ctx, end_phase).items():
        cats[allocs[mask]] = CATEGORIES.index(category)
    paired = allocs[series.free_of[allocs] < n]
    if series.lost is not None:
        paired = paired[~series.lost[paired]]  # a missing free: its position is the next allocation's own
    cats[series.free_of[paired]] = cats[paired]
    return cats


def categories_at(series: Series, peak: int, cats: np.ndarray) -> tuple[Share, ...]:
    """What was live after record ``peak`` by category (``allocation_categories``); the categories sum to the
    allocated bytes then, what the window's allocations do not account for being BEFORE_WINDOW."""
    live, b = live_at(series, peak)
    sums = np.bincount(cats[live], weights=b[live], minlength=len(CATEGORIES)).astype(np.int64)
    sums[CATEGORIES.index(BEFORE_WINDOW)] += int(series.allocated[peak]) - int(b[live].sum())
    return tuple(Share(c, int(v)) for c, v in zip(CATEGORIES, sums) if v)


def stacked(series: Series, cats: np.ndarray, points: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``points`` positions (in each of as many equal runs of records, the one of most memory) and the
    bytes of each category there (rows: positions, columns: CATEGORIES); each row sums to the allocated bytes."""
    n = len(series.rows)
    bins = np.minimum(np.arange(n) * points // max(n, 1), points - 1)
    order = np.lexsort((-series.allocated, bins))
    first = np.ones(n, dtype=bool)
    first[1:] = bins[order][1:] != bins[order][:-1]
    chosen = np.sort(order[first])
    signed = np.zeros((n, len(CATEGORIES)), dtype=np.int64)
    signed[np.arange(n), cats] = series.nbytes
    lost = series.missing_frees
    np.add.at(signed, (series.free_of[lost], cats[lost]), -series.nbytes[lost])
    by_cat = np.cumsum(signed, axis=0)[chosen]
    before = CATEGORIES.index(BEFORE_WINDOW)
    by_cat[:, before] = series.allocated[chosen] - (by_cat.sum(axis=1) - by_cat[:, before])
    return chosen, by_cat


def live_at(series: Series, peak: int) -> tuple[np.ndarray, np.ndarray]:
    """The positions of the allocations made up to ``peak`` and not freed by then, and the bytes of every record."""
    positions = np.arange(peak + 1)
    b = series.nbytes
    held = (b[: peak + 1] > 0) & (series.free_of[: peak + 1] > peak)
    if series.window is not None:  # only what the peak's own step recorded
        held &= series.window[: peak + 1] == series.window[peak]
    return positions[held], b


def _category_masks(series: Series, live: np.ndarray, rows: np.ndarray, ctx: RecordContext,
                    end_phase: np.ndarray) -> dict[str, np.ndarray]:
    """Each allocation's category: freed within the operator run that made it, a temporary; else by the phase
    it was made in and when it is freed (docs/commands/memory.md)."""
    free = series.free_of[live]
    freed = free < len(series.rows)
    free_rows = series.rows[np.minimum(free, len(series.rows) - 1)]
    inst = ctx.instance[rows]
    temporary = freed & (inst >= 0) & (ctx.instance[free_rows] == inst)
    phase = ctx.phase[rows]
    later = np.where(freed, end_phase[live], -1)
    grad = (phase == BACKWARD) & ~temporary & (later != BACKWARD)
    same_step = freed & (ctx.step[free_rows] == ctx.step[rows])
    transient = (phase == OPTIMIZER) & (later == OPTIMIZER) & same_step  # made and freed in one optimizer step
    masks = {TEMPORARY: temporary,
             OPTIMIZER_STATE: (phase == OPTIMIZER) & ~temporary & ~transient,
             GRADIENT: grad,
             AUTOGRAD_DETAIL: (phase == BACKWARD) & ~temporary & ~grad,
             ACTIVATION: (phase == FORWARD) & ~temporary}
    taken = np.zeros(len(live), dtype=bool)
    for mask in masks.values():
        taken |= mask
    masks[UNKNOWN] = ~taken
    return masks


def operators_at(series: Series, peak: int, ctx: RecordContext, strings: tuple[str, ...]) -> tuple[Share, ...]:
    """What was live after record ``peak`` by the operator that allocated it, largest first; what was allocated
    before the window is BEFORE_WINDOW."""
    live, b = live_at(series, peak)
    ops = ctx.operator[series.rows[live]]
    found: dict[str, int] = {}
    for code in np.unique(ops):
        name = strings[code] if code >= 0 else NO_OPERATOR
        found[name] = found.get(name, 0) + int(b[live][ops == code].sum())
    before = int(series.allocated[peak]) - int(b[live].sum())
    if before:
        found[BEFORE_WINDOW] = before
    return tuple(Share(k, v) for k, v in sorted(found.items(), key=lambda kv: (-kv[1], kv[0])))
