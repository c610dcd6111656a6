"""The manifest of a run directory, written and read in one place.

``new_manifest`` is what a capture starts with (status ``running``); ``RunWriter``
(``rnnprof.rundir.writer``) updates and saves it. ``read_manifest`` is the one reader: the JSON checked
once into an ``events.Manifest`` (``read_manifest_json`` gives the object itself to a capture that
rewrites it); ``run_notes`` says what a reader of a partial run's figures must know.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import socket
import sys
from pathlib import Path
from typing import Iterable

import msgspec

from rnnprof import limits
from rnnprof.events import names
from rnnprof.version import __version__
from rnnprof.errors import InputError
from rnnprof.events import Manifest
from rnnprof import rundir
from rnnprof.paths import broken



def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).astimezone().isoformat(timespec="seconds")


def new_manifest(command: Iterable[str] | None = None, config: dict | None = None) -> dict:
    """The manifest of a run that has just started: every field present, nothing captured yet."""
    return {
        "format": rundir.MANIFEST_FORMAT,
        "version": rundir.MANIFEST_VERSION,
        "status": rundir.STATUS_RUNNING,
        "created": now(),
        "command": list(command if command is not None else sys.argv),
        "versions": {"rnnprof": __version__, "tensorflow": _tensorflow_version(),
                     "python": platform.python_version()},
        "host": socket.gethostname(),
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform()},
        "config": dict(config or {}),
        "session_config": {},
        "devices": [],
        "throughput": {},
        names.STEP_TIMES: {"warmup": [], "timed": []},
        names.STEP_CPU: {"warmup": [], "timed": []},
        "traced_steps": [],
        "profiled_steps": [],
        "captured": {"timelines": [], "xplane": [], "graphs": [], "run_metadata": []},
    }


def session_config_fields(proto) -> dict:
    """The manifest's ``session_config``: the settings of a ``tf.compat.v1.ConfigProto`` the analyses read."""
    return {"inter_op_threads": proto.inter_op_parallelism_threads,
            "intra_op_threads": proto.intra_op_parallelism_threads,
            "allow_soft_placement": proto.allow_soft_placement}


def read_manifest_json(path: Path) -> dict:
    """The JSON object of the run directory ``path``'s manifest, unchecked beyond that: for a capture that
    rewrites it (every key kept); readers take ``read_manifest``."""
    manifest_path = Path(path) / rundir.MANIFEST
    try:
        manifest = json.loads(limits.read_bytes(manifest_path))
    except (ValueError, RecursionError) as exc:
        raise InputError(manifest_path, f"unreadable manifest ({exc})", "a JSON object") from None
    if not isinstance(manifest, dict):
        raise InputError(manifest_path, "manifest is not a JSON object", "a JSON object")
    return manifest


def read_manifest(path: Path) -> Manifest:
    """The run directory ``path``'s manifest, every field checked; a field of the wrong type or an entry without
    a required field is an ``InputError`` that names it (``$.devices[1]``)."""
    return parse_manifest(read_manifest_json(path), Path(path) / rundir.MANIFEST)


def parse_manifest(data: dict, source: object) -> Manifest:
    """``data`` (a manifest's JSON object, read from ``source``) as a ``Manifest``; ``InputError`` as ``read_manifest``."""
    try:
        return Manifest.from_dict(data)
    except msgspec.ValidationError as exc:
        raise InputError(source, f"malformed manifest: {str(exc).splitlines()[0]}",
                         "the fields of docs/run-directory.md, each of its type") from None


def is_step(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31


def listed_timelines(path: Path, manifest: Manifest) -> list[Path]:
    """Timelines the manifest names (any string or step list that refers to them), else those on disk."""
    names: set[str] = set()

    def walk(value, key=""):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, k)
        elif isinstance(value, list):
            for v in value:
                walk(v, key)
        elif isinstance(value, str) and rundir.timeline_step(value) is not None:
            names.add(str(Path(rundir.TIMELINES_DIR) / Path(value).name))
        elif is_step(value) and key in ("traced_steps", "trace_steps"):
            names.add(str(Path(rundir.TIMELINES_DIR) / rundir.timeline_name(value)))

    walk(manifest.as_dict())
    if not names:
        names = {str(p.relative_to(path)) for p in (path / rundir.TIMELINES_DIR).glob("step-*.trace.json.gz")}
    return sorted((path / n for n in names), key=lambda p: rundir.timeline_step(p.name))


def listed_torch_traces(path: Path, manifest: Manifest) -> list[Path]:
    """The ranks' Kineto traces the manifest lists (``Manifest.rank_traces``), else those on disk; only paths
    inside ``torch/``."""
    found = {Path(rundir.TORCH_TRACES_DIR) / Path(n).name for n in manifest.rank_traces}
    if not found:
        found = {p.relative_to(path) for p in (path / rundir.TORCH_TRACES_DIR).glob("*.json.gz")
                 if not p.name.startswith(".")}
    return sorted(path / n for n in found)


def listed_traces(path: Path, manifest: Manifest) -> list[Path]:
    """The run's per-step timelines, or a PyTorch run's rank traces."""
    return listed_torch_traces(path, manifest) if manifest.is_torch else listed_timelines(path, manifest)


def missing_timelines(path: Path, manifest: Manifest) -> list[str]:
    """The listed timelines (a PyTorch run's rank traces) that are not there."""
    return [str(p.relative_to(path)) for p in listed_traces(path, manifest) if not p.is_file()]


def run_notes(paths) -> list[str]:
    """``capture_notes`` for each run directory among ``paths`` (other inputs have none)."""
    notes = []
    for path in map(Path, paths):
        if path.is_dir() and rundir.is_run_dir(path):
            try:
                manifest = read_manifest(path)
            except InputError as exc:
                notes.append(str(exc))  # the loaders decide whether the run is still usable
                continue
            notes.extend(capture_notes(path, manifest, missing_timelines(path, manifest)))
    return notes


def capture_notes(path: Path, manifest: Manifest, missing: list[str]) -> list[str]:
    """What a reader of the figures must know about how the capture ended; empty for a complete run."""
    notes = []
    status = manifest.status
    if manifest.is_torch:
        kept = [p.name for p in listed_torch_traces(Path(path), manifest) if p.is_file()]
        covered = (f"{len(kept)} rank trace(s) ({', '.join(kept[:8])}{', ...' if len(kept) > 8 else ''})" if kept
                   else "no rank's trace")
        what = "rank trace(s)"
    else:
        listed = sorted({s for s in manifest.traced_steps if is_step(s)})
        gone = {Path(m).name for m in missing}
        kept = [s for s in listed if rundir.timeline_name(s) not in gone]
        covered = (f"{len(kept)} traced step(s) ({_step_list(kept)})" if kept
                   else "no traced step's timeline, only its profiler capture if it has one")
        what = "timeline(s)"
    error = manifest.error if manifest.is_torch else None
    if status == rundir.STATUS_HUNG:
        verdict = (manifest.hang or {}).get("verdict") or "no verdict recorded"
        notes.append(f"{path}: the job hung: {str(verdict)[:400]} (rnnprof hang {path}); the figures cover what "
                     f"it kept: {covered}")
    elif status == rundir.STATUS_INTERRUPTED and error:
        notes.append(f"{path}: the capture stopped ({error[:200]}); the figures cover what it kept: {covered}")
    elif status == rundir.STATUS_INTERRUPTED:
        notes.append(f"{path}: the capture was interrupted; the figures cover what it kept: {covered}")
    elif status == rundir.STATUS_RUNNING:
        notes.append(f"{path}: the manifest still says \"running\": the capture was killed or has not "
                     f"finished; the figures cover what it had written: {covered}")
    elif status != rundir.STATUS_COMPLETE:
        said = f"is {str(status)[:40]!r}" if status else "is missing"
        notes.append(f"{path}: the manifest's status {said}, not \"complete\"; the figures cover {covered}")
    if missing:
        names = ", ".join(_why_missing(Path(path), m) for m in missing[:5])
        names += f", ... ({len(missing) - 5} more)" if len(missing) > 5 else ""
        notes.append(f"{path}: {len(missing)} {what} listed in the manifest are missing: {names}")
    for step, tasks in sorted(manifest.untimed_fetches.items(), key=lambda kv: (len(kv[0]), kv[0])):  # 2 before 10
        for task, n in sorted(tasks.items()):
            notes.append(f"{path}: step {step}: TensorFlow timed none of the {n} tensor(s) that {task} fetched from "
                         f"other tasks (its RPC log did not come back): its cross-task transfer time reads 0 there")
    return notes


def _why_missing(path: Path, name: str) -> str:
    """``name``, with the reason where it is there but cannot be read (a symlink loop, a dangling link)."""

    reason = broken(path / name)
    return name if reason in (None, "does not exist") else f"{name} ({reason})"


def _step_list(steps: list[int]) -> str:
    if len(steps) == 1:
        return f"step {steps[0]}"
    if steps[-1] - steps[0] + 1 == len(steps):  # sorted and distinct
        return f"steps {steps[0]}-{steps[-1]}"
    shown = ", ".join(map(str, steps[:8]))
    return f"steps {shown}" + (f", ... {steps[-1]}" if len(steps) > 8 else "")


def kept_in(out: str | Path, manifest: Manifest) -> str:
    """What a stopped run holds, as its manifest lists it: each rank's trace and steps (a PyTorch job), else
    how many files of which steps; or that nothing was."""
    if manifest.is_torch:
        kept = [f"{r['trace']} (rank {r['rank']}, {_steps_text(r.get('steps'))})"
                for r in manifest.ranks if r.get("trace")]
    else:
        files = sum(len(v) for v in manifest.captured.values())
        steps = list(manifest.profiled_steps or manifest.traced_steps)
        kept = [f"{files} file(s) of {_steps_text(steps)}"] if files else []
    if not kept:
        return f"nothing was kept in {out}: no capture window had been written"
    return f"kept in {out}: {', '.join(kept)}"


def _steps_text(steps) -> str:
    steps = [s for s in steps if isinstance(s, int)] if isinstance(steps, list) else []
    if not steps:
        return "no whole step"
    if steps == list(range(steps[0], steps[-1] + 1)) and len(steps) > 1:
        return f"steps {steps[0]}-{steps[-1]}"
    return ("step " if len(steps) == 1 else "steps ") + ", ".join(map(str, steps))


def torch_versions() -> dict:
    """What the manifest records of an imported torch: ``torch``, ``cuda`` or ``rocm``, ``cudnn``, ``nccl``
    and ``gpu`` (the model of the current device), each only where present; empty without torch.

    Nothing here initializes CUDA: the GPU's model is read only once the script has initialized it.
    """
    torch = sys.modules.get("torch")
    version = getattr(torch, "__version__", None) if torch is not None else None
    if version is None:
        return {}
    found = {"torch": str(version)}
    build = getattr(torch, "version", None)
    for key, attr in (("cuda", "cuda"), ("rocm", "hip")):
        if getattr(build, attr, None):
            found[key] = str(getattr(build, attr))
    try:
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:
        cudnn = None
    if cudnn:
        found["cudnn"] = str(cudnn)
    if "cuda" in found or "rocm" in found:
        try:
            nccl = torch.cuda.nccl.version()
        except Exception:
            nccl = None
        if nccl:
            found["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        try:
            if torch.cuda.is_initialized():
                found["gpu"] = torch.cuda.get_device_name(torch.cuda.current_device())
        except Exception:
            pass
    return found


def process_versions() -> dict:
    """The manifest's ``versions`` as this process sees them: rnnprof, python, and the frameworks it
    imported (TensorFlow only where it is imported: a torch run does not read it)."""
    versions = {"rnnprof": __version__, "python": platform.python_version()}
    tf = sys.modules.get("tensorflow")
    if tf is not None and getattr(tf, "__version__", None):
        versions["tensorflow"] = tf.__version__
    versions.update(torch_versions())
    return versions


def _tensorflow_version() -> str | None:
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        return getattr(tf, "__version__", None)
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return None
    for dist in ("tensorflow", "tensorflow-cpu", "tensorflow-gpu"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None


def applied_offsets(manifest_offsets) -> dict[str, float]:
    """Task prefix -> µs to subtract from its timestamps, from the manifest's ``clock_offsets``."""
    result = {}
    if not isinstance(manifest_offsets, dict):
        return result
    for task, entry in manifest_offsets.items():
        value = entry.get("applied_us") if isinstance(entry, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
            result[str(task)] = float(value)
    return result
