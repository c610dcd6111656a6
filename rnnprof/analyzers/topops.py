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
    names, inverse = np.unique(table.name[rows], return_inverse=True)
    dur = np.maximum(table.dur[rows], 0.0)
    total = np.bincount(inverse, weights=dur, minlength=len(names))
    events = np.bincount(inverse, minlength=len(names))
    pairs = np.unique(np.stack([inverse, table.device[rows].astype(np.int64)]), axis=1)
    devices = np.bincount(pairs[0], minlength=len(names))
    op_type = np.zeros(len(names), dtype=np.int64)
    op_type[inverse] = table.op_type[rows]
    cls = np.zeros(len(names), dtype=np.int64)
    cls[inverse] = classes[rows]
    order = np.lexsort((names, -total))[:n]
    whole = float(dur.sum()) or 1.0
    return tuple(TimedOp(table.strings[names[i]], table.strings[op_type[i]], _CLASS_NAMES[int(cls[i])],
                         int(events[i]), int(devices[i]), float(total[i]), float(total[i]) / whole) for i in order)
