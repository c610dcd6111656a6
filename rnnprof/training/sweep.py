"""The sweep behind ``rnnprof scale``: one fresh run per configuration, warmed up and timed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from rnnprof.analyzers.scale import ScalePoint
from rnnprof.models.config import WorkloadConfig
from rnnprof.training.cluster import running_cluster
from rnnprof.training.measure import StepCallback, measure
from rnnprof.training.runner import DataParallelRun
from rnnprof.training.distribute import DistributeRun

# progress(label, warmup, batches) -> the ``measure`` callback of one run (``reports.progress.StepProgress.run``)
Progress = Callable[[str, int, int], StepCallback]
# on_run(index, total, label, point): a configuration starts (point None) or ends with its point
# (``reports.progress.StepProgress.on_run``)
RunStages = Callable[[int, int, str, ScalePoint | None], None]


@dataclass(frozen=True)
class Sweep:
    points: tuple[ScalePoint, ...]
    device_kind: str  # of the last run; every run of a sweep sees the same devices
    words_definition: str
    model: str  # the workload's own name
    unit: str = "words"  # what throughput counts: words (the RNN models) or images (the ResNets)
    step_definition: str = "wall time of each timed session.run call; warm-up batches are excluded"


def no_progress(label: str, warmup: int, batches: int) -> None:
    return None


def no_stages(index: int, total: int, label: str, point: ScalePoint | None) -> None:
    return None


def _run(trainer: str | None, config: WorkloadConfig, cluster):
    """The training of one configuration: rnnprof's own (on the cluster, if any) or tf.distribute's."""
    if trainer == "distribute":
        return DistributeRun(config)
    return DataParallelRun(config, cluster=cluster)


def run_label(config: WorkloadConfig, trainer: str | None = None) -> str:
    """How a progress bar names one run of a sweep, e.g. ``replicated x2 on 2 worker(s) [distribute]``."""
    return f"{config.variable_update} x{config.devices}" + (
        f" on {config.workers} worker(s)" if config.workers else "") + (
        f" ({config.fake_location} images)" if config.fake_location else "") + (
        f" [{trainer}]" if trainer else "")


def sweep(configs: Sequence[WorkloadConfig], progress: Progress = no_progress,
          on_warning: Callable[[str], None] = lambda warning: None,
          trainers: Sequence[str | None] | None = None, on_run: RunStages = no_stages) -> Sweep:
    """Measure every config in order (a new graph and session each) and return one ``ScalePoint`` per config.
    ``trainers`` names, per config, who trains it: rnnprof (``DataParallelRun``, also for None) or
    distribute (``DistributeRun``, TensorFlow's tf.distribute). ``on_run`` hears each config start (before its
    graph is built) and end."""
    if not configs:
        raise ValueError("sweep needs at least one configuration")
    points = []
    for index, (config, trainer) in enumerate(zip(configs, trainers or [None] * len(configs))):
        on_run(index, len(configs), run_label(config, trainer), None)
        with running_cluster(config) as (spec, tasks), _run(trainer, config, spec) as training:
            for warning in training.warnings:
                on_warning(warning)
            device_kind = training.device_kind
            words_definition = training.workload.words_definition
            model = training.workload.name
            unit = getattr(training.workload, "unit", "words")
            m = measure(training, config.warmup, config.batches,
                        on_step=progress(run_label(config, trainer), config.warmup, config.batches))
        points.append(ScalePoint(
            variable_update=config.variable_update,
            all_reduce=config.all_reduce if config.variable_update == "replicated" else None,
            devices=config.devices,
            per_device_batch=config.per_device_batch(),
            total_batch=config.total_batch(),
            timed=m.timed,
            with_warmup=m.with_warmup if config.include_warmup else None,
            step_seconds=tuple(s.seconds for s in m.timed_steps),
            warmup_step_seconds=tuple(s.seconds for s in m.warmup_steps),
            workers=config.workers,
            processes=tuple(tasks),
            fake_location=config.fake_location,
            trainer=trainer,
        ))
        on_run(index, len(configs), run_label(config, trainer), points[-1])
    return Sweep(points=tuple(points), device_kind=device_kind, words_definition=words_definition, model=model,
                 unit=unit)
