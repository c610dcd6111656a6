"""Kernel launches: which runtime call started each piece of GPU work, and what launching costs.

A launch is a runtime call (``Kind.RUNTIME``) linked to the GPU work it started by a correlation id within one
worker. Only Kineto traces record that link; for the TensorFlow traces rnnprof reads
``LaunchStats.available`` is False, with the reason.

Per kernel name: launch delay (kernel start - call start; median, p95), kernel against call duration, the
share of kernels shorter than their launch, and of kernels shorter than ``short_kernel_us``. Per host
operator name (the innermost op around a launch): its host time against its kernels' summed time.
``launch_bound`` lists the GPUs whose host-wait idle time (``rnnprof.analyzers.idle``) is at least half their
span. The figures as reported: docs/commands/count-ops.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rnnprof.analyzers.classify import classify
from rnnprof.analyzers.device_work import (CPU_KERNEL_KINDS, GPU_KERNEL_KINDS, STREAM_LANE_PREFIXES,  # noqa: F401
                                           device_work_mask, kernel_masks, launchers)
from rnnprof.analyzers.idle import idle_by_cause
from rnnprof.events import EventTable, Kind

DEFAULT_SHORT_KERNEL_US = 10.0
LAUNCH_BOUND_SHARE = 0.5  # host wait as a share of the span above which a GPU is launch-bound
NO_LAUNCHES = ("no runtime call is linked to a kernel by a correlation id (PyTorch profiler traces record them; "
               "the TensorFlow traces rnnprof reads, and traces without GPU kernels, do not)")


@dataclass(frozen=True)
class KernelLaunches:
    """Launch figures of the kernels of one name (times in µs)."""

    name: str
    kernels: int
    launched: int  # kernels whose runtime call is in the trace (the delay figures are over these)
    total_us: float
    kernel_median_us: float
    launch_call_median_us: float | None
    delay_median_us: float | None
    delay_p95_us: float | None
    shorter_than_launch: int  # kernels that ran shorter than the runtime call that launched them
    short: int  # kernels shorter than the short-kernel threshold

    def as_dict(self) -> dict:
        return {"name": self.name, "kernels": self.kernels, "launched": self.launched, "total_us": self.total_us,
                "kernel_median_us": self.kernel_median_us, "launch_call_median_us": self.launch_call_median_us,
                "launch_delay_median_us": self.delay_median_us, "launch_delay_p95_us": self.delay_p95_us,
                "shorter_than_launch_call": self.shorter_than_launch, "short_kernels": self.short}


@dataclass(frozen=True)
class HostOpLaunches:
    """One host operator name: its executions that launched kernels (times in µs)."""

    name: str
    ops: int
    kernels: int
    host_total_us: float
    host_median_us: float
    kernels_median_us: float  # median over executions of the summed duration of the kernels each launched
    longer_on_host: int  # executions whose host time exceeds their kernels' summed time

    def as_dict(self) -> dict:
        return {"name": self.name, "ops": self.ops, "kernels": self.kernels, "host_total_us": self.host_total_us,
                "host_median_us": self.host_median_us, "kernels_median_us": self.kernels_median_us,
                "longer_on_host": self.longer_on_host}


@dataclass(frozen=True)
class LaunchStats:
    available: bool
    reason: str = ""
    short_kernel_us: float = DEFAULT_SHORT_KERNEL_US
    kernels: int = 0
    launched: int = 0
    short: int = 0
    shorter_than_launch: int = 0
    delay_median_us: float | None = None
    delay_p95_us: float | None = None
    by_name: tuple[KernelLaunches, ...] = ()  # by summed kernel time, longest first
    by_host_op: tuple[HostOpLaunches, ...] = ()  # by summed host time, longest first
    host_wait_share: dict[str, float] | None = None  # GPU -> host-wait idle / span
    launch_bound: tuple[str, ...] = ()

    @property
    def short_share(self) -> float:
        return self.short / self.kernels if self.kernels else 0.0

    def as_dict(self) -> dict:
        if not self.available:
            return {"available": False, "reason": self.reason}
        return {
            "available": True,
            "short_kernel_us": self.short_kernel_us,
            "kernels": self.kernels,
            "launched": self.launched,
            "short_kernels": self.short,
            "short_kernel_share": self.short_share,
            "shorter_than_launch_call": self.shorter_than_launch,
            "launch_delay_median_us": self.delay_median_us,
            "launch_delay_p95_us": self.delay_p95_us,
            "host_wait_share_of_span": self.host_wait_share or {},
            "launch_bound": list(self.launch_bound),
            "by_kernel": [k.as_dict() for k in self.by_name],
            "by_host_op": [o.as_dict() for o in self.by_host_op],
        }


def _median(values: np.ndarray) -> float | None:
    return float(np.median(values)) if len(values) else None


def _p95(values: np.ndarray) -> float | None:
    return float(np.percentile(values, 95)) if len(values) else None


def host_wait_shares(table: EventTable) -> dict[str, float]:
    """Per GPU with launches in the trace: its host-wait idle time as a share of its span."""
    work, _ = device_work_mask(table, classify(table))
    shares = {}
    for device, idle in idle_by_cause(table, work).items():
        if device.kind != "gpu":
            continue
        mine = work & (table.device == table.devices.index(device))
        span = float((table.ts[mine] + np.maximum(table.dur[mine], 0)).max() - table.ts[mine].min())
        shares[device.label] = idle.total.host_wait_us / span if span > 0 else 0.0
    return shares


@dataclass(frozen=True)
class LaunchSample:
    """What launch statistics are taken from, event by event, without the table: per kernel its name,
    duration, launch delay and launch call's duration (NaN without a call); per host-op execution that
    launched kernels its name, host time and its kernels' count and summed time; per GPU its host-wait
    share. Samples of several ranks concatenate (``launch_stats_of``), so a whole job's statistics are
    those of its ranks' traces merged, wherever each rank was read."""

    kernel_names: tuple[str, ...]
    kernel_name: np.ndarray  # index into kernel_names, per kernel
    kernel_dur: np.ndarray
    delay: np.ndarray
    call_dur: np.ndarray
    op_names: tuple[str, ...]
    op_name: np.ndarray  # index into op_names, per host-op execution
    op_host_dur: np.ndarray
    op_kernel_time: np.ndarray
    op_kernels: np.ndarray
    host_wait_share: dict[str, float]


def host_wait_share(comm) -> dict[str, float]:
    """Per GPU with idle time by cause: its host-wait idle time as a share of its span, from a
    ``comm.CommReport``'s figures (what ``host_wait_shares`` computes from the table); {} without one."""
    if comm is None:
        return {}
    return {d.device.label: (d.idle.total.host_wait_us / d.total.span_us if d.total.span_us > 0 else 0.0)
            for d in comm.devices if d.idle is not None and d.device.kind == "gpu"}


def launch_sample(table: EventTable, host_wait_share: dict[str, float] | None = None,
                  host_ops: bool = True) -> LaunchSample | None:
    """The table's ``LaunchSample``; None when no runtime call is linked to a kernel. ``host_ops`` False: the
    kernels alone, no host-op executions (the audit reads the kernels' figures only)."""
    launcher = launchers(table)
    is_gpu = np.array([d.kind == "gpu" for d in table.devices] or [False], dtype=bool)
    kernel_rows = np.flatnonzero(is_gpu[table.device] & np.isin(table.kind, (Kind.KERNEL, Kind.COMMUNICATION)))
    kernel_rows = kernel_rows[_on_streams(table, kernel_rows)]
    if not len(kernel_rows) or not (launcher[kernel_rows] >= 0).any():
        return None
    dur = np.maximum(table.dur[kernel_rows], 0.0)
    call = launcher[kernel_rows]
    has_call = call >= 0
    delay = np.where(has_call, table.ts[kernel_rows] - table.ts[np.maximum(call, 0)], np.nan)
    call_dur = np.where(has_call, table.dur[np.maximum(call, 0)], np.nan)
    names, name_of = np.unique(table.name[kernel_rows], return_inverse=True)
    op_names, op_name, host_time, kernel_time, kernel_count = _host_op_executions(
        table, launcher, kernel_rows if host_ops else kernel_rows[:0], dur)
    return LaunchSample(
        kernel_names=tuple(table.strings[c] for c in names), kernel_name=name_of.astype(np.int64), kernel_dur=dur,
        delay=delay, call_dur=call_dur, op_names=op_names, op_name=op_name, op_host_dur=host_time,
        op_kernel_time=kernel_time, op_kernels=kernel_count,
        host_wait_share=host_wait_shares(table) if host_wait_share is None else dict(host_wait_share))


def launch_stats(table: EventTable, short_kernel_us: float = DEFAULT_SHORT_KERNEL_US,
                 host_wait_share: dict[str, float] | None = None) -> LaunchStats:
    """Launch statistics of the kernels in ``table``; ``host_wait_share`` (GPU label -> host-wait idle / span,
    ``host_wait_shares(table)`` when None) decides which GPUs are launch-bound."""
    return launch_stats_of([launch_sample(table, host_wait_share)], short_kernel_us)


def launch_stats_of(samples, short_kernel_us: float = DEFAULT_SHORT_KERNEL_US) -> LaunchStats:
    """Launch statistics of one or more ``LaunchSample`` (None entries: ranks without linked launches)."""
    samples = [s for s in samples if s is not None]
    if not samples:
        return LaunchStats(available=False, reason=NO_LAUNCHES, short_kernel_us=short_kernel_us)
    kernel_names, kernel_name = _union([(s.kernel_names, s.kernel_name) for s in samples])
    dur = np.concatenate([s.kernel_dur for s in samples])
    delay = np.concatenate([s.delay for s in samples])
    call_dur = np.concatenate([s.call_dur for s in samples])
    has_call = ~np.isnan(delay)
    shorter = has_call & (dur < np.where(has_call, call_dur, -np.inf))
    short = dur < short_kernel_us
    order = np.argsort(kernel_name, kind="stable")
    bounds = np.searchsorted(kernel_name[order], np.arange(len(kernel_names) + 1))
    by_name = []
    for k, name in enumerate(kernel_names):
        rows = order[bounds[k]:bounds[k + 1]]
        if not len(rows):
            continue
        launched = rows[has_call[rows]]
        by_name.append(KernelLaunches(
            name=name, kernels=len(rows), launched=len(launched), total_us=float(dur[rows].sum()),
            kernel_median_us=float(np.median(dur[rows])), launch_call_median_us=_median(call_dur[launched]),
            delay_median_us=_median(delay[launched]), delay_p95_us=_p95(delay[launched]),
            shorter_than_launch=int(shorter[rows].sum()), short=int(short[rows].sum())))
    by_name.sort(key=lambda k: (-k.total_us, k.name))
    shares = {gpu: share for s in samples for gpu, share in s.host_wait_share.items()}
    return LaunchStats(
        available=True, short_kernel_us=short_kernel_us, kernels=len(dur), launched=int(has_call.sum()),
        short=int(short.sum()), shorter_than_launch=int(shorter.sum()),
        delay_median_us=_median(delay[has_call]), delay_p95_us=_p95(delay[has_call]), by_name=tuple(by_name),
        by_host_op=_host_ops(samples),
        host_wait_share=shares,
        launch_bound=tuple(sorted(d for d, share in shares.items() if share >= LAUNCH_BOUND_SHARE)))


def _union(parts) -> tuple[tuple[str, ...], np.ndarray]:
    """Names of several samples in one sorted list, and every sample's codes moved onto it."""
    names = sorted({n for part_names, _ in parts for n in part_names})
    index = {n: k for k, n in enumerate(names)}
    codes = [np.array([index[n] for n in part_names] or [0], dtype=np.int64)[part_codes] if len(part_codes)
             else np.zeros(0, dtype=np.int64) for part_names, part_codes in parts]
    return tuple(names), np.concatenate(codes) if codes else np.zeros(0, dtype=np.int64)


def _on_streams(table: EventTable, rows: np.ndarray) -> np.ndarray:
    """Which of ``rows`` sit on a GPU stream lane (not the TF executor's launch lane)."""
    is_stream = np.array([s.startswith(STREAM_LANE_PREFIXES) for s in table.strings] or [False], dtype=bool)
    return is_stream[table.lane[rows]] | (table.kind[rows] == Kind.KERNEL)


def enclosing_host_ops(table: EventTable, rows: np.ndarray) -> np.ndarray:
    """For each event in ``rows``, the innermost host op (``Kind.HOST_OP``) on the same device and thread
    (lane) that contains it, else -1. On each lane the ops and the events are taken by start (at one start, longer
    first, ops before events); an event's op is the innermost one still open at its start (an op whose end is at
    or before that start has closed), if it lasts to the event's end. Where a lane's ops nest (a thread's ops
    do), in arrays (``_innermost_nested``); else op by op (``_innermost_by_stack``), the same definition."""
    out = np.full(len(rows), -1, dtype=np.int64)
    ops = np.flatnonzero(table.kind == Kind.HOST_OP)
    if not len(rows) or not len(ops):
        return out
    lane_key = table.device.astype(np.int64) * (len(table.strings) + 1) + table.lane
    row_key, op_key = lane_key[rows], lane_key[ops]
    by_key = np.argsort(op_key, kind="stable")
    sorted_keys = op_key[by_key]
    for key in np.unique(row_key).tolist():
        at = np.flatnonzero(row_key == key)
        theirs = ops[by_key[np.searchsorted(sorted_keys, key, "left"):np.searchsorted(sorted_keys, key, "right")]]
        if not len(theirs):
            continue
        found = _innermost_nested(table, theirs, rows[at])
        out[at] = found if found is not None else _innermost_by_stack(table, theirs, rows[at])
    return out


def _merged_order(table: EventTable, ops: np.ndarray, events: np.ndarray) -> np.ndarray:
    """Each of ``ops`` then ``events``' place when taken by start, at one start longer first, ops before events."""
    both = np.concatenate([ops, events])
    is_op = np.concatenate([np.ones(len(ops), bool), np.zeros(len(events), bool)])
    order = np.lexsort((~is_op, -table.dur[both], table.ts[both]))
    place = np.empty(len(both), dtype=np.int64)
    place[order] = np.arange(len(both))
    return place


def _innermost_nested(table: EventTable, ops: np.ndarray, events: np.ndarray) -> np.ndarray | None:
    """``_innermost_by_stack``'s answer where the lane's ``ops`` nest (no two overlap unless one holds the other),
    in arrays; None where they do not. An op of no length closes before anything after it starts: it holds nothing.
    Each op's depth: the ops open once it has started, itself included; an event's depth: those open at its start.
    Where ops nest, the innermost op open at a place is the last op before it of the same depth, and an op's parent
    the last op before it one level up; they nest if each op ends within its parent."""
    op_end = table.ts[ops] + np.maximum(table.dur[ops], 0.0)
    ops, op_end = ops[op_end > table.ts[ops]], op_end[op_end > table.ts[ops]]
    if not len(ops):
        return np.full(len(events), -1, dtype=np.int64)
    place = _merged_order(table, ops, events)
    op_place, event_place = place[:len(ops)], place[len(ops):]
    ends = np.sort(op_end)
    by_place = np.argsort(op_place)
    opened = np.empty(len(ops), dtype=np.int64)
    opened[by_place] = np.arange(1, len(ops) + 1)
    depth = opened - np.searchsorted(ends, table.ts[ops], "right")
    event_start = table.ts[events]
    event_depth = np.searchsorted(op_place[by_place], event_place) - np.searchsorted(ends, event_start, "right")
    stride = len(place) + 1
    key = depth * stride + op_place
    by_key = np.argsort(key)
    sorted_key = key[by_key]

    def last_before(level: np.ndarray, at: np.ndarray) -> np.ndarray:
        """The last op before place ``at`` of depth ``level`` (-1: none)."""
        k = np.searchsorted(sorted_key, level * stride + at) - 1
        found = by_key[np.maximum(k, 0)]
        return np.where((k >= 0) & (depth[found] == level) & (level > 0), found, -1)

    parent = last_before(depth - 1, op_place)
    inner = depth > 1
    if (parent[inner] < 0).any() or (op_end[inner] > op_end[parent[inner]]).any():
        return None
    innermost = last_before(event_depth, event_place)
    event_end = event_start + np.maximum(table.dur[events], 0.0)
    holds = (innermost >= 0) & (op_end[np.maximum(innermost, 0)] >= event_end)
    return np.where(holds, ops[np.maximum(innermost, 0)], -1)


def _innermost_by_stack(table: EventTable, ops: np.ndarray, events: np.ndarray) -> np.ndarray:
    """For each of ``events``, the innermost of one lane's host ``ops`` that contains it (-1: none), by a stack of
    the ops open, in the order ``_merged_order`` takes them."""
    both = np.concatenate([ops, events])
    is_op = np.concatenate([np.ones(len(ops), bool), np.zeros(len(events), bool)])
    order = np.argsort(_merged_order(table, ops, events))
    ordered = both[order]
    found = np.full(len(both), -1, dtype=np.int64)
    stack: list[tuple[float, int]] = []
    for k, op, start, end in zip(order.tolist(), is_op[order].tolist(), table.ts[ordered].tolist(),
                                 (table.ts[ordered] + np.maximum(table.dur[ordered], 0.0)).tolist()):
        while stack and stack[-1][0] <= start:
            stack.pop()
        if op:
            stack.append((end, int(both[k])))
        elif stack and stack[-1][0] >= end:
            found[k] = stack[-1][1]
    return found[len(ops):]


def launching_ops(table: EventTable, launcher: np.ndarray, kernel_rows: np.ndarray, kernel_dur: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The innermost host operators around the runtime calls that launched the kernels ``kernel_rows``
    (``launcher``: ``device_work.launchers``; ``kernel_dur``: each kernel's duration, one per row): their rows,
    sorted, and for each the summed duration and the count of the kernels it launched; empty where no launch is
    inside a host operator."""
    empty = (np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=np.int64))
    launched = launcher[kernel_rows] >= 0
    calls = launcher[kernel_rows][launched]
    if not len(calls):
        return empty
    unique_calls, call_of = np.unique(calls, return_inverse=True)
    op = enclosing_host_ops(table, unique_calls)[call_of]
    has_op = op >= 0
    if not has_op.any():
        return empty
    ops, op_index = np.unique(op[has_op], return_inverse=True)
    kernel_time = np.bincount(op_index, weights=kernel_dur[launched][has_op], minlength=len(ops))
    return ops, kernel_time, np.bincount(op_index, minlength=len(ops))


def _host_op_executions(table: EventTable, launcher: np.ndarray, kernel_rows: np.ndarray, dur: np.ndarray):
    """Host-op executions that launched kernels: (names, name per execution, host time, kernels' summed time,
    kernels launched)."""
    ops, kernel_time, kernel_count = launching_ops(table, launcher, kernel_rows, dur)
    if not len(ops):
        return (), np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64)
    host_time = np.maximum(table.dur[ops], 0.0)
    names, name_of = np.unique(table.name[ops], return_inverse=True)
    return tuple(table.strings[c] for c in names), name_of.astype(np.int64), host_time, kernel_time, kernel_count


def _host_ops(samples) -> tuple[HostOpLaunches, ...]:
    """Host ops that launched kernels, grouped by name, longest summed host time first."""
    names, name_of = _union([(s.op_names, s.op_name) for s in samples])
    host_time = np.concatenate([s.op_host_dur for s in samples])
    kernel_time = np.concatenate([s.op_kernel_time for s in samples])
    kernel_count = np.concatenate([s.op_kernels for s in samples])
    found = []
    for k, name in enumerate(names):
        mine = name_of == k
        if not mine.any():
            continue
        found.append(HostOpLaunches(
            name=name, ops=int(mine.sum()), kernels=int(kernel_count[mine].sum()),
            host_total_us=float(host_time[mine].sum()), host_median_us=float(np.median(host_time[mine])),
            kernels_median_us=float(np.median(kernel_time[mine])),
            longer_on_host=int((host_time[mine] > kernel_time[mine]).sum())))
    found.sort(key=lambda o: (-o.host_total_us, o.name))
    return tuple(found)


def host_self_time(table: EventTable, rows: np.ndarray) -> np.ndarray:
    """For each host op in ``rows`` (event indices), its self time: its duration less the time of the ops of
    ``rows`` nested directly in it on the same device and thread (lane), each child cut to the op's end."""
    rows = np.asarray(rows, dtype=np.int64)
    dur = np.maximum(table.dur[rows], 0.0)
    out = dur.copy()
    if not len(rows):
        return out
    lane_key = table.device[rows].astype(np.int64) * (len(table.strings) + 1) + table.lane[rows]
    start = table.ts[rows]
    end = start + dur
    # By thread, then start; at one start the longer op first (it contains the shorter), and of two alike the
    # first recorded (Kineto writes an op before the ops it calls).
    order = np.lexsort((rows, -dur, start, lane_key))
    ends = end.tolist()
    stack: list[int] = []  # positions in rows of the open ops, innermost last
    last_key = None
    for k, key, s, e in zip(order.tolist(), lane_key[order].tolist(), start[order].tolist(), end[order].tolist()):
        if key != last_key:
            stack.clear()
            last_key = key
        while stack and ends[stack[-1]] <= s:
            stack.pop()
        if stack:
            parent = stack[-1]
            out[parent] -= min(e, ends[parent]) - s
        stack.append(k)
    return np.maximum(out, 0.0)
