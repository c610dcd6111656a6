"""Kernel launches: which runtime call started each piece of GPU work, and what launching costs.

A launch is a runtime call (``Kind.RUNTIME``, e.g. ``cudaLaunchKernel``) linked to the GPU work it
started by a correlation id, matched within one worker (correlation ids restart in every process).
Only traces that record that link have launch statistics: PyTorch profiler (Kineto) traces do;
the TensorFlow traces rnnprof reads (step stats, TF1 timelines, tf.profiler XSpace) do not link a
GPU op's launch to its kernel, so for them ``LaunchStats.available`` is False with the reason.

Per kernel name (kernels on GPU streams, NCCL kernels included; copies and memsets are not kernels):

* launch delay = kernel start - start of its runtime call (median and 95th percentile);
* kernel duration against its launch call's duration (medians), and the share of kernels that ran
  shorter than the call that launched them (the host spent longer launching than the GPU running);
* short kernels: the share of kernels shorter than ``short_kernel_us``.

Per host operator name (the innermost host op, e.g. ``aten::addmm``, around a launch call on the same
thread), over the op executions that launched kernels: the op's duration on the host against the summed
duration of the kernels it launched (medians), and how many executions took longer on the host than
their kernels on the GPU.

``launch_bound`` lists the GPUs that mostly wait on the host: host-wait idle time (see
``rnnprof.analyzers.idle``) at least half of the GPU's span.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rnnprof.events import EventTable, Kind, match_correlation

DEFAULT_SHORT_KERNEL_US = 10.0
LAUNCH_BOUND_SHARE = 0.5  # host wait as a share of the span above which a GPU is launch-bound
NO_LAUNCHES = ("no runtime call is linked to a kernel by a correlation id (PyTorch profiler traces record them; "
               "the TensorFlow traces rnnprof reads, and traces without GPU kernels, do not)")


def worker_of_events(table: EventTable) -> np.ndarray:
    """Each event's worker (process) as a small int, so that correlation ids match within one process."""
    workers = sorted({d.worker for d in table.devices})
    code = np.array([workers.index(d.worker) for d in table.devices] or [0], dtype=np.int64)
    return code[table.device] if len(table) else np.zeros(0, dtype=np.int64)


def launchers(table: EventTable) -> np.ndarray:
    """For each event, the index of the runtime call that launched it (same worker, same correlation id), else -1.

    Only GPU work (events on a GPU device that are not runtime calls) gets a launcher.
    """
    out = np.full(len(table), -1, dtype=np.int64)
    is_gpu = np.array([d.kind == "gpu" for d in table.devices] or [False], dtype=bool)
    work = np.flatnonzero(is_gpu[table.device] & (table.kind != Kind.RUNTIME) & (table.correlation >= 0))
    calls = np.flatnonzero((table.kind == Kind.RUNTIME) & (table.correlation >= 0))
    if not len(work) or not len(calls):
        return out
    worker = worker_of_events(table)
    n_workers = int(worker.max()) + 1

    def key(rows):
        return table.correlation[rows] * n_workers + worker[rows]

    found = match_correlation(key(calls), key(work))
    out[work[found >= 0]] = calls[found[found >= 0]]
    return out


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
    from rnnprof.analyzers.classify import classify
    from rnnprof.analyzers.comm import device_work_mask
    from rnnprof.analyzers.idle import idle_by_cause

    work, _ = device_work_mask(table, classify(table))
    shares = {}
    for device, idle in idle_by_cause(table, work).items():
        if device.kind != "gpu":
            continue
        mine = work & (table.device == table.devices.index(device))
        span = float((table.ts[mine] + np.maximum(table.dur[mine], 0)).max() - table.ts[mine].min())
        shares[device.label] = idle.total.host_wait_us / span if span > 0 else 0.0
    return shares


def launch_stats(table: EventTable, short_kernel_us: float = DEFAULT_SHORT_KERNEL_US,
                 host_wait_share: dict[str, float] | None = None) -> LaunchStats:
    """Launch statistics of the kernels in ``table``; ``host_wait_share`` (GPU label -> host-wait idle / span,
    ``host_wait_shares(table)`` when None) decides which GPUs are launch-bound."""
    launcher = launchers(table)
    is_gpu = np.array([d.kind == "gpu" for d in table.devices] or [False], dtype=bool)
    kernel_rows = np.flatnonzero(is_gpu[table.device] & np.isin(table.kind, (Kind.KERNEL, Kind.COMMUNICATION)))
    kernel_rows = kernel_rows[_on_streams(table, kernel_rows)]
    if not len(kernel_rows) or not (launcher[kernel_rows] >= 0).any():
        return LaunchStats(available=False, reason=NO_LAUNCHES, short_kernel_us=short_kernel_us)
    dur = np.maximum(table.dur[kernel_rows], 0.0)
    call = launcher[kernel_rows]
    has_call = call >= 0
    delay = np.where(has_call, table.ts[kernel_rows] - table.ts[np.maximum(call, 0)], np.nan)
    call_dur = np.where(has_call, table.dur[np.maximum(call, 0)], np.nan)
    shorter = has_call & (dur < call_dur)
    short = dur < short_kernel_us
    names, inverse = np.unique(table.name[kernel_rows], return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(names) + 1))
    by_name = []
    for k, code in enumerate(names):
        rows = order[bounds[k]:bounds[k + 1]]
        launched = rows[has_call[rows]]
        by_name.append(KernelLaunches(
            name=table.strings[code], kernels=len(rows), launched=len(launched), total_us=float(dur[rows].sum()),
            kernel_median_us=float(np.median(dur[rows])), launch_call_median_us=_median(call_dur[launched]),
            delay_median_us=_median(delay[launched]), delay_p95_us=_p95(delay[launched]),
            shorter_than_launch=int(shorter[rows].sum()), short=int(short[rows].sum())))
    by_name.sort(key=lambda k: (-k.total_us, k.name))
    by_host_op = _host_ops(table, launcher, kernel_rows, dur)
    shares = host_wait_shares(table) if host_wait_share is None else dict(host_wait_share)
    return LaunchStats(
        available=True, short_kernel_us=short_kernel_us, kernels=len(kernel_rows), launched=int(has_call.sum()),
        short=int(short.sum()), shorter_than_launch=int(shorter.sum()),
        delay_median_us=_median(delay[has_call]), delay_p95_us=_p95(delay[has_call]), by_name=tuple(by_name),
        by_host_op=by_host_op,
        host_wait_share=shares,
        launch_bound=tuple(sorted(d for d, share in shares.items() if share >= LAUNCH_BOUND_SHARE)))


def _on_streams(table: EventTable, rows: np.ndarray) -> np.ndarray:
    """Which of ``rows`` sit on a GPU stream lane (not the TF executor's launch lane)."""
    from rnnprof.analyzers.comm import STREAM_LANE_PREFIXES

    is_stream = np.array([s.startswith(STREAM_LANE_PREFIXES) for s in table.strings] or [False], dtype=bool)
    return is_stream[table.lane[rows]] | (table.kind[rows] == Kind.KERNEL)


def enclosing_host_ops(table: EventTable, rows: np.ndarray) -> np.ndarray:
    """For each event in ``rows``, the innermost host op (``Kind.HOST_OP``) on the same device and thread
    (lane) that contains it, else -1."""
    out = np.full(len(rows), -1, dtype=np.int64)
    ops = np.flatnonzero(table.kind == Kind.HOST_OP)
    if not len(rows) or not len(ops):
        return out
    lane_key = table.device.astype(np.int64) * (len(table.strings) + 1) + table.lane
    position = {int(r): k for k, r in enumerate(rows)}
    for key in np.unique(lane_key[rows]):
        mine = rows[lane_key[rows] == key]
        theirs = ops[lane_key[ops] == key]
        if not len(theirs):
            continue
        both = np.concatenate([theirs, mine])
        is_op = np.concatenate([np.ones(len(theirs), bool), np.zeros(len(mine), bool)])
        # By start; at one start, ops before the events they contain, longer ops first.
        order = np.lexsort((~is_op, -table.dur[both], table.ts[both]))
        stack: list[tuple[float, int]] = []
        for row, op in zip(both[order].tolist(), is_op[order].tolist()):
            start = table.ts[row]
            while stack and stack[-1][0] <= start:
                stack.pop()
            if op:
                stack.append((start + max(table.dur[row], 0.0), row))
            elif stack and stack[-1][0] >= start + max(table.dur[row], 0.0):
                out[position[row]] = stack[-1][1]
    return out


def _host_ops(table: EventTable, launcher: np.ndarray, kernel_rows: np.ndarray,
              dur: np.ndarray) -> tuple[HostOpLaunches, ...]:
    """Host ops that launched kernels, grouped by name, longest summed host time first."""
    launched = launcher[kernel_rows] >= 0
    calls = launcher[kernel_rows][launched]
    if not len(calls):
        return ()
    unique_calls, call_of = np.unique(calls, return_inverse=True)
    op_of_call = enclosing_host_ops(table, unique_calls)
    op = op_of_call[call_of]
    has_op = op >= 0
    if not has_op.any():
        return ()
    ops, op_index = np.unique(op[has_op], return_inverse=True)
    kernel_time = np.bincount(op_index, weights=dur[launched][has_op], minlength=len(ops))
    kernel_count = np.bincount(op_index, minlength=len(ops))
    host_time = np.maximum(table.dur[ops], 0.0)
    names, name_of = np.unique(table.name[ops], return_inverse=True)
    found = []
    for k, code in enumerate(names):
        mine = name_of == k
        found.append(HostOpLaunches(
            name=table.strings[code], ops=int(mine.sum()), kernels=int(kernel_count[mine].sum()),
            host_total_us=float(host_time[mine].sum()), host_median_us=float(np.median(host_time[mine])),
            kernels_median_us=float(np.median(kernel_time[mine])),
            longer_on_host=int((host_time[mine] > kernel_time[mine]).sum())))
    found.sort(key=lambda o: (-o.host_total_us, o.name))
    return tuple(found)
