"""Events with impossible times, left out of the table and counted, so no figure describes another trace.

An event is left out when its duration is negative, when its timestamp or duration is not a finite
number, or when it lies outside the trace's time range: starting or ending farther from the trace's
median timestamp than ``max(FAR_FLOOR_US, FAR_SPREADS x`` the median absolute deviation of the
timestamps``)``. A real trace spans seconds to hours, so only a broken clock (an event 10^18 µs away)
is that far. Every loader's table passes through ``leave_out``; the counts by reason are in
``metadata.left_out`` (summed when tables merge; ``left_out_of`` gives every reason) and the first few events in
``metadata.left_out_examples``.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from rnnprof.events import EventTable, LeftOutExample, TableMetadata

NEGATIVE = "negative duration"
NON_FINITE = "non-finite time"
FAR_OFF = "outside the trace's time range"
REASONS = (NEGATIVE, NON_FINITE, FAR_OFF)
FAR_FLOOR_US = 86_400e6  # a day
FAR_SPREADS = 1000.0
EXAMPLES = 5


def leave_out(table: EventTable) -> EventTable:
    """``table`` without its events of impossible times, their counts added to its metadata."""
    ts, dur = table.ts, table.dur
    finite = np.isfinite(ts) & np.isfinite(dur)
    reasons = {NON_FINITE: ~finite, NEGATIVE: finite & (dur < 0)}
    plausible = finite & (dur >= 0)
    far = np.zeros(len(table), dtype=bool)
    if plausible.any():
        middle = float(np.median(ts[plausible]))
        spread = float(np.median(np.abs(ts[plausible] - middle)))
        limit = max(FAR_FLOOR_US, FAR_SPREADS * spread)
        far = plausible & ((np.abs(ts - middle) > limit) | (ts + dur - middle > limit))
    reasons[FAR_OFF] = far
    bad = reasons[NON_FINITE] | reasons[NEGATIVE] | far
    counts = {**{r: 0 for r in REASONS}, **table.metadata.left_out}
    for reason, mask in reasons.items():
        counts[reason] += int(mask.sum())
    metadata = dataclasses.replace(table.metadata, left_out=counts)
    if bad.any():
        names = table.text(table.name[bad][:EXAMPLES])
        metadata.left_out_examples = (*table.metadata.left_out_examples, *(
            LeftOutExample(str(n), float(t), float(d), _reason(t, d, f))
            for n, t, d, f in zip(names, ts[bad][:EXAMPLES], dur[bad][:EXAMPLES], far[bad][:EXAMPLES])))[:EXAMPLES]
        table = table.select(~bad)
    return dataclasses.replace(table, metadata=metadata)


def _reason(ts: float, dur: float, far: bool) -> str:
    if not (np.isfinite(ts) and np.isfinite(dur)):
        return NON_FINITE
    return FAR_OFF if far else NEGATIVE


def left_out_of(metadata: TableMetadata | None) -> dict[str, int]:
    """Counts by reason in ``metadata`` (every reason present, zeros included)."""
    return {**{r: 0 for r in REASONS}, **(metadata.left_out if metadata is not None else {})}


def examples_of(metadata: TableMetadata | None) -> list[LeftOutExample]:
    """The first few events left out."""
    return list(metadata.left_out_examples[:EXAMPLES]) if metadata is not None else []


def sum_left_out(counts) -> dict[str, int]:
    """Counts of several tables analysed apart (a job's ranks), summed."""
    total = {r: 0 for r in REASONS}
    for c in counts:
        for reason, n in c.items():
            total[reason] = total.get(reason, 0) + n
    return total


def describe(counts: dict[str, int], examples: Sequence[LeftOutExample] = (), debug: bool = False) -> str | None:
    """One line: ``left out 3 events with a negative duration, 1 outside the trace's time range`` (None if none)."""
    parts = [f"{n:,} {'event' if n == 1 else 'events'} {_phrase(r)}" if i == 0 else f"{n:,} {_phrase(r)}"
             for i, (r, n) in enumerate((r, n) for r, n in counts.items() if n)]
    if not parts:
        return None
    text = "left out " + ", ".join(parts) + " (impossible times: no figure includes them"
    if debug and examples:
        shown = "; ".join(f"{e.name[:80]!r} ts={e.ts:g} dur={e.dur:g} ({e.reason})" for e in examples)
        return text + f"; first {len(examples)}: {shown})"
    return text + "; --debug names the first few)"


def _phrase(reason: str) -> str:
    return f"with a {reason}" if reason != FAR_OFF else reason


__all__ = ["FAR_OFF", "NEGATIVE", "NON_FINITE", "REASONS", "describe", "examples_of", "leave_out",
           "left_out_of", "sum_left_out"]
