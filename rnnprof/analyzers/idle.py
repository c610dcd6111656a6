"""Idle time by cause: why a GPU stream, or a whole device, waits between pieces of work.

An idle gap lies between two pieces of work on one stream (or between two intervals of a device's busy
union) and is the next piece's. Its cause: *host wait* when the next piece's launch started after the gap
began; else *kernel wait* when the gap is under a threshold (``DEFAULT_KERNEL_WAIT_US``, 30 µs, HTA's default
in effect); else *other* (an event, another stream, a dependency). Per stream these are holistictraceanalysis's
``get_idle_time_breakdown``. A device's gaps add up to its idle time in ``rnnprof.analyzers.comm``; per step
they are cut at the step windows, so a step's add up to its idle time there. Without launches in the trace
(TensorFlow traces, GPU-less ranks) there are no causes (None). See docs/commands/comm.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from rnnprof.analyzers.device_work import STREAM_LANE_PREFIXES, launchers
from rnnprof.analyzers.steps import step_windows
from rnnprof.events import Device, EventTable, Kind

DEFAULT_KERNEL_WAIT_US = 30.0


@dataclass(frozen=True)
class IdleCauses:
    """Idle time in µs, split by cause."""

    host_wait_us: float
    kernel_wait_us: float
    other_us: float

    @property
    def idle_us(self) -> float:
        return self.host_wait_us + self.kernel_wait_us + self.other_us

    def share(self, value_us: float) -> float:
        """``value_us`` as a share of the idle time (0 when there is none)."""
        return value_us / self.idle_us if self.idle_us > 0 else 0.0

    def as_dict(self) -> dict:
        return {"idle_us": self.idle_us, "host_wait_us": self.host_wait_us, "kernel_wait_us": self.kernel_wait_us,
                "other_us": self.other_us}


@dataclass(frozen=True)
class StreamIdle:
    device: Device
    stream: str  # the lane, e.g. "stream:7"
    total: IdleCauses
    steps: dict[int, IdleCauses] = field(default_factory=dict)

    def as_dict(self, per_step: bool = True) -> dict:
        doc = {"stream": self.stream, "total": self.total.as_dict()}
        if per_step:
            doc["steps"] = {str(s): c.as_dict() for s, c in self.steps.items()}
        return doc


@dataclass(frozen=True)
class DeviceIdle:
    device: Device
    total: IdleCauses
    steps: dict[int, IdleCauses] = field(default_factory=dict)
    streams: tuple[StreamIdle, ...] = ()


def _gaps(ts, end, launch_ts, groups, n_groups, threshold_us) -> tuple[np.ndarray, ...]:
    """The gaps between the union of each group's intervals: ``(group, start, end, cause)``, cause 0 host wait,
    1 kernel wait, 2 other."""
    keep = end > ts
    ts, end, launch_ts, groups = ts[keep], end[keep], launch_ts[keep], groups[keep]
    order = np.lexsort((ts, groups))
    ts, end, launch_ts, groups = ts[order], end[order], launch_ts[order], groups[order]
    bounds = np.searchsorted(groups, np.arange(n_groups + 1))
    parts = []
    for g in range(n_groups):
        lo, hi = bounds[g], bounds[g + 1]
        if hi - lo < 2:
            continue
        reach = np.maximum.accumulate(end[lo:hi - 1])  # the end of the work before each next piece
        start = ts[lo + 1:hi]
        is_gap = start > reach
        with np.errstate(invalid="ignore"):
            host = launch_ts[lo + 1:hi] > reach
        kernel = ~host & (start - reach < threshold_us)
        cause = np.where(host, 0, np.where(kernel, 1, 2))
        parts.append((np.full(int(is_gap.sum()), g), reach[is_gap], start[is_gap], cause[is_gap]))
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64)
    return tuple(np.concatenate(column) for column in zip(*parts))


def _sum_causes(groups, length, cause, n_groups) -> np.ndarray:
    """Per group, ``[host wait, kernel wait, other]`` µs."""
    out = np.zeros((n_groups, 3))
    np.add.at(out, (groups, cause), length)
    return out


def _gap_causes(ts, end, launch_ts, groups, n_groups, threshold_us) -> np.ndarray:
    """Per group, ``[host wait, kernel wait, other]`` µs over the gaps between the union of its intervals."""
    group, start, stop, cause = _gaps(ts, end, launch_ts, groups, n_groups, threshold_us)
    return _sum_causes(group, stop - start, cause, n_groups)


def _window_causes(windows, device_of_group, ts, end, launch_ts, groups, n_groups, threshold_us,
                   width) -> np.ndarray:
    """Per group and step slot (``group * width + slot``), the causes of the gaps between the union of each group's
    intervals cut at its device's step windows (``rnnprof.analyzers.steps.step_windows``)."""
    group, start, stop, cause = _gaps(ts, end, launch_ts, groups, n_groups, threshold_us)
    p_start, p_stop, origin, window = windows.clip(device_of_group[group], start, stop)
    slot = windows.slot[window]
    return _sum_causes(group[origin] * width + slot, p_stop - p_start, cause[origin], n_groups * width)


def _causes(row) -> IdleCauses:
    return IdleCauses(host_wait_us=float(row[0]), kernel_wait_us=float(row[1]), other_us=float(row[2]))


@dataclass(frozen=True)
class _Work:
    """The events that make their device busy, as arrays in table order (``rows``: their rows in the table):
    times, the start of the runtime call that launched each (NaN: no launch in the trace), device, step, and the
    step's index among the steps present (``slot``; -1: in no step)."""

    rows: np.ndarray
    ts: np.ndarray
    end: np.ndarray
    launch_ts: np.ndarray
    dev: np.ndarray
    step: np.ndarray
    step_values: np.ndarray  # the steps present, sorted
    slot: np.ndarray
    n_dev: int

    @property
    def known(self) -> np.ndarray:
        """The events in a step."""
        return self.slot >= 0

    @property
    def width(self) -> int:
        """Step slots per group in the per-step arrays (at least 1)."""
        return max(len(self.step_values), 1)


@dataclass(frozen=True)
class _GroupCauses:
    """Idle causes of groups (devices or streams): ``[host wait, kernel wait, other]`` µs per group over the
    whole trace (``totals``) and per group and step slot (``steps``, row ``group * width + slot``), and whether
    the group is in that step (``present``)."""

    totals: np.ndarray
    steps: np.ndarray
    present: np.ndarray

    def by_step(self, group: int, step_values: np.ndarray) -> dict[int, IdleCauses]:
        """The group's causes in each step it is in."""
        n = len(step_values)
        return {int(step_values[j]): _causes(self.steps[group * n + j]) for j in range(n)
                if self.present[group * n + j]}


@dataclass(frozen=True)
class _Streams:
    """The (device, stream lane) pairs with work: ``pairs[0]`` their devices, ``pairs[1]`` their lanes, in that
    order; ``group``: each work event's stream (-1: not on a stream)."""

    pairs: np.ndarray
    group: np.ndarray

    @property
    def count(self) -> int:
        return self.pairs.shape[1]


def _work_events(table: EventTable, work: np.ndarray) -> tuple[_Work, np.ndarray]:
    """The events of ``work`` (a mask of the table), and per device whether any of them has its launch in the
    trace."""
    launcher = launchers(table)
    rows = np.flatnonzero(work)
    launch_ts = np.where(launcher[rows] >= 0, table.ts[np.maximum(launcher[rows], 0)], np.nan)
    dev = table.device[rows].astype(np.int64)
    n_dev = len(table.devices)
    launched = np.bincount(dev[launcher[rows] >= 0], minlength=n_dev) > 0
    ts = table.ts[rows]
    end = ts + np.maximum(table.dur[rows], 0.0)
    step = table.step[rows].astype(np.int64)
    step_values = np.unique(step[step >= 0])
    slot = np.where(step >= 0, np.searchsorted(step_values, step), -1)
    return _Work(rows, ts, end, launch_ts, dev, step, step_values, slot, n_dev), launched


def _slotted_windows(w: _Work):
    """The devices' step windows (``rnnprof.analyzers.steps.step_windows``), each with its step's slot."""
    windows = step_windows(w.dev, w.step, w.ts, w.end)
    return dataclasses.replace(windows, slot=np.searchsorted(w.step_values, windows.step))


def _device_causes(w: _Work, windows, threshold_us: float) -> _GroupCauses:
    """Per device, the causes of the gaps between its work; per step, the gaps between the work of every step,
    cut at each device's step windows (as comm's per-step figures are), so the steps' idle adds up to the idle
    time of the steps' work."""
    known = w.known
    totals = _gap_causes(w.ts, w.end, w.launch_ts, w.dev, w.n_dev, threshold_us)
    per_step = _window_causes(windows, np.arange(w.n_dev), w.ts[known], w.end[known], w.launch_ts[known],
                              w.dev[known], w.n_dev, threshold_us, w.width)
    present = np.zeros(w.n_dev * w.width, dtype=bool)
    present[w.dev[known] * w.width + w.slot[known]] = True
    return _GroupCauses(totals, per_step, present)


def _streams(table: EventTable, w: _Work) -> _Streams:
    """The streams of the work: its kernels, copies, memsets and collectives on stream lanes."""
    is_stream = np.array([s.startswith(STREAM_LANE_PREFIXES) for s in table.strings] or [False], dtype=bool)
    lane = table.lane[w.rows]
    on_stream = is_stream[lane] & np.isin(table.kind[w.rows], (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET,
                                                               Kind.COMMUNICATION))
    # The (device, stream lane) pairs, in that order: one key per pair, unique in one dimension (fast).
    n_lanes = max(len(table.strings), 1)
    keys, stream_of = np.unique(w.dev[on_stream] * n_lanes + lane[on_stream], return_inverse=True)
    pairs = np.stack([keys // n_lanes, keys % n_lanes])
    group = np.full(len(w.rows), -1, dtype=np.int64)
    if pairs.shape[1]:
        group[on_stream] = stream_of.ravel()
    return _Streams(pairs, group)


def _stream_causes(w: _Work, windows, streams: _Streams, threshold_us: float) -> _GroupCauses:
    """Per stream, the causes of the gaps between its work, whole and cut at its device's step windows; a stream
    is in a step where it has work or idle time in the step's window on its device."""
    on_stream = streams.group >= 0
    known = on_stream & w.known
    n = streams.count
    totals = _gap_causes(w.ts[on_stream], w.end[on_stream], w.launch_ts[on_stream], streams.group[on_stream], n,
                         threshold_us)
    per_step = _window_causes(windows, streams.pairs[0], w.ts[known], w.end[known], w.launch_ts[known],
                              streams.group[known], n, threshold_us, w.width)
    present = np.zeros(n * w.width, dtype=bool)
    _, _, origin, window = windows.clip(w.dev[known], w.ts[known], w.end[known])
    present[streams.group[known][origin] * w.width + windows.slot[window]] = True
    present[np.flatnonzero(per_step.sum(axis=1) > 0)] = True
    return _GroupCauses(totals, per_step, present)


def _stream_idles(table: EventTable, d: int, streams: _Streams, causes: _GroupCauses,
                  step_values: np.ndarray) -> tuple[StreamIdle, ...]:
    """The idle causes of device ``d``'s streams, in stream order."""
    found = [StreamIdle(device=table.devices[d], stream=table.strings[int(streams.pairs[1, k])],
                        total=_causes(causes.totals[k]), steps=causes.by_step(k, step_values))
             for k in (np.flatnonzero(streams.pairs[0] == d) if streams.count else ())]
    return tuple(sorted(found, key=lambda s: _stream_order(s.stream)))


def idle_by_cause(table: EventTable, work: np.ndarray,
                  threshold_us: float = DEFAULT_KERNEL_WAIT_US) -> dict[Device, DeviceIdle]:
    """Idle causes of every device whose work (``work``: a mask of the events that make their device busy,
    ``rnnprof.analyzers.device_work.device_work_mask``) has launches in the trace, whole and per step, with its streams."""
    w, launched = _work_events(table, work)
    windows = _slotted_windows(w)
    devices = _device_causes(w, windows, threshold_us)
    streams = _streams(table, w)
    stream_causes = _stream_causes(w, windows, streams, threshold_us)
    return {table.devices[d]: DeviceIdle(device=table.devices[d], total=_causes(devices.totals[d]),
                                         steps=devices.by_step(d, w.step_values),
                                         streams=_stream_idles(table, d, streams, stream_causes, w.step_values))
            for d in range(w.n_dev) if launched[d]}


def _stream_order(lane: str) -> tuple:
    number = lane.rsplit(":", 1)[-1]
    return (0, int(number), lane) if number.isdigit() else (1, 0, lane)
