"""rnnprof run directories: the per-step Chrome timelines listed by the manifest.

A run can be interrupted part way: the loader reads the timelines that the manifest lists and
that exist, records the missing ones under ``metadata["missing"]``, and fails only when nothing
is readable. Without timelines it falls back to the run's XSpace captures.
"""

from __future__ import annotations

from pathlib import Path

from rnnprof.errors import InputError
from rnnprof.events import EventTable, concat
from rnnprof.profiler import rundir
from rnnprof.profiler.rundir.manifest import capture_notes, listed_timelines, missing_timelines, read_manifest

FORMAT = "rnnprof-run"


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
