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
bars and the gap closed. A whole job's ranks give their work apart (``work_pieces``: each step's span over their
devices, their work cut at their devices' windows), and ``timeline_of`` draws the chosen step from them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rnnprof.analyzers.classify import EventClass
from rnnprof.analyzers.critical_path.job import RankPart
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


@dataclass(frozen=True)
class WorkPieces:
    """A table's device work for ``step_timeline``: each step's span over its devices' step windows (first start,
    last end, on the job's clock), and the work cut at those windows (``part``: arrays ``ts``, ``end``, ``step`` (its
    window's), ``device``, ``name``, ``cls``), or, where the table numbers no step, its whole work (step -1)."""

    spans: dict[int, tuple[float, float]]
    part: RankPart


def work_pieces(table: EventTable, classes: np.ndarray, work: np.ndarray, shift_us: float = 0.0) -> WorkPieces:
    """The table's ``WorkPieces`` (``work``: ``comm.device_work_mask``; ``shift_us``: its time base)."""
    rows = np.flatnonzero(work)
    steps = table.step[rows]
    ts = table.ts[rows]
    end = ts + np.maximum(table.dur[rows], 0.0)
    known = np.unique(steps[steps >= 0])
    spans: dict[int, tuple[float, float]] = {}
    step = np.full(len(rows), -1, dtype=np.int64)
    if len(known):
        # A step's time is its windows on the devices (``steps.step_windows``: they never overlap), from the
        # earliest start to the latest end; its bars are the devices' work in those windows, cut at their bounds.
        windows = step_windows(table.device[rows], steps, ts, end)
        slot = np.searchsorted(known, windows.step)
        first = np.full(len(known), np.inf)
        last = np.full(len(known), -np.inf)
        np.minimum.at(first, slot, windows.start)
        np.maximum.at(last, slot, windows.end)
        spans = {int(k): (float(a) + shift_us, float(b) + shift_us) for k, a, b in zip(known, first, last)}
        in_steps = steps >= 0
        ts, end, source, window = windows.clip(table.device[rows][in_steps], ts[in_steps], end[in_steps])
        rows, step = rows[in_steps][source], windows.step[window]
    arrays = {"ts": ts + shift_us, "end": end + shift_us, "step": step, "device": table.device[rows],
              "name": table.name[rows], "cls": classes[rows]}
    return WorkPieces(spans, RankPart(arrays, table.strings, table.devices))


def step_timeline(table: EventTable, classes: np.ndarray, work: np.ndarray,
                  max_bars: int = MAX_BARS) -> Timeline | None:
    """The bars of one typical step (see the module docstring); None without device activity."""
    pieces = work_pieces(table, classes, work)
    return timeline_of([pieces.part], pieces.spans, max_bars)


def chosen_step(spans: dict[int, tuple[float, float]]) -> int | None:
    """The typical step: of median length among the steps with device activity (``WorkPieces.spans``, a job's
    ranks' combined); None without any."""
    if not spans:
        return None
    known = sorted(spans)
    order = np.argsort(np.array([spans[k][1] - spans[k][0] for k in known]), kind="stable")
    return int(known[order[(len(order) - 1) // 2]])


def timeline_of(parts: Sequence[RankPart], spans: dict[int, tuple[float, float]] | None = None,
                max_bars: int = MAX_BARS) -> Timeline | None:
    """``step_timeline`` of the tables whose ``WorkPieces`` are ``parts`` and ``spans`` (a job's ranks: theirs
    combined, ``noise.combined_spans``), as of the tables merged into one; None without device activity."""
    spans = spans or {}
    chosen = chosen_step(spans)
    picked = [np.flatnonzero(np.asarray(p.arrays["step"]) == (-1 if chosen is None else chosen)) for p in parts]
    index: dict = {}
    codes = [np.array([index.setdefault(d, len(index)) for d in p.devices] or [0], dtype=np.int64) for p in parts]
    labels = [d.label for d in index]
    column = {c: np.concatenate([np.asarray(p.arrays[c][k]) for p, k in zip(parts, picked)]) if parts else np.zeros(0)
              for c in ("ts", "end", "cls")}
    devices = np.concatenate([code[np.asarray(p.arrays["device"][k])] for p, k, code in zip(parts, picked, codes)]) \
        if parts else np.zeros(0, dtype=np.int64)
    ts, end, cls = column["ts"], column["end"], column["cls"].astype(np.int64)
    if chosen is None:
        if not len(ts):
            return None
        origin = float(ts.min())
        span = float(end.max()) - origin
    elif not len(ts):  # its windows hold no busy time (zero-length work only)
        return Timeline(chosen, len(spans), 0.0, 0, ())
    else:
        origin, span = spans[chosen][0], spans[chosen][1] - spans[chosen][0]
    if len(ts) <= max_bars:
        names = [p.strings[c] for p, k in zip(parts, picked) for c in np.asarray(p.arrays["name"][k]).tolist()]
        order = np.lexsort((ts, cls, devices))
        bars = tuple(Bar(labels[devices[i]], CLASS_NAMES[EventClass(cls[i])], float(ts[i] - origin),
                         float(end[i] - origin), names[i], 1) for i in order)
        return Timeline(chosen, len(spans), span, len(ts), bars)
    gap = max(span / max_bars, 1e-3)
    while True:
        bars = _merged(labels, devices, cls, ts - origin, end - origin, gap)
        if len(bars) <= max_bars:
            break
        gap *= 2
    note = (f"{len(ts):,} events in this step: drawn as {len(bars):,} bars, each joining a device's events "
            f"of one class that are less than {gap:,.1f} µs apart")
    return Timeline(chosen, len(spans), span, len(ts), tuple(bars), merged_gap_us=gap, note=note)


def _merged(labels: list[str], devices: np.ndarray, cls: np.ndarray, ts: np.ndarray, end: np.ndarray,
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
            label = labels[int(device)]
            name = CLASS_NAMES[EventClass(int(c))]
            bars.extend(Bar(label, name, float(s[f]), float(reach[l]), f"{n} events" if n > 1 else "1 event", int(n))
                        for f, l, n in zip(first, last, counts))
    return bars
