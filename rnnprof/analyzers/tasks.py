"""Tasks of a TensorFlow gRPC cluster: each task's work, its transfer time from other tasks, the straggler worker.

A task is the process a device belongs to (``Device.worker``: ``/job:worker/replica:0/task:1``,
``/job:ps/replica:0/task:0``). Per task, over its devices (activity as ``rnnprof comm`` defines it):

* ``busy`` = union of its devices' activity; ``communication`` = union of its communication;
* ``cross_task`` = union of its fetches from other tasks (``RecvTensor`` for a tensor, ``RecvBuf`` for a
  collective's chunk; only transfers between tasks have them), ``cross_task_events`` their count and
  ``cross_task_bytes`` what they carried, where the trace says.

Straggler worker: per step, among the ``worker`` job's tasks, the one whose activity ends last, with its
lag behind the median and the earliest worker. A trace of one process (or of fewer than two tasks) has none.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rnnprof.analyzers.classify import EventClass, classify
from rnnprof.analyzers.device_work import device_work_mask
from rnnprof.analyzers.intervals import union_length
from rnnprof.events import EventTable
from rnnprof.events.names import CROSS_TASK_RECV_OPS

WORKER_JOB = "/job:worker/"


@dataclass(frozen=True)
class TaskComm:
    task: str
    devices: tuple[str, ...]
    busy_us: float
    communication_us: float
    cross_task_us: float
    cross_task_events: int

    def as_dict(self) -> dict:
        return {"task": self.task, "devices": list(self.devices), "busy_us": self.busy_us,
                "communication_us": self.communication_us, "cross_task_transfer_us": self.cross_task_us,
                "cross_task_transfers": self.cross_task_events}


@dataclass(frozen=True)
class StragglerWorker:
    step: int | None
    workers: int
    last_to_finish: str
    lag_vs_median_us: float
    lag_vs_earliest_us: float

    def as_dict(self) -> dict:
        return {"step": self.step, "workers": self.workers, "last_to_finish": self.last_to_finish,
                "lag_vs_median_us": self.lag_vs_median_us, "lag_vs_earliest_us": self.lag_vs_earliest_us}


@dataclass(frozen=True)
class TaskReport:
    tasks: tuple[TaskComm, ...]
    stragglers: tuple[StragglerWorker, ...]

    def as_dict(self) -> dict:
        return {"tasks": [t.as_dict() for t in self.tasks],
                "straggler_workers": [s.as_dict() for s in self.stragglers]}


def analyze_tasks(table: EventTable, comm_patterns=()) -> TaskReport:
    """Per task figures and straggler workers; empty when the trace holds fewer than two tasks."""
    names = sorted({d.worker for d in table.devices if d.worker.startswith("/job:")})
    if len(names) < 2:
        return TaskReport((), ())
    classes = classify(table, tuple(comm_patterns))
    work, _ = device_work_mask(table, classes)
    task_of = np.array([names.index(d.worker) if d.worker in names else -1 for d in table.devices], dtype=np.int64)
    event_task = task_of[table.device]
    end = table.ts + np.maximum(table.dur, 0.0)
    is_recv = np.zeros(len(table.strings), dtype=bool)
    for code, text in enumerate(table.strings):
        is_recv[code] = text in CROSS_TASK_RECV_OPS
    fetch = work & (is_recv[table.op_type] | is_recv[table.name])
    comm = work & (classes == EventClass.COMMUNICATION)
    tasks = []
    for k, name in enumerate(names):
        mine = event_task == k
        rows, comm_rows, fetch_rows = mine & work, mine & comm, mine & fetch
        if not rows.any():
            continue
        devices = tuple(sorted({table.devices[d].label for d in np.unique(table.device[rows])}))
        tasks.append(TaskComm(task=name, devices=devices, busy_us=union_length(table.ts[rows], end[rows]),
                              communication_us=union_length(table.ts[comm_rows], end[comm_rows]),
                              cross_task_us=union_length(table.ts[fetch_rows], end[fetch_rows]),
                              cross_task_events=int(fetch_rows.sum())))
    return TaskReport(tuple(tasks), tuple(_straggler_workers(table, names, event_task, work, end)))


def _straggler_workers(table, names, event_task, work, end) -> list[StragglerWorker]:
    workers = [k for k, name in enumerate(names) if name.startswith(WORKER_JOB)]
    if len(workers) < 2:
        return []
    steps = sorted({int(s) for s in np.unique(table.step[work]) if s >= 0}) or [None]
    result = []
    for step in steps:
        in_step = work if step is None else work & (table.step == step)
        ends = {}
        for k in workers:
            rows = in_step & (event_task == k)
            if rows.any():
                ends[names[k]] = float(end[rows].max())
        if len(ends) < 2:
            continue
        last = max(ends, key=ends.get)
        values = np.array(list(ends.values()))
        result.append(StragglerWorker(step=step, workers=len(ends), last_to_finish=last,
                                      lag_vs_median_us=float(values.max() - np.median(values)),
                                      lag_vs_earliest_us=float(values.max() - values.min())))
    return result
