"""An event table's allocator records: one row per allocation or free, beside the events.

Kineto's ``[memory]`` instant events and TensorFlow's allocation records become ``MemoryRecords``: parallel
arrays on the table's clock, ``device`` coding into the table's ``devices``, ``lane`` (the thread) into its
``strings``, as ``operator`` (the allocating operator, where the source names it: TensorFlow's node; -1
otherwise). ``nbytes`` is signed (a free is negative); ``total_allocated`` and ``total_reserved`` are what the
allocator reported after the event (-1: not reported). The records are apart from the events so that every
analysis of the events reads the same table as before. The meaning of each field: docs/commands/memory.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Sequence

import numpy as np

_DTYPES = {"ts": np.float64, "device": np.int16, "lane": np.int32, "nbytes": np.int64, "addr": np.int64,
           "total_allocated": np.int64, "total_reserved": np.int64, "step": np.int32, "operator": np.int32}


def _empty(column: str):
    return field(default_factory=lambda: np.zeros(0, dtype=_DTYPES[column]))


@dataclass(frozen=True)
class MemoryRecords:
    """Allocations and frees, one per row, in the order the source recorded them (``ts`` ascending when loaded)."""

    ts: np.ndarray = _empty("ts")
    device: np.ndarray = _empty("device")
    lane: np.ndarray = _empty("lane")
    nbytes: np.ndarray = _empty("nbytes")
    addr: np.ndarray = _empty("addr")
    total_allocated: np.ndarray = _empty("total_allocated")
    total_reserved: np.ndarray = _empty("total_reserved")
    step: np.ndarray = _empty("step")
    operator: np.ndarray = _empty("operator")  # string code of the allocating operator, where the source names it
    unusable: int = 0  # memory events of the source left out: a field missing or not a number

    COLUMNS = tuple(_DTYPES)

    def __len__(self) -> int:
        return len(self.ts)

    def shifted(self, delta_us: float) -> "MemoryRecords":
        """The records with ``delta_us`` added to their times."""
        return self if delta_us == 0 or not len(self) else replace(self, ts=self.ts + delta_us)

    def remapped(self, device_map: np.ndarray, string_map: np.ndarray) -> "MemoryRecords":
        """The records with their device and lane codes translated (a table's codes into a merged table's)."""
        if not len(self):
            return self
        operator = np.where(self.operator >= 0, string_map[np.maximum(self.operator, 0)], -1).astype(np.int32)
        return replace(self, device=device_map[self.device].astype(np.int16), lane=string_map[self.lane],
                       operator=operator)

    def with_steps(self, step: np.ndarray) -> "MemoryRecords":
        return replace(self, step=np.asarray(step, dtype=np.int32))

    def ordered(self) -> "MemoryRecords":
        """The records sorted by time (stable: the source's order among equal times)."""
        order = np.argsort(self.ts, kind="stable")
        if not len(self) or (np.diff(order) > 0).all():
            return self
        return replace(self, **{c: getattr(self, c)[order] for c in self.COLUMNS})


def memory_records(unusable: int = 0, **columns) -> MemoryRecords:
    """Records from columns of equal length (lists or arrays), each cast to its type, sorted by time."""
    arrays = {c: np.asarray(columns[c], dtype=_DTYPES[c]) for c in MemoryRecords.COLUMNS if c in columns}
    n = len(arrays["ts"])
    for c in MemoryRecords.COLUMNS:
        arrays.setdefault(c, np.full(n, -1, dtype=_DTYPES[c]))
        if len(arrays[c]) != n:
            raise ValueError(f"memory column {c} has {len(arrays[c])} rows, expected {n}")
    return MemoryRecords(**arrays, unusable=unusable).ordered()


def concat_records(parts: Sequence[MemoryRecords]) -> MemoryRecords:
    """Several tables' records (already remapped and shifted) as one, sorted by time."""
    parts = [p for p in parts if len(p) or p.unusable]
    if not parts:
        return MemoryRecords()
    if len(parts) == 1:
        return parts[0]
    unusable = sum(p.unusable for p in parts)
    columns = {f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(MemoryRecords)
               if f.name in MemoryRecords.COLUMNS}
    return MemoryRecords(**columns, unusable=unusable).ordered()
