"""One step's activity per device, as bars for a Gantt chart, bounded in number.

``step_timeline`` picks a typical step (the one of median length among the steps with device
activity; the whole trace when it has no step markers) and returns its device activity as bars
``(device, class, start, end)``, times relative to the step's start. A step's length and bars are its
windows on the devices (``rnnprof.analyzers.steps.step_windows``, as ``comm --per-step`` measures them):
the work of the step's window, cut at its bounds, whichever step launched it. Which events count on
which device is ``comm.device_work_mask``'s rule, the one ``rnnprof comm`` measures with.

Above ``max_bars`` events the bars are aggregated, never sampled: per device and class, intervals
separated by less than a gap are merged into one bar (the gap doubles until the bars fit), so every
moment a device was busy is still drawn, and ``Timeline.note`` says how many events became how many
bars and the gap closed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rnnprof.analyzers.classify import EventClass
from rnnprof.analyzers.steps import step_windows
from rnnprof.events import EventTable

MAX_BARS = 3000
CLASS_NAMES = {EventClass.COMPUTE: "compute", EventClass.COMMUNICATION: "communication",
               EventClass.MEMCPY: "memcpy", EventClass.MEMSET: "memset"}


@dataclass(frozen=True)
class Bar:
    device: str
    cls: str  # "compute" | "communication" | "memcpy" | "memset"
    start_us: float  # from the step's first device activity
    end_us: float
    name: str  # the event's name, or "<n> events" for a merged bar
    events: int  # events this bar stands for


@dataclass(frozen=True)
class Timeline:
    step: int | None  # None: the whole trace (no step markers)
    steps_seen: int  # steps with device activity
    span_us: float
    events: int  # device events in the step
    bars: tuple[Bar, ...]
    merged_gap_us: float = 0.0  # 0: one bar per event
    note: str = ""


def step_timeline(table: EventTable, classes: np.ndarray, work: np.ndarray,
                  max_bars: int = MAX_BARS) -> Timeline | None:
    """The bars of one typical step (see the module docstring); None without device activity."""
    rows = np.flatnonzero(work)
    if len(rows) == 0:
        return None
    steps = table.step[rows]
    known = np.unique(steps[steps >= 0])
    chosen: int | None = None
    ts = table.ts[rows]
    end = ts + np.maximum(table.dur[rows], 0.0)
    if len(known):
        # A step's time is its windows on the devices (``steps.step_windows``: they never overlap), from the
        # earliest start to the latest end; its bars are the devices' work in those windows, cut at their bounds.
        windows = step_windows(table.device[rows], steps, ts, end)
        slot = np.searchsorted(known, windows.step)
        first = np.full(len(known), np.inf)
        last = np.full(len(known), -np.inf)
        np.minimum.at(first, slot, windows.start)
        np.maximum.at(last, slot, windows.end)
        spans = last - first
        order = np.argsort(spans, kind="stable")
        chosen = int(known[order[(len(order) - 1) // 2]])
        in_steps = steps >= 0
        p_ts, p_end, source, window = windows.clip(table.device[rows][in_steps], ts[in_steps], end[in_steps])
        mine = windows.step[window] == chosen
        rows, ts, end = rows[in_steps][source[mine]], p_ts[mine], p_end[mine]
        if len(rows) == 0:  # its windows hold no busy time (zero-length work only)
            return Timeline(chosen, len(known), 0.0, 0, ())
        origin = float(first[np.searchsorted(known, chosen)])
        span = float(last[np.searchsorted(known, chosen)]) - origin
    else:
        origin = float(ts.min())
        span = float(end.max()) - origin
    devices = table.device[rows]
    cls = classes[rows]
    if len(rows) <= max_bars:
        order = np.lexsort((ts, cls, devices))
        bars = tuple(Bar(table.devices[devices[i]].label, CLASS_NAMES[EventClass(cls[i])], float(ts[i] - origin),
                         float(end[i] - origin), table.strings[table.name[rows[i]]], 1) for i in order)
        return Timeline(chosen, len(known), span, len(rows), bars)
    gap = max(span / max_bars, 1e-3)
    while True:
        bars = _merged(table, devices, cls, ts - origin, end - origin, gap)
        if len(bars) <= max_bars:
            break
        gap *= 2
    note = (f"{len(rows):,} events in this step: drawn as {len(bars):,} bars, each joining a device's events "
            f"of one class that are less than {gap:,.1f} µs apart")
    return Timeline(chosen, len(known), span, len(rows), tuple(bars), merged_gap_us=gap, note=note)


def _merged(table: EventTable, devices: np.ndarray, cls: np.ndarray, ts: np.ndarray, end: np.ndarray,
            gap: float) -> list[Bar]:
    bars: list[Bar] = []
    for device in np.unique(devices):
        for c in np.unique(cls[devices == device]):
            here = (devices == device) & (cls == c)
            s, e = ts[here], end[here]
            order = np.argsort(s, kind="stable")
            s, e = s[order], e[order]
            reach = np.maximum.accumulate(e)
            begins = np.empty(len(s), dtype=bool)
            begins[0] = True
            begins[1:] = s[1:] > reach[:-1] + gap
            first = np.flatnonzero(begins)
            last = np.append(first[1:], len(s)) - 1
            counts = np.diff(np.append(first, len(s)))
            label = table.devices[int(device)].label
            name = CLASS_NAMES[EventClass(int(c))]
            bars.extend(Bar(label, name, float(s[f]), float(reach[l]), f"{n} events" if n > 1 else "1 event", int(n))
                        for f, l, n in zip(first, last, counts))
    return bars
