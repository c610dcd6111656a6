"""The ops and kernels that take the most time, grouped by name.

``top_by_time`` sums the durations of the given events per name (over devices and steps, so
instances running at once on two devices both count) and keeps the longest ``n``. The report
calls it twice: on device activity (kernels, copies, a CPU device's ops: ``comm.device_work_mask``)
and on the host's operators (PyTorch ``cpu_op``, a TF GPU device's launches run on the host). A whole job's
ranks give their sums apart (``name_times``), and ``top_of`` ranks them together.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rnnprof.analyzers.classify import EventClass
from rnnprof.events import EventTable

TOP = 15
_CLASS_NAMES = {int(c): c.name.lower() for c in EventClass}


@dataclass(frozen=True)
class TimedOp:
    name: str
    op_type: str
    cls: str  # EventClass name, lower case
    events: int
    devices: int
    total_us: float
    share: float  # of the summed time of all the events considered


@dataclass(frozen=True)
class NameTimes:
    """The events given to ``top_by_time`` per name, in the order of the table's strings: each name's op type and
    class (its last event's), how many events, on how many devices, their summed time; and all the events' time."""

    names: tuple[str, ...]
    op_types: tuple[str, ...]
    classes: np.ndarray
    events: np.ndarray
    devices: np.ndarray
    total_us: np.ndarray
    whole_us: float


def name_times(table: EventTable, rows: np.ndarray, classes: np.ndarray) -> NameTimes:
    """``NameTimes`` of the events ``rows`` (event indices)."""
    codes = table.name[rows].astype(np.int64)
    n_names = len(table.strings)
    dur = np.maximum(table.dur[rows], 0.0)
    total = np.bincount(codes, weights=dur, minlength=n_names)  # by string code: no sort of the events
    events = np.bincount(codes, minlength=n_names)
    names = np.flatnonzero(events)
    n_devices = max(1, len(table.devices))
    seen = np.zeros(n_names * n_devices, dtype=bool)  # (name, device) pairs present
    seen[codes * n_devices + table.device[rows]] = True
    devices = seen.reshape(n_names, n_devices).sum(axis=1)
    op_type = np.zeros(n_names, dtype=np.int64)
    op_type[codes] = table.op_type[rows]
    cls = np.zeros(n_names, dtype=np.int64)
    cls[codes] = classes[rows]
    return NameTimes(tuple(table.strings[i] for i in names), tuple(table.strings[op_type[i]] for i in names),
                     cls[names], events[names], devices[names], total[names], float(dur.sum()))


def top_by_time(table: EventTable, rows: np.ndarray, classes: np.ndarray, n: int = TOP) -> tuple[TimedOp, ...]:
    """The ``n`` names with the most summed duration among ``rows`` (event indices), longest first."""
    if len(rows) == 0:
        return ()
    return top_of([name_times(table, rows, classes)], n)


def top_of(parts: list[NameTimes], n: int = TOP, order: dict[str, int] | None = None) -> tuple[TimedOp, ...]:
    """The ``n`` names with the most summed duration over several tables' ``NameTimes`` (a job's ranks), as
    ``top_by_time`` of their events in one table gives them; ``order``: each name's code in that table, which
    breaks ties (None: the order the parts name them)."""
    found: dict[str, list] = {}
    for part in parts:
        for k, name in enumerate(part.names):
            mine = found.get(name)
            if mine is None:
                found[name] = [part.op_types[k], int(part.classes[k]), int(part.events[k]), int(part.devices[k]),
                               float(part.total_us[k])]
            else:
                found[name] = [part.op_types[k], int(part.classes[k]), mine[2] + int(part.events[k]),
                               mine[3] + int(part.devices[k]), mine[4] + float(part.total_us[k])]
    names = list(found)
    if not names:
        return ()
    rank = np.array([order[name] for name in names] if order is not None else range(len(names)), dtype=np.int64)
    totals = np.array([found[name][4] for name in names])
    whole = sum(part.whole_us for part in parts) or 1.0
    picked = np.lexsort((rank, -totals))[:n]
    return tuple(TimedOp(names[i], found[names[i]][0], _CLASS_NAMES[found[names[i]][1]], found[names[i]][2],
                         found[names[i]][3], found[names[i]][4], found[names[i]][4] / whole) for i in picked)
