"""Speedup of a device-count sweep: pure arithmetic over measured runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from rnnprof.analyzers.throughput import TimingSummary


@dataclass(frozen=True)
class MemoryFigures:
    """Each rank's peak memory over a run's warm-up and timed steps, in bytes (None: not measured on that rank),
    how it was measured (``training.torch_memory.PEAK_SOURCES``), and each rank's model state (its parameters,
    gradients and optimizer states) after the timed steps."""

    peak_per_rank: tuple[int | None, ...]
    source: str
    model_state_per_rank: tuple[int | None, ...] = ()

    @property
    def largest_peak(self) -> int | None:
        return _largest(self.peak_per_rank)

    @property
    def largest_model_state(self) -> int | None:
        return _largest(self.model_state_per_rank)


def _largest(values) -> int | None:
    known = [b for b in values if b is not None]
    return max(known) if known else None


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
    fake_location: str | None = None  # ResNet: where its synthetic images were made
    trainer: str | None = None  # who trained it (--trainer): rnnprof or distribute (tf.distribute); None: rnnprof
    parallel: str | None = None  # --framework torch: how the ranks split the model (--parallel); None: TensorFlow
    layout: dict | None = None  # the mesh and a pipeline's stages (torch_layout.Layout.to_dict)
    memory: MemoryFigures | None = None  # --framework torch: each rank's peak memory and model state

    @property
    def mode(self) -> tuple:
        """What a table and a speedup baseline share: the variable update (and the image location, the trainer,
        the parallel mode)."""
        if self.trainer is None and self.parallel in (None, "ddp"):
            return self.variable_update, self.fake_location
        return self.variable_update, self.fake_location, self.trainer, self.parallel


@dataclass(frozen=True)
class ScaleRow:
    point: ScalePoint
    baseline_devices: int
    speedup: float  # throughput over throughput of the baseline run of the same mode
    baseline_workers: int | None = None


@dataclass(frozen=True)
class ScaleResult:
    rows: tuple[ScaleRow, ...]
    notes: tuple[str, ...]


def speedup_definition(unit: str = "words") -> str:
    return (f"speedup = {unit}/s of the run / {unit}/s of the baseline run (1 device, or the smallest device "
            f"count in the sweep; with workers, the fewest workers first) with the same variable update"
            + (" and image location" if unit == "images" else " (with --framework torch, the same --parallel)"))


SPEEDUP_DEFINITION = speedup_definition()


def speedup_table(points: Sequence[ScalePoint]) -> ScaleResult:
    """Group by mode (variable update, image location); each group's baseline is its 1-device run, else its
    smallest count."""
    rows, notes = [], []
    modes = list(dict.fromkeys(p.mode for p in points))
    for mode in modes:
        group = sorted((p for p in points if p.mode == mode), key=lambda p: p.size)
        base = group[0]
        if base.size != (1, 1):
            label = mode[0] if mode[1] is None else f"{mode[0]}, images made on {mode[1]}"
            label += f", trained by {mode[2]}" if len(mode) > 2 and mode[2] else ""
            if len(mode) > 3 and mode[3] not in (None, "ddp"):
                label = f"--parallel {mode[3]}"  # every --parallel mode trains one model together
            where = f" on {base.workers} worker(s)" if base.workers else ""
            notes.append(f"{label}: no 1-device run in the sweep; speedup is relative to "
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


@dataclass(frozen=True)
class TrainerRow:
    """One device count of one mode, trained by each trainer."""

    variable_update: str
    fake_location: str | None
    devices: int
    words_per_second: dict  # trainer -> words (images) per second
    words: dict  # trainer -> words (images) counted in the timed batches
    ratio: float | None  # words/s of the first trainer / words/s of the second


def trainer_ratio_definition(trainers: Sequence[str], unit: str = "words") -> str:
    return f"ratio = {unit}/s of {trainers[0]} / {unit}/s of {trainers[1]} on the same devices"


def trainer_table(points: Sequence[ScalePoint], trainers: Sequence[str]) -> tuple[TrainerRow, ...]:
    """Pair each (variable update, image location, device count) across the trainers, in sweep order."""
    keys = list(dict.fromkeys((p.variable_update, p.fake_location, p.devices) for p in points))
    rows = []
    for update, location, devices in keys:
        runs = {p.trainer: p for p in points
                if (p.variable_update, p.fake_location, p.devices) == (update, location, devices)}
        speed = {t: runs[t].timed.words_per_second for t in trainers if t in runs}
        ratio = speed[trainers[0]] / speed[trainers[1]] if len(trainers) > 1 and len(speed) == len(trainers) else None
        rows.append(TrainerRow(variable_update=update, fake_location=location, devices=devices,
                               words_per_second=speed, words={t: runs[t].timed.words for t in speed}, ratio=ratio))
    return tuple(rows)
