"""Step selection (which of a trace's steps an analysis looks at) and step windows.

A selection keeps the events of the chosen steps and drops the rest, events outside every step marker
included, before any analysis runs; an event's step is the one the loader gave it (GPU work: its launch's).
The chosen steps are those within ``FIRST:LAST`` (the trace's own numbers, inclusive, either end open), less
the first ``skip_first``, less the last one with ``drop_last`` (HTA's default: ``drop_last=True``). A selection
that leaves no step, or one on a trace without step markers, is a ``StepSelectionError``.

``step_windows``: on each device, step k's window starts at its first event (or where step k-1's starts, if
later) and ends where step k+1's starts, the last at the last end of the steps' events, so no busy or idle
microsecond is counted twice or lost although a step's GPU work may run past the next step's start.
The user's side: docs/commands/comm.md (Step selection, step windows).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rnnprof.events import EventTable, Kind
from rnnprof.events.names import STEP_MARKER, normalize_name

_RANGE = re.compile(r"^\s*(-?\d+)?\s*:\s*(-?\d+)?\s*$|^\s*(-?\d+)\s*$")


class StepSelectionError(ValueError):
    """A selection that cannot be applied: its text is malformed, or it leaves no step."""


@dataclass(frozen=True)
class StepSelection:
    first: int | None = None  # inclusive; None: from the first step
    last: int | None = None  # inclusive; None: to the last step
    skip_first: int = 0
    drop_last: bool = False

    @property
    def active(self) -> bool:
        return self.first is not None or self.last is not None or self.skip_first > 0 or self.drop_last

    def describe(self) -> str:
        """The selection as the flags that make it ("" when it selects everything)."""
        parts = []
        if self.first is not None or self.last is not None:
            parts.append(f"--steps {'' if self.first is None else self.first}:{'' if self.last is None else self.last}")
        if self.skip_first:
            parts.append(f"--skip-first {self.skip_first}")
        if self.drop_last:
            parts.append("--drop-last")
        return " ".join(parts)


def parse_range(text: str) -> tuple[int | None, int | None]:
    """``FIRST:LAST`` (either end may be omitted) or a single step ``N`` as ``(first, last)``."""
    match = _RANGE.match(text)
    if not match:
        raise StepSelectionError(f"{text!r} is not a step range (expected FIRST:LAST, e.g. 1009:1013, "
                                 "or one step number)")
    if match.group(3) is not None:
        single = int(match.group(3))
        return single, single
    first = int(match.group(1)) if match.group(1) is not None else None
    last = int(match.group(2)) if match.group(2) is not None else None
    if first is not None and last is not None and first > last:
        raise StepSelectionError(f"{text!r}: FIRST is after LAST (expected FIRST <= LAST)")
    return first, last


def chosen_steps(steps: np.ndarray, selection: StepSelection) -> np.ndarray:
    """The step numbers ``selection`` keeps out of ``steps`` (sorted, known step numbers)."""
    steps = np.sort(np.asarray(steps))
    if not selection.active:
        return steps
    if len(steps) == 0:
        raise StepSelectionError(f"{selection.describe()}: the trace has no step markers to select from")
    keep = steps
    if selection.first is not None:
        keep = keep[keep >= selection.first]
    if selection.last is not None:
        keep = keep[keep <= selection.last]
    keep = keep[selection.skip_first:]
    if selection.drop_last:
        keep = keep[:-1]
    if len(keep) == 0:
        shown = f"{steps[0]}" if len(steps) == 1 else f"{steps[0]}..{steps[-1]}"
        raise StepSelectionError(f"{selection.describe()} leaves no step (the trace has {len(steps)} step(s), "
                                 f"{shown})")
    return keep


def select_steps(table: EventTable, selection: StepSelection) -> EventTable:
    """The events of the chosen steps (the whole table when the selection selects everything)."""
    if not selection.active:
        return table
    keep = chosen_steps(table.steps(), selection)
    return table.select(np.isin(table.step, keep))


@dataclass(frozen=True)
class StepWindows:
    """Each device's step windows (see ``step_windows``), one row per (device, step) present, sorted by device then
    step: on one device, consecutive windows touch and never overlap."""

    device: np.ndarray  # int64 device code
    step: np.ndarray  # int64 step number
    start: np.ndarray  # float64 µs
    end: np.ndarray
    slot: np.ndarray | None = None  # a caller's index of each window's step (e.g. into its sorted step numbers)

    def __len__(self) -> int:
        return len(self.device)

    def index(self, device: np.ndarray, step: np.ndarray) -> np.ndarray:
        """The row of the window of each ``(device, step)`` pair (each must have one)."""
        width = int(max(self.step.max(initial=0), np.max(step, initial=0))) + 1
        return np.searchsorted(self.device * width + self.step,
                               np.asarray(device, dtype=np.int64) * width + np.asarray(step, dtype=np.int64))

    def clip(self, device: np.ndarray, ts: np.ndarray, end: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Intervals ``[ts, end)`` on ``device`` cut at their device's window bounds: ``(starts, ends, origin,
        window)`` for every non-empty piece, ``origin`` the interval it comes from, ``window`` the row of the
        window it lies in. Time outside every window of its device (and on a device without windows) is left out."""
        device = np.asarray(device, dtype=np.int64)
        ts = np.asarray(ts, dtype=np.float64)
        end = np.asarray(end, dtype=np.float64)
        parts: list[tuple[np.ndarray, ...]] = []
        bounds = np.searchsorted(self.device, np.unique(device), side="left"), \
            np.searchsorted(self.device, np.unique(device), side="right")
        for d, lo, hi in zip(np.unique(device), *bounds):
            if hi == lo:
                continue
            rows = np.flatnonzero(device == d)
            starts, ends = self.start[lo:hi], self.end[lo:hi]
            first = np.maximum(np.searchsorted(starts, ts[rows], side="right") - 1, 0)
            last = np.minimum(np.searchsorted(starts, end[rows], side="left") - 1, hi - lo - 1)
            pieces = np.maximum(last - first + 1, 0)
            origin = np.repeat(rows, pieces)
            window = np.repeat(first, pieces) + (np.arange(len(origin)) - np.repeat(np.cumsum(pieces) - pieces,
                                                                                      pieces))
            piece_s = np.maximum(ts[origin], starts[window])
            piece_e = np.minimum(end[origin], ends[window])
            keep = piece_e > piece_s
            parts.append((piece_s[keep], piece_e[keep], origin[keep], window[keep] + lo))
        if not parts:
            empty = np.zeros(0, dtype=np.float64)
            return empty, empty, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return tuple(np.concatenate(column) for column in zip(*parts))  # type: ignore[return-value]


def step_windows(device: np.ndarray, step: np.ndarray, ts: np.ndarray, end: np.ndarray) -> StepWindows:
    """The step windows of the events ``(device, step, ts, end)`` (events with step -1 are in none).

    On each device, the steps present there in step order: step k's window starts at its first event, or where
    step k-1's starts if that is later (so windows never go back in time), the first window at the earliest event
    of any step; it ends where step k+1's window starts, the last one at the last end of any step's event. The
    windows of a device partition the time from its first to its last step event: a step's GPU work running
    past the start of the next step's work (the host ran ahead) is counted in the next window, never twice, and
    idle time between two steps' work belongs to the earlier step. When the next step present is not k+1 (the
    steps in between were not traced), step k's window ends with the work of the steps up to k instead (when no
    later step's work starts before the next window), so the untraced steps' time is in no window.
    """
    device = np.asarray(device, dtype=np.int64)
    step = np.asarray(step, dtype=np.int64)
    ts = np.asarray(ts, dtype=np.float64)
    end = np.asarray(end, dtype=np.float64)
    known = step >= 0
    if not known.any():
        empty = np.zeros(0, dtype=np.float64)
        return StepWindows(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), empty, empty)
    width = int(step[known].max()) + 1
    keys, inverse = np.unique(device[known] * width + step[known], return_inverse=True)  # 1-D: fast
    inverse = inverse.ravel()
    pairs = np.stack([keys // width, keys % width])
    first = np.full(pairs.shape[1], np.inf)
    last = np.full(pairs.shape[1], -np.inf)
    np.minimum.at(first, inverse, ts[known])
    np.maximum.at(last, inverse, np.maximum(end[known], ts[known]))
    start = np.empty_like(first)
    stop = np.empty_like(last)
    for d in np.unique(pairs[0]):
        rows = np.flatnonzero(pairs[0] == d)  # in step order (np.unique sorts by device, then step)
        s = np.maximum.accumulate(first[rows])
        s[0] = first[rows].min()
        start[rows] = s
        e = np.append(s[1:], last[rows].max())
        # Steps in between not traced (numbers not consecutive): the window ends with the work of the steps so
        # far, unless a later step's work starts before the next window (then nothing lies between them).
        ended = np.maximum.accumulate(last[rows])[:-1]  # the last end of the work of the steps up to each one
        later = np.minimum.accumulate(first[rows][::-1])[::-1][1:]  # the first start of the later steps' work
        apart = (np.diff(pairs[1][rows]) > 1) & (later >= s[1:])
        e[:-1] = np.where(apart, np.maximum(s[:-1], np.minimum(s[1:], ended)), e[:-1])
        stop[rows] = e
    return StepWindows(pairs[0].astype(np.int64), pairs[1].astype(np.int64), start, stop)


STEP_WINDOWS = "step windows"
STEP_TIME_DEFINITIONS = {
    STEP_WINDOWS: "the longest of the devices' step windows: on each device, from the step's first work to the "
                  "next step's window (the last step's to its last work's end)",
}
_SHORT = {STEP_WINDOWS: "the longest device's step window"}
STEP_TIME_TOLERANCE_PCT = 2.0  # a command's own measure of a step further than this from its step time says why


@dataclass(frozen=True)
class JobStepTimes:
    """The time of each step of a job, one definition for every command (``window_step_times``): ``us[k]`` is
    step ``steps[k]``'s."""

    steps: tuple[int, ...]
    us: tuple[float, ...]
    basis: str = STEP_WINDOWS  # a key of STEP_TIME_DEFINITIONS

    def of(self, step: int) -> float | None:
        return dict(zip(self.steps, self.us)).get(step)

    @property
    def definition(self) -> str:
        return STEP_TIME_DEFINITIONS[self.basis]

    @property
    def short(self) -> str:
        """The definition in a few words, for a caption or a note."""
        return _SHORT[self.basis]

    def only(self, steps) -> "JobStepTimes":
        """The times of ``steps`` alone."""
        wanted = set(steps)
        keep = [k for k, s in enumerate(self.steps) if s in wanted]
        return JobStepTimes(tuple(self.steps[k] for k in keep), tuple(self.us[k] for k in keep), self.basis)

    def as_dict(self) -> dict:
        return {"basis": self.basis, "definition": self.definition,
                "step_us": {str(s): us for s, us in zip(self.steps, self.us)}}


def window_step_times(spans: dict[tuple[int, int], float]) -> JobStepTimes:
    """Each step's time: the longest of its windows over the devices (``spans``: ``(device, step) -> µs``, the
    windows of ``step_windows``, as ``rnnprof comm`` cuts the steps). A step lasts as long as the device that
    takes longest over it; the windows partition each device's time, so a step's work running past the next
    step's start (a GPU's kernels, a collective's thread) counts in the next window, never twice."""
    longest: dict[int, float] = {}
    for (_, step), span in spans.items():
        longest[step] = max(longest.get(step, 0.0), float(span))
    steps = tuple(sorted(longest))
    return JobStepTimes(steps, tuple(longest[s] for s in steps))


def job_step_times(parts: Sequence[JobStepTimes]) -> JobStepTimes:
    """The step times of a job analysed rank by rank (each part a rank's): per step the longest, as the windows of
    every rank's devices at once give it."""
    return window_step_times({(k, s): us for k, part in enumerate(parts) for s, us in zip(part.steps, part.us)})


@dataclass(frozen=True)
class Overrun:
    """The event of a step that ends furthest past its device's window of the step."""

    name: str
    device: str  # its device's label
    past_us: float  # how long after the window's end it ends


def step_overruns(names: list[str], devices: list[str], windows: StepWindows, device: np.ndarray,
                  step: np.ndarray, end: np.ndarray, name: np.ndarray) -> dict[int, Overrun]:
    """Per step: of the events ``(device, step, end, name)`` the windows were cut from, the one that ends furthest
    past its device's window of the step, where one does (a GPU's work queued behind the next step's, a
    collective's thread closing its range late). ``names``, ``devices``: the table's strings and labels."""
    known = step >= 0
    device, step, end, name = device[known], step[known], end[known], name[known]
    if not len(device) or not len(windows):
        return {}
    past = end - windows.end[windows.index(device, step)]
    found: dict[int, Overrun] = {}
    order = np.lexsort((-past, step))  # by step, the furthest first
    first = np.flatnonzero(np.r_[True, np.diff(step[order]) != 0])
    for k in order[first].tolist():
        if past[k] > 0:
            found[int(step[k])] = Overrun(names[int(name[k])], devices[int(device[k])], float(past[k]))
    return found


def combined_overruns(parts: Sequence[dict[int, Overrun]]) -> dict[int, Overrun]:
    """The overruns of a job analysed rank by rank (``step_overruns`` of each): per step the furthest."""
    found: dict[int, Overrun] = {}
    for part in parts:
        for step, overrun in part.items():
            if step not in found or overrun.past_us > found[step].past_us:
                found[step] = overrun
    return found


def measured_apart(command_measure: str, measured: dict[int, float], times: JobStepTimes,
                   overruns: dict[int, Overrun]) -> list[str]:
    """Notes for the steps a command measures further than ``STEP_TIME_TOLERANCE_PCT`` from their step time:
    ``command_measure`` says how the command measures (``measured``, µs per step), the note the step time and
    why they differ (the work of the step, or of the step before, running past its window)."""
    notes = []
    for step, us in measured.items():
        step_us = times.of(step)
        if step_us is None or abs(us - step_us) <= STEP_TIME_TOLERANCE_PCT / 100 * step_us:
            continue
        past = overruns.get(step)
        earlier = [s for s in times.steps if s < step]
        before = overruns.get(earlier[-1]) if earlier else None
        if us > step_us and past is not None:
            why = (f": {past.device}'s {normalize_name(past.name)} ends {past.past_us / 1000:.2f} ms into the next "
                   f"step's window")
        elif us < step_us and before is not None:
            why = (f": step {earlier[-1]}'s {normalize_name(before.name)} on {before.device} ran "
                   f"{before.past_us / 1000:.2f} ms into this step's window")
        else:
            why = ": it counts time before the step's first work, or after its last"
        notes.append(f"step {step}: {us / 1000:.3f} ms by {command_measure}, against a step time of "
                     f"{step_us / 1000:.3f} ms ({times.short}){why}")
    return notes


def step_marker_periods(table: EventTable | None) -> np.ndarray:
    """Durations (µs) of the host step markers (``ProfilerStep#N`` annotations) of the table's steps, one per
    rank and step: the steps left after a step selection, every marker when the events carry no step."""
    if table is None or not len(table):
        return np.zeros(0)
    return marker_periods([step_markers(table)], table.steps())


def step_markers(table: EventTable) -> tuple[np.ndarray, np.ndarray]:
    """The host step markers of the table: each one's step number and duration (µs). A GPU's own ProfilerStep#N
    annotation marks when the GPU ran the step's work (Kineto can give the first step's one the whole window's
    span), not the step."""
    numbers = np.full(len(table.strings), -1, dtype=np.int64)
    for code, text in enumerate(table.strings):
        match = STEP_MARKER.match(text) if text.startswith("ProfilerStep#") else None
        if match:
            numbers[code] = int(match.group(1))
    step_of = numbers[table.name]
    on_host = np.array([d.kind != "gpu" for d in table.devices] or [True], dtype=bool)
    rows = (step_of >= 0) & (table.kind == Kind.ANNOTATION) & on_host[table.device]
    return step_of[rows], table.dur[rows].astype(float)


def marker_periods(markers: Sequence[tuple[np.ndarray, np.ndarray]], known: np.ndarray) -> np.ndarray:
    """``step_marker_periods`` of several tables' ``step_markers`` (a job's ranks), ``known``: their steps."""
    steps = np.concatenate([m[0] for m in markers]) if markers else np.zeros(0, dtype=np.int64)
    periods = np.concatenate([m[1] for m in markers]) if markers else np.zeros(0)
    return periods[np.isin(steps, known)] if len(known) else periods
