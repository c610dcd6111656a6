"""The traced runs of a sweep, read for ``rnnprof.analyzers.explain``: a sweep directory made by
``rnnprof scale --explain`` (its ``runs/``), or run directories, Kineto rank folders or trace files, one per
device count.

    SWEEP_DIR/runs/<mode>-<n>dev/       a run directory per configuration (``rnnprof trace``'s layout)
    SWEEP_DIR/explain.json              the explanation ``rnnprof explain --json`` prints
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from rnnprof.analyzers.classify import classify
from rnnprof.analyzers.comm import analyze_comm
from rnnprof.analyzers.explain import ExplainInput, more_work_us
from rnnprof.analyzers.throughput import is_seconds
from rnnprof.errors import InputError, UsageError
from rnnprof.events import Manifest
from rnnprof.rundir.manifest import read_manifest
from rnnprof.rundir.sweep import RUNS_DIR, is_sweep_dir
from rnnprof.traces import load_aligned, load_events
from rnnprof.traces.rank_folder import job_of

EXPECTED = ("a sweep directory made by rnnprof scale --explain, or one run directory, Kineto rank folder or "
            "trace file per device count")
# The workload's batch setting -> the kind of scaling it is.
SCALING_OF_BATCH = {"per-device": "weak", "total": "strong"}


@dataclass
class ExplainInputs:
    inputs: list = field(default_factory=list)  # ExplainInput
    scalings: set = field(default_factory=set)  # from the runs' configuration
    device_kinds: set = field(default_factory=set)
    tables: list = field(default_factory=list)  # for the left-out counts


def sweep_runs(path: str | Path) -> list[Path]:
    """The run directories of a sweep directory (none: an ``InputError``)."""
    runs = sorted(p for p in (Path(path) / RUNS_DIR).glob("*") if (p / "manifest.json").is_file())
    if not runs:
        raise InputError(path, f"no traced runs in {RUNS_DIR}/ (the sweep was made without --explain)", EXPECTED)
    return runs


def load_inputs(paths: Sequence[str], devices: Sequence[int] | None = None) -> ExplainInputs:
    """Every run, analysed by ``analyze_comm``; ``devices`` states N per path where it cannot be read."""
    if len(paths) == 1 and is_sweep_dir(paths[0]):
        if devices:
            raise UsageError("--devices applies to runs named one by one, not to a sweep directory")
        paths = [str(p) for p in sweep_runs(paths[0])]
    if devices and len(devices) != len(paths):
        raise UsageError(f"--devices names {len(devices)} device count(s) for {len(paths)} run(s); give one per run")
    loaded = ExplainInputs()
    for i, path in enumerate(paths):
        _load_one(Path(path), devices[i] if devices else None, loaded)
    return loaded


def _load_one(path: Path, stated: int | None, loaded: ExplainInputs) -> None:
    if not path.exists():
        raise InputError(path, "does not exist", EXPECTED)
    timed_us, timed_steps, mode, n = None, (), "", stated
    if path.is_dir() and (path / "manifest.json").is_file():
        manifest = read_manifest(path)
        config = manifest.config
        run_devices = _run_devices(manifest)
        if n is None:
            n = run_devices
        mean = manifest.throughput.get("mean_step_seconds")
        if isinstance(mean, (int, float)) and mean > 0:
            timed_us = mean * 1e6
        timed_steps = _timed_steps_us(manifest)
        mode = str(config.get("variable_update") or "")
        if config.get("fake_location"):
            mode += f", {config['fake_location']} images"
        if config.get("batch_scaling") in SCALING_OF_BATCH:
            loaded.scalings.add(SCALING_OF_BATCH[config["batch_scaling"]])
        kinds = {d.kind for d in manifest.devices}
        loaded.device_kinds |= {k for k in kinds | {manifest.device_kind} if k}
        table = load_events(str(path))
    else:
        job = job_of([str(path)])
        if job is not None:
            if n is None:
                n = len(job.files)
            table = load_aligned([str(f.path) for f in job.files], "none")
        else:
            table = load_events(str(path))
            if n is None:
                n = len({d for d in table.devices if d.kind != "host"}) or None
    if not n:
        raise InputError(path, "cannot tell how many devices the run used", f"{EXPECTED}; state it with --devices")
    classes = classify(table)
    report = analyze_comm(table, classes=classes)
    if not report.devices:
        raise InputError(path, "no device activity (no kernels, memcpys or ops on a device)", EXPECTED)
    loaded.tables.append(table)
    loaded.inputs.append(ExplainInput(devices=n, comm=report, timed_step_us=timed_us, label=str(path), mode=mode,
                                      timed_steps_us=timed_steps, more_work_us=more_work_us(table, classes)))


def _timed_steps_us(manifest: Manifest) -> tuple[float, ...]:
    """The run's timed steps (manifest ``step_times.timed``, seconds) in µs; () where any is not a finite duration."""
    timed = manifest.step_times.timed
    if not all(is_seconds(t) for t in timed):
        return ()
    return tuple(float(t) * 1e6 for t in timed)


def _run_devices(manifest: Manifest) -> int | None:
    """N of a run directory: its world size (torch), else devices per worker times the workers."""
    if manifest.world_size is not None:
        return manifest.world_size
    devices = manifest.config.get("devices")
    if not isinstance(devices, int):
        return len(manifest.devices) or None
    workers = manifest.config.get("workers")
    return devices * (workers if isinstance(workers, int) and workers > 0 else 1)
