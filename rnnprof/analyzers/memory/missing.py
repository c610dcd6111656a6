"""Frees the allocator records miss, and what the verdicts leave out for them.

torch's profiler records an allocator event only on a thread whose profiler state is set: a block released
elsewhere leaves no record (FSDP2 on gloo: the copies its reduce-scatters all-reduce and its all-gathers' outputs,
released with the collective's work outside its profiled scope, lose their frees in every step). The allocator never
hands out an address it still holds, so a block whose address is allocated again before any free of it was freed by
then (``Series.lost``). Blocks of the same size are the same buffers of the same code, on every rank of the job, and
the series would hold the ones whose address is not yet reused for ever, as a leak would: growth and step peaks
leave out every block of a size shown to lose its free on any device (``trusted_allocated``), and a leak or an
imbalance must also exceed the most bytes one step lost (``step_bytes``)."""

from __future__ import annotations

import numpy as np

from .context import RecordContext
from .result import Share
from .series import NO_OPERATOR, Series


def lost_sizes(series: list[Series]) -> np.ndarray:
    """The sizes (bytes) of the blocks whose frees the records miss, on any of the devices."""
    found = [s.nbytes[s.missing_frees] for s in series]
    return np.unique(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)


def trusted_allocated(series: Series, sizes: np.ndarray) -> np.ndarray:
    """The allocated bytes after each record leaving out every block of ``sizes`` (its allocation and its recorded
    free); the series' own where there are none."""
    if not len(sizes):
        return series.allocated
    n, b = len(series.rows), series.nbytes
    left_out = (b > 0) & np.isin(b, sizes)
    kept = np.where(left_out, 0, b)
    recorded = left_out & (series.free_of < n)
    if series.lost is not None:
        recorded &= ~series.lost  # a missing free's position is the next allocation's own record
    kept[series.free_of[recorded]] = 0
    return series.baseline + np.cumsum(kept)


def step_bytes(series: Series, step: np.ndarray) -> int:
    """The most bytes allocated in one step whose frees the records miss."""
    lost = series.missing_frees
    if not len(lost):
        return 0
    return int(max(series.nbytes[lost][step[lost] == s].sum() for s in np.unique(step[lost])))


def by_operator(series: Series, ctx: RecordContext, strings: tuple[str, ...]) -> tuple[Share, ...]:
    """The bytes whose frees the records miss, by the operator running when they were allocated, largest first."""
    found: dict[str, int] = {}
    for k in series.missing_frees:
        code = ctx.operator[series.rows[k]]
        name = strings[code] if code >= 0 else NO_OPERATOR
        found[name] = found.get(name, 0) + int(series.nbytes[k])
    return tuple(Share(n, b) for n, b in sorted(found.items(), key=lambda kv: (-kv[1], kv[0])))
