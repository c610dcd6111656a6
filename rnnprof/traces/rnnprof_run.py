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
from rnnprof import rundir
from rnnprof.rundir.manifest import (capture_notes, is_torch_run, listed_timelines, listed_torch_traces,
                                              missing_timelines, read_manifest)

FORMAT = "rnnprof-run"


def sniff(probe) -> bool:
    return probe.is_dir and rundir.is_run_dir(probe.path)


def parse(path: Path) -> dict:
    """The manifest, read once for everything the run directory gives."""
    return read_manifest(Path(path))


def has_traces(path: Path) -> bool:
    """Whether the run captured any trace (timelines, XSpaces, rank traces), as opposed to graphs only."""
    return any((Path(path) / d).is_dir() for d in (rundir.TIMELINES_DIR, rundir.PROFILE_DIR, rundir.TORCH_TRACES_DIR))


def events(path: Path, manifest: dict) -> EventTable:
    from rnnprof.traces import chrome_json

    path = Path(path)
    missing = missing_timelines(path, manifest)
    if is_torch_run(manifest):
        return _torch_events(path, manifest, missing)
    timelines = listed_timelines(path, manifest)
    present = [p for p in timelines if p.is_file()]
    tables = [chrome_json.load(p) for p in present]
    if not tables:
        xplanes = sorted(path.glob(str(rundir.PROFILE_DIR / f"*{rundir.DEVICES_RUN_SUFFIX}" / "*.xplane.pb")))
        xplanes = xplanes or sorted(path.glob(str(rundir.PROFILE_DIR / "*" / "*.xplane.pb")))
        if xplanes:
            from rnnprof.traces import xplane

            tables = [xplane.load(p) for p in xplanes]
    if not tables:
        raise InputError(path, "run directory holds no readable timeline or xplane"
                         + (f" ({len(missing)} listed timelines missing)" if missing else ""),
                         f"{rundir.TIMELINES_DIR}/step-N.trace.json.gz files")
    return _with_run(tables, path, manifest, missing)


def _torch_events(path: Path, manifest: dict, missing: list[str]) -> EventTable:
    """A PyTorch run: its ranks' Kineto traces, merged on their shared wall clock as ``load_events`` merges
    rank files (each rank a device of its own)."""
    from rnnprof.traces import kineto

    tables = [kineto.load(p) for p in listed_torch_traces(path, manifest) if p.is_file()]
    if not tables:
        raise InputError(path, "PyTorch run directory holds no readable rank trace"
                         + (f" ({len(missing)} listed traces missing)" if missing else "")
                         + (f"; the run stopped: {manifest['error']}" if isinstance(manifest.get("error"), str) else ""),
                         f"{rundir.TORCH_TRACES_DIR}/{rundir.torch_trace_name(0)} ... (one Kineto trace per rank)")
    return _with_run(tables, path, manifest, missing)


def _with_run(tables: list[EventTable], path: Path, manifest: dict, missing: list[str]) -> EventTable:
    """One table with the run's metadata and the notes on how its capture ended."""
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
    from rnnprof.traces.graphs import read_run_dir

    return read_run_dir(Path(path))


def sniff_graphs_only(probe) -> bool:
    return probe.is_dir and not rundir.is_run_dir(probe.path) and (probe.path / rundir.GRAPHS_DIR).is_dir()


def parse_graphs_only(path: Path) -> None:
    return None
