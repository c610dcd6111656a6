"""Who straggles: per step (or the whole trace), among the devices of one kind, the last to finish its work and
the last to start communicating, with their lags behind the median and the earliest."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rnnprof.analyzers.comm_result import DeviceComm, Straggler


def _straggler(step, devices, ends, comm_starts) -> Straggler | None:
    """The step's straggler among ``devices``, or None with fewer than two active; ``ends``/``comm_starts`` per device
    index (NaN where the device has no activity / communication)."""
    present = np.flatnonzero(~np.isnan(ends))
    if len(present) < 2:
        return None
    finish = ends[present]
    last = present[int(np.argmax(finish))]
    comm = comm_starts[present]
    has_comm = ~np.isnan(comm)
    last_comm = None
    comm_vs_median = comm_vs_earliest = None
    if has_comm.sum() >= 2:
        starts = comm[has_comm]
        last_comm = devices[present[has_comm][int(np.argmax(starts))]]
        comm_vs_median = float(starts.max() - np.median(starts))
        comm_vs_earliest = float(starts.max() - starts.min())
    return Straggler(
        step=step,
        devices=len(present),
        last_to_finish=devices[last],
        finish_lag_vs_median_us=float(finish.max() - np.median(finish)),
        finish_lag_vs_earliest_us=float(finish.max() - finish.min()),
        last_comm_start=last_comm,
        comm_start_lag_vs_median_us=comm_vs_median,
        comm_start_lag_vs_earliest_us=comm_vs_earliest,
    )


def find_stragglers(devices: Sequence[DeviceComm], step_values: np.ndarray) -> list[Straggler]:
    """Per step (or the whole trace), among devices of the same kind: a GPU is never compared with a CPU."""
    named = tuple(d.device for d in devices)

    def column(pick) -> tuple[np.ndarray, np.ndarray]:
        parts = [pick(d) for d in devices]
        ends = np.array([b.work_end_us if b else np.nan for b in parts], dtype=np.float64)
        comm = np.array([b.first_comm_us if b and b.first_comm_us is not None else np.nan for b in parts],
                        dtype=np.float64)
        return ends, comm

    if len(step_values) == 0:
        columns = [(None, column(lambda d: d.total))]
    else:
        columns = [(int(s), column(lambda d, s=int(s): d.steps.get(s))) for s in step_values]
    result = []
    for step, (ends, comm) in columns:
        for kind in sorted({d.kind for d in named}):
            peers = np.array([d.kind == kind for d in named])
            straggler = _straggler(step, named, np.where(peers, ends, np.nan), np.where(peers, comm, np.nan))
            if straggler:
                result.append(straggler)
    return result

