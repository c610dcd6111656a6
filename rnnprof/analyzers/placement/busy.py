"""Interval arithmetic on an ``EventTable``: busy time per device and step, idle overlap."""

from __future__ import annotations

import numpy as np

from rnnprof.analyzers import intervals
from rnnprof.events import Device, EventTable, Kind

from rnnprof.events.names import TRANSFER_OPS

ALL_STEPS = -1  # the key used when the trace does not number its steps


def union_array(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """``intervals.merge`` as an (n, 2) array of disjoint, sorted intervals (empty ones dropped)."""
    merged_starts, merged_ends = intervals.merge(starts, ends)
    return np.column_stack([merged_starts, merged_ends])


def length(intervals: np.ndarray) -> float:
    return float((intervals[:, 1] - intervals[:, 0]).sum()) if len(intervals) else 0.0


def minus(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The interval array ``a`` less the union of ``b`` (``intervals.subtract``), as an (n, 2) array."""
    pieces_s, pieces_e, _ = intervals.subtract(a[:, 0], a[:, 1], b[:, 0], b[:, 1])
    return np.column_stack([pieces_s, pieces_e]) if len(pieces_s) else np.zeros((0, 2))


def step_keys(events: EventTable) -> list[int]:
    """Step numbers in the trace, or ``[ALL_STEPS]`` when it does not number them."""
    steps = events.steps()
    return [int(s) for s in steps] if len(steps) else [ALL_STEPS]


def in_step(events: EventTable, step: int) -> np.ndarray:
    if step == ALL_STEPS:
        return np.ones(len(events), dtype=bool)
    return events.step == step


def compute_mask(events: EventTable) -> np.ndarray:
    """Events that are a device doing work: kernels on accelerators, ops elsewhere.

    Receives and collectives are left out: their recorded span includes waiting for the peer.
    On a device that has kernel events, its host-side op events only launch them and are left out too.
    """
    transfer_codes = [events.code_of(op) for op in TRANSFER_OPS]
    mask = np.isin(events.kind, [int(Kind.HOST_OP), int(Kind.KERNEL)])
    mask &= ~np.isin(events.op_type, [c for c in transfer_codes if c >= 0])
    for code, device in enumerate(events.devices):
        on_device = events.device == code
        if (on_device & (events.kind == int(Kind.KERNEL))).any():
            mask &= ~(on_device & (events.kind == int(Kind.HOST_OP)))
    return mask


def busy_intervals(events: EventTable, device: Device, mask: np.ndarray) -> np.ndarray:
    if device not in events.devices:
        return np.zeros((0, 2))
    sel = mask & (events.device == events.devices.index(device))
    return union_array(events.ts[sel], events.end[sel])


def compute_devices(events: EventTable) -> list[Device]:
    """Devices that run a model's work: GPUs when the trace has any, else CPU devices."""
    return compute_devices_among(with_compute(events))


def with_compute(events: EventTable) -> tuple[Device, ...]:
    """The devices with compute events (``compute_mask``), in code order."""
    return tuple(events.devices[int(c)] for c in np.unique(events.device[compute_mask(events)]))


def compute_devices_among(present) -> list[Device]:
    """``compute_devices`` of the devices with compute events ``present`` (``with_compute``): GPUs where there are
    any, else CPU devices."""
    gpus = sorted(d for d in present if d.kind == "gpu")
    return gpus or sorted(d for d in present if d.kind in ("cpu", "host"))


def saturated(events: EventTable, mask: np.ndarray, cores: int) -> np.ndarray:
    """The intervals during which ``cores`` or more of the ``mask`` events run at once (every core busy, as far
    as the events show: one op occupies one thread), as an (n, 2) array."""
    starts, ends = events.ts[mask], events.end[mask]
    if not len(starts):
        return np.zeros((0, 2))
    times, level = intervals.concurrency(starts, ends)
    full = np.flatnonzero(level >= cores)
    return union_array(times[full], times[full + 1])
