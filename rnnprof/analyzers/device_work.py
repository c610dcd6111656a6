"""What makes a device busy, and which runtime call launched each piece of GPU work.

The definitions every device analysis shares, below all of them (comm, idle, launches, copies,
collectives, opcount import from here, never the other way):

* ``device_work_mask``: the events that make their device busy. On a GPU only stream records count
  (kernels, memcpy, memset, NCCL kernels); a GPU with no stream record (step stats captured without the
  GPU tracer) falls back to its executor ops. A CPU device counts its ops; the host nothing. A CPU rank
  of a gloo job counts its host operators (``host_operator_devices``).
* ``kernel_masks``: the events that are CPU kernels and GPU kernels (``opcount.DEFINITIONS``).
* ``launchers``: for each piece of GPU work, the runtime call with its correlation id, within one worker
  (correlation ids restart in every process).
"""

from __future__ import annotations

import numpy as np

from rnnprof.analyzers.classify import DEVICE_WORK
from rnnprof.events import Device, EventTable, Kind, match_correlation
from rnnprof.names import CROSS_TASK_RECV_OPS

STREAM_LANE_PREFIXES = ("stream", "memcpy")
BASIS_STREAMS = "streams"
BASIS_EXECUTOR = "executor ops"
BASIS_OPS = "ops"
BASIS_HOST_OPS = "host operators"
CPU_KERNEL_KINDS = np.array([Kind.HOST_OP, Kind.COMMUNICATION], dtype=np.int8)
GPU_KERNEL_KINDS = np.array([Kind.KERNEL, Kind.COMMUNICATION], dtype=np.int8)


def device_work_mask(table: EventTable, classes: np.ndarray) -> tuple[np.ndarray, dict[int, str]]:
    """Events that make their device busy (see module docstring), and per device what they are.

    On a GPU only stream records count (kernels, memcpy, memset, NCCL kernels); a GPU with no
    stream record at all (step stats captured without the GPU tracer) falls back to its
    executor ops, with basis ``"executor ops"``. A CPU device counts its ops; the host nothing.
    """
    work = np.isin(classes, np.array([int(c) for c in DEVICE_WORK], dtype=np.int8))
    is_gpu = np.array([d.kind == "gpu" for d in table.devices] or [False], dtype=bool)
    is_host = np.array([d.kind == "host" for d in table.devices] or [False], dtype=bool)
    is_stream_lane = np.zeros(len(table.strings), dtype=bool)
    for code in np.unique(table.lane):
        is_stream_lane[code] = table.strings[code].startswith(STREAM_LANE_PREFIXES)
    on_stream = np.isin(table.kind, (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)) | (
        (table.kind == Kind.COMMUNICATION) & is_stream_lane[table.lane]
    )
    counts_stream = np.bincount(table.device[work & is_gpu[table.device] & on_stream], minlength=len(table.devices))
    mask = work & ~is_host[table.device]
    basis: dict[int, str] = {}
    host_operators = host_operator_devices(table)
    for code, device in enumerate(table.devices):
        if device.kind == "gpu":
            basis[code] = BASIS_STREAMS if counts_stream[code] else BASIS_EXECUTOR
        elif device in host_operators:
            basis[code] = BASIS_HOST_OPS
        elif device.kind != "host":
            basis[code] = BASIS_OPS
    stream_gpus = np.array([basis.get(c) == BASIS_STREAMS for c in range(len(table.devices))] or [False])
    # On a GPU with stream records, its executor ops are host-side launches.
    mask &= ~(stream_gpus[table.device] & ~on_stream)
    return mask, basis


def host_operator_devices(table: EventTable) -> set[Device]:
    """Devices whose activity is their host operators (CPU ranks), as the loaders listed them, merged tables included."""
    return set(table.metadata.host_operator_devices)


def worker_of_events(table: EventTable) -> np.ndarray:
    """Each event's worker (process) as a small int, so that correlation ids match within one process."""
    workers = sorted({d.worker for d in table.devices})
    code = np.array([workers.index(d.worker) for d in table.devices] or [0], dtype=np.int64)
    return code[table.device] if len(table) else np.zeros(0, dtype=np.int64)


def kernel_masks(table: EventTable) -> tuple[np.ndarray, np.ndarray]:
    """``(cpu, gpu)``: the events that are CPU kernels and GPU kernels (see ``opcount.DEFINITIONS``), steps aside."""
    on_gpu = np.isin(table.device, [i for i, d in enumerate(table.devices) if d.kind == "gpu"])
    lanes = np.array([s.startswith("stream:") for s in table.strings], dtype=bool)[table.lane]
    fetches = np.array([s in CROSS_TASK_RECV_OPS for s in table.strings] or [False], dtype=bool)[table.op_type]
    cpu = ~on_gpu & np.isin(table.kind, CPU_KERNEL_KINDS) & ~fetches  # a task's fetch from another is no op run
    return cpu, on_gpu & lanes & np.isin(table.kind, GPU_KERNEL_KINDS)


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
