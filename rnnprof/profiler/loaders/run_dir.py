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
        elif (isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31
              and key in ("traced_steps", "trace_steps")):
            names.add(str(Path(rundir.TIMELINES_DIR) / rundir.timeline_name(value)))

    walk(manifest)
    if not names:
        names = {str(p.relative_to(path)) for p in (path / rundir.TIMELINES_DIR).glob("step-*.trace.json.gz")}
    return sorted((path / n for n in names), key=lambda p: int(_TIMELINE.search(p.name).group(1)))


def load(path: Path) -> EventTable:
    from rnnprof.profiler.loaders import load_chrome_json

    path = Path(path)
    manifest = read_manifest(path)
    timelines = listed_timelines(path, manifest)
    present = [p for p in timelines if p.is_file()]
    missing = [str(p.relative_to(path)) for p in timelines if not p.is_file()]
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
    if missing:
        table.metadata.setdefault("warnings", []).append(
            f"{len(missing)} timeline(s) listed in the manifest are missing: {', '.join(missing)}")
    return table
