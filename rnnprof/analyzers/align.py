"""One clock for traces from several processes: measure each table's clock offset, then shift it.

An offset is how far a table's clock runs ahead of the first table's: ``t_reference = t_table - offset_us``.
``offsets_from_start`` puts each table's first event where the first table's is; ``offsets_from_collectives``
takes the weighted median of the differences of matched collectives' end times (``rnnprof.analyzers.collectives``;
weights the inverse of the two members' summed durations), its spread the weighted median absolute deviation;
offsets measured at capture are ``ClockOffset``s too. ``align(tables, offsets)`` subtracts each offset.
See docs/commands/comm.md (One clock).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from rnnprof.analyzers.collectives import instances
from rnnprof.events import ClockOffset, EventTable

NONE = "none"
START = "start"
COLLECTIVES = "collectives"
METHODS = (NONE, START, COLLECTIVES)


class NothingToAlignOn(ValueError):
    """A table shares no matched collective with the reference table."""

    def __init__(self, source: str, reference: str):
        self.source = source
        self.reference = reference
        super().__init__(f"{source}: no collective matched with {reference}")


def align(tables: Sequence[EventTable], offsets: Sequence[ClockOffset | float]) -> list[EventTable]:
    """Each table with ``offset_us`` subtracted from its times (a new table; the input is not changed)."""
    if len(tables) != len(offsets):
        raise ValueError(f"{len(tables)} tables but {len(offsets)} offsets")
    out = []
    for table, offset in zip(tables, offsets):
        shift = offset.offset_us if isinstance(offset, ClockOffset) else float(offset)
        out.append(table if shift == 0 else dataclasses.replace(table, ts=table.ts - shift,
                                                                memory=table.memory.shifted(-shift)))
    return out


def _describe(table: EventTable) -> tuple[str, tuple[str, ...]]:
    return ", ".join(table.sources) or table.source_format, tuple(sorted({d.worker for d in table.devices} - {""}))


def zero_offsets(tables: Sequence[EventTable]) -> list[ClockOffset]:
    """Every table on the clock it has (``--align none``)."""
    return [ClockOffset(*_describe(t), 0.0) for t in tables]


def offsets_from_start(tables: Sequence[EventTable]) -> list[ClockOffset]:
    """Offsets that start every table where the first one starts."""
    firsts = [float(t.ts.min()) if len(t) else 0.0 for t in tables]
    return [ClockOffset(*_describe(t), first - firsts[0]) for t, first in zip(tables, firsts)]


def weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    """The value below which half the weight lies (the lower one at an exact half)."""
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cumulative, cumulative[-1] / 2)])


def offsets_from_collectives(tables: Sequence[EventTable]) -> list[ClockOffset]:
    """Offsets against the first table from the end times of the collectives both hold.

    Raises ``NothingToAlignOn`` for a table that shares no matched collective with the first one.
    """
    found = [_keyed(t) for t in tables]
    reference = found[0]
    offsets = []
    for k, (table, mine) in enumerate(zip(tables, found)):
        source, workers = _describe(table)
        if k == 0:
            offsets.append(ClockOffset(source, workers, 0.0, 0.0, len(mine)))
            continue
        common = [key for key in mine if key in reference]
        if not common:
            raise NothingToAlignOn(source, _describe(tables[0])[0])
        diff = np.array([mine[key].end_us - reference[key].end_us for key in common])
        width = np.array([mine[key].dur_us + reference[key].dur_us for key in common])
        weights = 1.0 / np.maximum(width, 1.0)
        offset = weighted_median(diff, weights)
        spread = weighted_median(np.abs(diff - offset), weights)
        offsets.append(ClockOffset(source, workers, offset, spread, len(common)))
    return offsets


def _keyed(table: EventTable) -> dict:
    """A table's collectives by key (one rank per table; with several, the first of each key)."""
    keyed: dict = {}
    for _, found in sorted(instances(table).items()):
        for inst in found:
            keyed.setdefault(inst.key, inst)
    return keyed
