"""Speedup of a device-count sweep: pure arithmetic over measured runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from rnnprof.analyzers.throughput import TimingSummary


@dataclass(frozen=True)
class ScalePoint:
    """One measured run of the sweep."""

    variable_update: str
    all_reduce: str | None  # only meaningful for replicated
    devices: int
    per_device_batch: int
    total_batch: int
    timed: TimingSummary
    with_warmup: TimingSummary | None = None
    step_seconds: tuple[float, ...] = ()
    warmup_step_seconds: tuple[float, ...] = ()
    eval_timed: TimingSummary | None = None  # forward-only batches after the timed ones (--eval)
    workers: int | None = None  # worker tasks of a gRPC cluster (``devices`` on each); None: one process
    processes: tuple = ()  # the cluster's tasks: {"job", "task", "address", "host", "pid"}

    @property
    def size(self) -> tuple[int, int]:
        """What a sweep orders its runs by: (worker tasks, devices per worker)."""
        return (self.workers or 1, self.devices)


@dataclass(frozen=True)
class ScaleRow:
    point: ScalePoint
    baseline_devices: int
    speedup: float
    baseline_workers: int | None = None  # words/s over words/s of the baseline run of the same variable update


@dataclass(frozen=True)
class ScaleResult:
    rows: tuple[ScaleRow, ...]
    notes: tuple[str, ...]


SPEEDUP_DEFINITION = ("speedup = words/s of the run / words/s of the baseline run (1 device, or the "
                      "smallest device count in the sweep; with workers, the fewest workers first) "
                      "with the same variable update")


def speedup_table(points: Sequence[ScalePoint]) -> ScaleResult:
    """Group by variable update; each group's baseline is its 1-device run, else its smallest count."""
    rows, notes = [], []
    modes = list(dict.fromkeys(p.variable_update for p in points))
    for mode in modes:
        group = sorted((p for p in points if p.variable_update == mode), key=lambda p: p.size)
        base = group[0]
        if base.size != (1, 1):
            where = f" on {base.workers} worker(s)" if base.workers else ""
            notes.append(f"{mode}: no 1-device run in the sweep; speedup is relative to "
                         f"{base.devices} devices{where}")
        for point in group:
            rows.append(ScaleRow(point=point, baseline_devices=base.devices, baseline_workers=base.workers,
                                 speedup=point.timed.words_per_second / base.timed.words_per_second))
    return ScaleResult(rows=tuple(rows), notes=tuple(notes))


def shared_cores_note(device_kind: str, host_cores: int | None) -> str | None:
    """Logical CPU devices split one machine's cores; their ratio measures overhead, not scaling.
    So do worker processes on one machine without GPUs (``cpu-processes``)."""
    if device_kind == "cpu-processes":
        cores = f"the same {host_cores} CPU cores" if host_cores else "the same CPU cores"
        return (f"devices are processes sharing {cores} (each with its share of the threads): "
                "the speedup ratio is not a scaling result (it shows the cost of splitting work across processes)")
    if device_kind != "logical-cpu":
        return None
    cores = f"the same {host_cores} CPU cores" if host_cores else "the same CPU cores"
    return (f"devices are logical CPU devices sharing {cores} and one thread pool: "
            "the speedup ratio is not a scaling result (it shows the cost of splitting work across towers)")
