"""``scale --explain``'s sweep: each configuration timed, then captured into its own run directory the way
``rnnprof trace`` captures it. It wraps the training sweep (``training.sweep``) with the recording code, so it
sits above both."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from rnnprof.analyzers.scale import ScalePoint
from rnnprof.analyzers.throughput import TimingSummary
from rnnprof.events import Manifest
from rnnprof.recording.torch_workload import capture_torch_workload
from rnnprof.recording.workload import capture_workload
from rnnprof.rundir.manifest import read_manifest
from rnnprof.rundir.sweep import RUNS_DIR, run_dir_name
from rnnprof.training.sweep import RunStages, Sweep, no_stages, run_label
from rnnprof.models.config import IMAGE_MODELS

# ``Sweep.step_definition`` of a traced sweep
_TRACED_STEP_DEFINITION = ("wall time of each timed step, before any traced step (the traced steps follow the "
                           "timed ones)")


def traced_sweep(configs: Sequence, out, trace_steps: int, command: Sequence[str] = (),
                 on_warning: Callable[[str], None] = lambda warning: None, framework: str = "tensorflow",
                 on_run: RunStages = no_stages) -> Sweep:
    """``sweep``, each configuration captured into its own run directory under ``out/runs`` the way ``rnnprof
    trace`` captures: warm-up, the timed steps (the figures of the sweep), and only then ``trace_steps`` traced
    steps; the timed figures never include a traced step. ``configs``: ``WorkloadConfig`` (TensorFlow) or
    ``TorchOptions`` (``framework="torch"``); ``on_run`` hears each configuration start and end."""
    if not configs:
        raise ValueError("sweep needs at least one configuration")
    points = []
    for index, options in enumerate(configs):
        config = options.workload if framework == "torch" else options
        on_run(index, len(configs), f"{run_label(config)}, traced", None)
        done = _capture(options, _traced_run_dir(out, config), trace_steps, command, on_warning, framework)
        manifest = read_manifest(done.path)
        points.append(_traced_point(config, done.timed, manifest, framework))
        on_run(index, len(configs), f"{run_label(config)}, traced", points[-1])
    throughput = manifest.throughput  # the last run's, as its device kind and model: all runs share them
    return Sweep(points=tuple(points), device_kind=done.device_kind,
                 words_definition=throughput.get("words_definition", ""), model=config.model,
                 unit="images" if config.model in IMAGE_MODELS else "words",
                 step_definition=_TRACED_STEP_DEFINITION)


def _traced_run_dir(out, config):
    """Where ``traced_sweep`` captures one configuration: its run directory under ``out/runs``."""
    return Path(out) / RUNS_DIR / run_dir_name(config.variable_update, config.devices, config.workers,
                                               getattr(config, "fake_location", None))


def _capture(options, path, trace_steps: int, command: Sequence[str], on_warning: Callable[[str], None],
             framework: str):
    """One configuration captured into ``path`` as ``rnnprof trace`` captures it, its traced steps after its
    timed ones; the capture's summary."""
    if framework == "torch":
        return capture_torch_workload(options, path, False, command, trace_steps)
    return capture_workload(options, path, False, command, trace_steps, on_warning=on_warning)


def _traced_point(config, timed, manifest: Manifest, framework: str) -> ScalePoint:
    """The sweep's point of one captured configuration: ``timed`` (its timed steps' summary) and the step times
    and throughput its run directory's manifest records."""
    with_warmup = manifest.throughput.get("with_warmup")
    return ScalePoint(
        variable_update=config.variable_update,
        all_reduce=(config.all_reduce if framework != "torch" else f"DDP {manifest.backend}")
        if config.variable_update == "replicated" else None,
        devices=config.devices,
        per_device_batch=config.per_device_batch(),
        total_batch=config.total_batch(),
        timed=timed,
        with_warmup=TimingSummary(**with_warmup) if isinstance(with_warmup, dict) else None,
        step_seconds=manifest.step_times.timed,
        warmup_step_seconds=manifest.step_times.warmup,
        workers=config.workers,
        fake_location=getattr(config, "fake_location", None),
    )
