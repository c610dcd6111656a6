"""rnnprof run directories: the per-step Chrome timelines listed by the manifest, and the captured graphs.

A run can be interrupted part way: the loader reads the timelines that the manifest lists and
that exist, records the missing ones under ``metadata["missing"]``, and fails only when nothing
is readable. Without timelines it falls back to the run's XSpace captures. Graphs are read by
``graphs.read_run_dir``. A folder without a manifest but with ``graphs/`` is read for its graphs only
(format "graphs-dir").
"""

from __future__ import annotations

from pathlib import Path

from rnnprof.errors import InputError
from rnnprof.events import EventTable, concat
from rnnprof.profiler import rundir
from rnnprof.profiler.rundir.manifest import capture_notes, listed_timelines, missing_timelines, read_manifest

FORMAT = "rnnprof-run"


def sniff(probe) -> bool:
    return probe.is_dir and rundir.is_run_dir(probe.path)


def parse(path: Path) -> dict:
    """The manifest, read once for everything the run directory gives."""
    return read_manifest(Path(path))


def has_traces(path: Path) -> bool:
    """Whether the run captured any trace (timelines or XSpaces), as opposed to graphs only."""
    return (Path(path) / rundir.TIMELINES_DIR).is_dir() or (Path(path) / rundir.PROFILE_DIR).is_dir()


def events(path: Path, manifest: dict) -> EventTable:
    from rnnprof.profiler.loaders import chrome_json

    path = Path(path)
    timelines = listed_timelines(path, manifest)
    present = [p for p in timelines if p.is_file()]
    missing = missing_timelines(path, manifest)
    tables = [chrome_json.load(p) for p in present]
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


def graph_defs(path: Path, _manifest: dict | None = None):
    from rnnprof.profiler.loaders.graphs import read_run_dir

    return read_run_dir(Path(path))


def sniff_graphs_only(probe) -> bool:
    return probe.is_dir and not rundir.is_run_dir(probe.path) and (probe.path / rundir.GRAPHS_DIR).is_dir()


def parse_graphs_only(path: Path) -> None:
    return None
