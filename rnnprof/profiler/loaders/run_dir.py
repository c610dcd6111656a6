"""rnnprof run directories: the per-step Chrome timelines listed by the manifest.

A run can be interrupted part way: the loader reads the timelines that the manifest lists and
that exist, records the missing ones under ``metadata["missing"]``, and fails only when nothing
is readable. Without timelines it falls back to the run's XSpace captures.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from rnnprof.errors import InputError
from rnnprof import limits
from rnnprof.profiler import rundir
from rnnprof.profiler.events import EventTable, concat

FORMAT = "rnnprof-run"
_TIMELINE = re.compile(r"step-(\d+)\.trace\.json\.gz$")


def read_manifest(path: Path) -> dict:
    manifest_path = Path(path) / rundir.MANIFEST
    try:
        manifest = json.loads(limits.read_bytes(manifest_path))
    except (ValueError, RecursionError) as exc:
        raise InputError(manifest_path, f"unreadable manifest ({exc})", "a JSON object") from None
    if not isinstance(manifest, dict):
        raise InputError(manifest_path, "manifest is not a JSON object", "a JSON object")
    return manifest


def _is_step(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31


def listed_timelines(path: Path, manifest: dict) -> list[Path]:
    """Timelines the manifest names (any string or step list that refers to them), else those on disk."""
    names: set[str] = set()

    def walk(value, key=""):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, k)
        elif isinstance(value, list):
            for v in value:
                walk(v, key)
        elif isinstance(value, str) and _TIMELINE.search(value):
            names.add(str(Path(rundir.TIMELINES_DIR) / Path(value).name))
        elif _is_step(value) and key in ("traced_steps", "trace_steps"):
            names.add(str(Path(rundir.TIMELINES_DIR) / rundir.timeline_name(value)))

    walk(manifest)
    if not names:
        names = {str(p.relative_to(path)) for p in (path / rundir.TIMELINES_DIR).glob("step-*.trace.json.gz")}
    return sorted((path / n for n in names), key=lambda p: int(_TIMELINE.search(p.name).group(1)))


def missing_timelines(path: Path, manifest: dict) -> list[str]:
    return [str(p.relative_to(path)) for p in listed_timelines(path, manifest) if not p.is_file()]


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


def capture_notes(path: Path, manifest: dict, missing: list[str]) -> list[str]:
    """What a reader of the figures must know about how the capture ended; empty for a complete run."""
    notes = []
    status = manifest.get("status", "")
    listed = manifest.get("traced_steps")
    listed = sorted({s for s in listed if _is_step(s)}) if isinstance(listed, list) else []
    gone = {Path(m).name for m in missing}
    kept = [s for s in listed if rundir.timeline_name(s) not in gone]
    covered = (f"{len(kept)} traced step(s) ({_step_list(kept)})" if kept
               else "no traced step's timeline, only its profiler capture if it has one")
    if status == rundir.STATUS_INTERRUPTED:
        notes.append(f"{path}: the capture was interrupted; the figures cover what it kept: {covered}")
    elif status == rundir.STATUS_RUNNING:
        notes.append(f"{path}: the manifest still says \"running\": the capture was killed or has not "
                     f"finished; the figures cover what it had written: {covered}")
    elif status != rundir.STATUS_COMPLETE:
        said = f"is {str(status)[:40]!r}" if status else "is missing"
        notes.append(f"{path}: the manifest's status {said}, not \"complete\"; the figures cover {covered}")
    if missing:
        names = ", ".join(missing[:5]) + (f", ... ({len(missing) - 5} more)" if len(missing) > 5 else "")
        notes.append(f"{path}: {len(missing)} timeline(s) listed in the manifest are missing: {names}")
    return notes


def _step_list(steps: list[int]) -> str:
    if len(steps) == 1:
        return f"step {steps[0]}"
    if steps[-1] - steps[0] + 1 == len(steps):  # sorted and distinct
        return f"steps {steps[0]}-{steps[-1]}"
    shown = ", ".join(map(str, steps[:8]))
    return f"steps {shown}" + (f", ... {steps[-1]}" if len(steps) > 8 else "")


def load(path: Path) -> EventTable:
    from rnnprof.profiler.loaders import load_chrome_json

    path = Path(path)
    manifest = read_manifest(path)
    timelines = listed_timelines(path, manifest)
    present = [p for p in timelines if p.is_file()]
    missing = missing_timelines(path, manifest)
    tables = [load_chrome_json(p) for p in present]
    if not tables:
        xplanes = sorted(path.glob(str(rundir.PROFILE_DIR / f"*{rundir.DEVICES_RUN_SUFFIX}" / "*.xplane.pb")))
        xplanes = xplanes or sorted(path.glob(str(rundir.PROFILE_DIR / "*" / "*.xplane.pb")))
        if xplanes:
            from rnnprof.profiler.loaders import xplane

            tables = [xplane.load(p) for p in xplanes]
    if not tables:
        raise InputError(path, "run directory holds no readable timeline or xplane"
                         + (f" ({len(missing)} listed timelines missing)" if missing else ""),
                         f"{rundir.TIMELINES_DIR}/step-N.trace.json.gz files")
    table = tables[0] if len(tables) == 1 else concat(tables, align="absolute")
    table.metadata.update({
        "run_dir": str(path),
        "status": manifest.get("status", ""),
        "missing": missing,
        "manifest": manifest,
    })
    table.metadata.setdefault("warnings", []).extend(capture_notes(path, manifest, missing))
    return table
