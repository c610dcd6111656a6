"""The step time every command gives (``steps.window_step_times``) from a table: the devices' work as ``rnnprof
comm`` counts it (``device_work.device_work_mask``), cut into step windows (``steps.step_windows``), each step the
longest of its windows; and, per step, the work that ran past its window (``steps.step_overruns``), which is why
a command measuring a step its own way (whatif's replay, the critical path's window) can differ from it."""

from __future__ import annotations

import numpy as np

from rnnprof.analyzers.classify import classify
from rnnprof.analyzers.device_work import device_work_mask
from rnnprof.analyzers.steps import JobStepTimes, Overrun, step_overruns, step_windows, window_step_times
from rnnprof.events import EventTable


def device_step_times(table: EventTable, classes: np.ndarray | None = None
                      ) -> tuple[JobStepTimes, dict[int, Overrun]]:
    """The table's step times and each step's overrun (``classes``: ``classify(table)``, when the caller has
    it)."""
    classes = classify(table) if classes is None else classes
    work, _ = device_work_mask(table, classes)
    rows = np.flatnonzero(work & (table.step >= 0))
    device, step = table.device[rows].astype(np.int64), table.step[rows].astype(np.int64)
    ts = table.ts[rows]
    end = ts + np.maximum(table.dur[rows], 0.0)
    windows = step_windows(device, step, ts, end)
    times = window_step_times({(int(d), int(s)): float(e - b) for d, s, b, e in
                               zip(windows.device, windows.step, windows.start, windows.end)})
    overruns = step_overruns(table.strings, [d.label for d in table.devices], windows, device, step, end,
                             table.name[rows])
    return times, overruns
