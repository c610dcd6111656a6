"""Each cluster task's clock against the chief's, by a round-trip exchange through the TF runtime.

A ``tf.timestamp()`` op placed on a task reads that task's wall clock (the clock its step_stats use).
The chief notes its own wall clock just before and after running it: the remote reading belongs
somewhere inside ``[before, after]``, so ``offset = remote - (before + after) / 2`` with an uncertainty
of half the round trip. Of several exchanges the one with the shortest round trip is kept (as NTP
does). Subtracting a task's offset from its timestamps puts them on the chief's clock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from rnnprof.frameworks.tensorflow import import_tensorflow
from rnnprof.training.cluster import task_name

EXCHANGES = 5


@dataclass(frozen=True)
class MeasuredOffset:
    task: str  # /job:worker/replica:0/task:1
    offset_us: float  # the task's clock minus the chief's
    uncertainty_us: float  # half the round trip of the exchange

    def as_dict(self) -> dict:
        return {"task": self.task, "offset_us": self.offset_us, "uncertainty_us": self.uncertainty_us}


def clock_ops(cluster) -> dict:
    """One ``tf.timestamp()`` op on CPU:0 of every task of ``cluster`` (built into the default graph)."""

    tf = import_tensorflow()
    ops = {}
    with tf.compat.v1.name_scope("clock"):
        for job, index, _ in cluster.tasks():
            task = task_name(job, index)
            with tf.device(f"{task}/device:CPU:0"):
                ops[task] = tf.timestamp(name=f"{job}_{index}")
    return ops


def exchange(run, clock=time.time) -> tuple[float, float]:
    """One exchange: ``(offset_us, uncertainty_us)`` of the clock ``run()`` returns (seconds) against ``clock``."""
    before = clock()
    remote = float(run())
    after = clock()
    return (remote - (before + after) / 2) * 1e6, (after - before) / 2 * 1e6


def measure_offsets(session, ops: dict, exchanges: int = EXCHANGES, clock=time.time) -> list[MeasuredOffset]:
    """Every task's offset: the exchange with the shortest round trip out of ``exchanges``."""
    found = []
    for task, op in ops.items():
        best = min((exchange(lambda: session.run(op), clock) for _ in range(exchanges)), key=lambda r: r[1])
        found.append(MeasuredOffset(task, *best))
    return found


def manifest_offsets(start: list[MeasuredOffset], end: list[MeasuredOffset] = ()) -> dict[str, dict]:
    """The manifest's ``clock_offsets``, per task: ``offset_us`` and ``uncertainty_us`` measured at the start
    of capture (before any step is traced), ``applied_us``, what the timelines subtract: the offset where it
    exceeds its uncertainty, else 0 (a smaller offset is not resolved by the exchange; tasks on the chief's
    host share its clock), and ``end``, the exchange after the traced steps, whose difference from the
    start (``drift_us``) shows how far the clocks moved during the capture."""
    result = {}
    ends = {o.task: o for o in end}
    for first in start:
        last = ends.get(first.task)
        resolved = abs(first.offset_us) > first.uncertainty_us
        result[first.task] = {"offset_us": first.offset_us, "uncertainty_us": first.uncertainty_us,
                              "applied_us": first.offset_us if resolved else 0.0,
                              "end": last.as_dict() if last else None,
                              "drift_us": last.offset_us - first.offset_us if last else None}
    return result
