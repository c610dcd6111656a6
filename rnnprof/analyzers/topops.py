"""The ops and kernels that take the most time, grouped by name.

``top_by_time`` sums the durations of the given events per name (over devices and steps, so
instances running at once on two devices both count) and keeps the longest ``n``. The report
calls it twice: on device activity (kernels, copies, a CPU device's ops: ``comm.device_work_mask``)
and on the host's operators (PyTorch ``cpu_op``, a TF GPU device's launches run on the host).
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


def top_by_time(table: EventTable, rows: np.ndarray, classes: np.ndarray, n: int = TOP) -> tuple[TimedOp, ...]:
    """The ``n`` names with the most summed duration among ``rows`` (event indices), longest first."""
    if len(rows) == 0:
        return ()
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
    order = names[np.lexsort((names, -total[names]))][:n]
    whole = float(dur.sum()) or 1.0
    return tuple(TimedOp(table.strings[i], table.strings[op_type[i]], _CLASS_NAMES[int(cls[i])],
                         int(events[i]), int(devices[i]), float(total[i]), float(total[i]) / whole) for i in order)
