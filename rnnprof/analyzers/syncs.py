"""Host calls that block until the GPU has finished, and the GPU idle time that follows them.

A synchronizing call (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``, ``cudaEventSynchronize``, a blocking
``cudaMemcpy``, and their HIP names) returns once the GPU work it waits for is done, so the host has launched
nothing new meanwhile: when it returns, the GPU's queue is empty and the GPU waits for whatever the host launches
next. That idle time is what the call costs: on each GPU of the caller's process, the idle gap in which the call
returns, from the later of the gap's start and the call's start (idle time before the call is not its doing)
to the next GPU work. A gap is counted once, however many calls return in it; a call returning while the GPU is
still busy (another stream's work) costs nothing. Removing the call lets the host launch ahead, which saves at
most this (a bound).

GPU busy time is ``device_work.device_work_mask``'s (kernels, copies, memsets, communication kernels). Calls
are counted in their own (host) step; the trace's steps, or one step (-1) without step markers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from rnnprof.analyzers import intervals
from rnnprof.analyzers.device_work import device_work_mask
from rnnprof.events import EventTable, Kind

SYNC_CALL = re.compile(r"^(?:cuda|hip)(?:(?:Device|Stream|Event)Synchronize|Memcpy(?:WithStream)?|Memcpy[23]D)$")


@dataclass(frozen=True)
class StepSyncs:
    """One GPU's synchronizing calls in one step (calls of its process)."""

    calls: int = 0
    host_us: float = 0.0  # the calls' own time on the host (blocked)
    idle_after_us: float = 0.0  # the GPU idle time they leave (see the module docstring)


def sync_stalls(table: EventTable | None, classes: np.ndarray) -> dict[tuple[str, int], StepSyncs]:
    """(GPU label, step) -> its process's synchronizing calls in that step and the GPU idle time they leave;
    only GPUs with work in the trace, only steps with calls. ``classes``: ``classify.classify(table)``."""
    if table is None or not len(table):
        return {}
    sync_names = np.array([bool(SYNC_CALL.match(s)) for s in table.strings] or [False])
    calls = np.flatnonzero((table.kind == Kind.RUNTIME) & sync_names[table.name])
    if not len(calls):
        return {}
    work, _ = device_work_mask(table, classes)
    end = table.ts + np.maximum(table.dur, 0.0)
    out: dict[tuple[str, int], StepSyncs] = {}
    for code, device in enumerate(table.devices):
        if device.kind != "gpu":
            continue
        mine = calls[np.array([table.devices[d].worker == device.worker for d in table.device[calls]], dtype=bool)]
        busy = np.flatnonzero(work & (table.device == code))
        if not len(mine) or not len(busy):
            continue
        busy_s, busy_e = intervals.merge(table.ts[busy], end[busy])
        idle = _idle_after(busy_s, busy_e, table.ts[mine], end[mine])
        for step in np.unique(table.step[mine]):
            rows = table.step[mine] == step
            out[(device.label, int(step))] = StepSyncs(int(rows.sum()), float(table.dur[mine][rows].sum()),
                                                       float(idle[rows].sum()))
    return out


def _idle_after(busy_s: np.ndarray, busy_e: np.ndarray, call_s: np.ndarray, call_e: np.ndarray) -> np.ndarray:
    """Per call, the idle time it leaves (module docstring), booked on the earliest-starting call of its gap."""
    # the gap a call returns in: after busy interval k (busy_e[k] <= return), before busy interval k + 1
    k = np.searchsorted(busy_e, call_e, side="right") - 1
    nxt = k + 1
    in_gap = (nxt < len(busy_s)) & ((k < 0) | (busy_e[np.maximum(k, 0)] <= call_e))
    in_gap &= call_e < busy_s[np.minimum(nxt, len(busy_s) - 1)]
    gap_start = np.where(k >= 0, busy_e[np.maximum(k, 0)], -np.inf)
    cost = np.zeros(len(call_s))
    for gap in np.unique(nxt[in_gap]):
        members = np.flatnonzero(in_gap & (nxt == gap))
        first = members[np.argmin(call_s[members])]
        cost[first] = max(busy_s[gap] - max(gap_start[first], call_s[first]), 0.0)
    return cost
