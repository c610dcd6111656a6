"""The sweep behind ``rnnprof scale``: one fresh run per configuration, warmed up and timed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from rnnprof.analyzers.scale import ScalePoint
from rnnprof.workload import IMAGE_MODELS, WorkloadConfig
from rnnprof.training.cluster import running_cluster
from rnnprof.training.measure import StepCallback, measure
from rnnprof.training.runner import DataParallelRun

# ``Sweep.step_definition`` of a traced sweep
_TRACED_STEP_DEFINITION = ("wall time of each timed step, before any traced step (the traced steps follow the "
                           "timed ones)")

# progress(label, warmup, batches) -> the ``measure`` callback of one run (``reports.progress.StepProgress.run``)
Progress = Callable[[str, int, int], StepCallback]


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


def _run(trainer: str | None, config: WorkloadConfig, cluster):
    """The training of one configuration: rnnprof's own (on the cluster, if any) or tf.distribute's."""
    if trainer == "distribute":
        from rnnprof.training.distribute import DistributeRun

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
          trainers: Sequence[str | None] | None = None) -> Sweep:
    """Measure every config in order (a new graph and session each) and return one ``ScalePoint`` per config.
    ``trainers`` names, per config, who trains it: rnnprof (``DataParallelRun``, also for None) or
    distribute (``DistributeRun``, TensorFlow's tf.distribute)."""
    if not configs:
        raise ValueError("sweep needs at least one configuration")
    points = []
    for config, trainer in zip(configs, trainers or [None] * len(configs)):
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
    return Sweep(points=tuple(points), device_kind=device_kind, words_definition=words_definition, model=model,
                 unit=unit)


def traced_sweep(configs: Sequence, out, trace_steps: int, command: Sequence[str] = (),
                 on_warning: Callable[[str], None] = lambda warning: None, framework: str = "tensorflow") -> Sweep:
    """``sweep``, each configuration captured into its own run directory under ``out/runs`` the way ``rnnprof
    trace`` captures: warm-up, the timed steps (the figures of the sweep), and only then ``trace_steps`` traced
    steps; the timed figures never include a traced step. ``configs``: ``WorkloadConfig`` (TensorFlow) or
    ``TorchOptions`` (``framework="torch"``)."""
    from rnnprof.rundir.manifest import read_manifest

    if not configs:
        raise ValueError("sweep needs at least one configuration")
    points = []
    for options in configs:
        config = options.workload if framework == "torch" else options
        done = _capture(options, _traced_run_dir(out, config), trace_steps, command, on_warning, framework)
        manifest = read_manifest(done.path)
        points.append(_traced_point(config, done.timed, manifest, framework))
    throughput = manifest.get("throughput") or {}  # the last run's, as its device kind and model: all runs share them
    return Sweep(points=tuple(points), device_kind=done.device_kind,
                 words_definition=throughput.get("words_definition", ""), model=config.model,
                 unit="images" if config.model in IMAGE_MODELS else "words",
                 step_definition=_TRACED_STEP_DEFINITION)


def _traced_run_dir(out, config):
    """Where ``traced_sweep`` captures one configuration: its run directory under ``out/runs``."""
    from pathlib import Path

    from rnnprof.rundir.sweep import RUNS_DIR, run_dir_name

    return Path(out) / RUNS_DIR / run_dir_name(config.variable_update, config.devices, config.workers,
                                               getattr(config, "fake_location", None))


def _capture(options, path, trace_steps: int, command: Sequence[str], on_warning: Callable[[str], None],
             framework: str):
    """One configuration captured into ``path`` as ``rnnprof trace`` captures it, its traced steps after its
    timed ones; the capture's summary."""
    if framework == "torch":
        from rnnprof.recording.torch_workload import capture_torch_workload

        return capture_torch_workload(options, path, False, command, trace_steps)
    from rnnprof.recording.workload import capture_workload

    return capture_workload(options, path, False, command, trace_steps, on_warning=on_warning)


def _traced_point(config, timed, manifest: dict, framework: str) -> ScalePoint:
    """The sweep's point of one captured configuration: ``timed`` (its timed steps' summary) and the step times
    and throughput its run directory's manifest records."""
    from rnnprof.analyzers.throughput import TimingSummary

    times = manifest.get("step_times") or {}
    with_warmup = (manifest.get("throughput") or {}).get("with_warmup")
    return ScalePoint(
        variable_update=config.variable_update,
        all_reduce=(config.all_reduce if framework != "torch" else f"DDP {manifest.get('backend')}")
        if config.variable_update == "replicated" else None,
        devices=config.devices,
        per_device_batch=config.per_device_batch(),
        total_batch=config.total_batch(),
        timed=timed,
        with_warmup=TimingSummary(**with_warmup) if isinstance(with_warmup, dict) else None,
        step_seconds=tuple(times.get("timed") or ()),
        warmup_step_seconds=tuple(times.get("warmup") or ()),
        workers=config.workers,
        fake_location=getattr(config, "fake_location", None),
    )
