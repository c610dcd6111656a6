"""rnnprof run directories: the per-step Chrome timelines listed by the manifest, and the captured graphs.

A run can be interrupted part way: the loader reads the timelines that the manifest lists and
that exist, records the missing ones under ``metadata.missing``, and fails only when nothing
is readable. Without timelines it falls back to the run's XSpace captures. Its graphs (``graph_defs``) are
the files of ``graphs/`` (each read by ``graph_files``), else a RunMetadata of ``run_metadata/``. A folder
without a manifest but with ``graphs/`` is read for its graphs only (format "graphs-dir").
"""

from __future__ import annotations

from pathlib import Path

from rnnprof.errors import InputError
from rnnprof.events import EventTable, Manifest, concat
from rnnprof import rundir
from rnnprof.rundir.manifest import (capture_notes, listed_timelines, listed_torch_traces, missing_timelines,
                                     read_manifest)
from rnnprof.traces import chrome_json, kineto, xplane
from rnnprof.traces.formats import GraphDefs
from rnnprof.traces.graph_files import read_graph_file

FORMAT = "rnnprof-run"


def sniff(probe) -> bool:
    return probe.is_dir and rundir.is_run_dir(probe.path)


def parse(path: Path) -> Manifest:
    """The manifest, read once for everything the run directory gives."""
    return read_manifest(Path(path))


def has_traces(path: Path) -> bool:
    """Whether the run captured any trace (timelines, XSpaces, rank traces), as opposed to graphs only."""
    return any((Path(path) / d).is_dir() for d in (rundir.TIMELINES_DIR, rundir.PROFILE_DIR, rundir.TORCH_TRACES_DIR))


def events(path: Path, manifest: Manifest) -> EventTable:
    path = Path(path)
    missing = missing_timelines(path, manifest)
    if manifest.is_torch:
        return _torch_events(path, manifest, missing)
    timelines = listed_timelines(path, manifest)
    present = [p for p in timelines if p.is_file()]
    tables = [chrome_json.load(p) for p in present]
    if not tables:
        xplanes = sorted(path.glob(str(rundir.PROFILE_DIR / f"*{rundir.DEVICES_RUN_SUFFIX}" / "*.xplane.pb")))
        xplanes = xplanes or sorted(path.glob(str(rundir.PROFILE_DIR / "*" / "*.xplane.pb")))
        if xplanes:
            tables = [xplane.load(p) for p in xplanes]
    if not tables:
        raise InputError(path, "run directory holds no readable timeline or xplane"
                         + (f" ({len(missing)} listed timelines missing)" if missing else ""),
                         f"{rundir.TIMELINES_DIR}/step-N.trace.json.gz files")
    return _with_run(tables, path, manifest, missing)


def _torch_events(path: Path, manifest: Manifest, missing: list[str]) -> EventTable:
    """A PyTorch run: its ranks' Kineto traces, merged on their shared wall clock as ``load_events`` merges
    rank files (each rank a device of its own)."""
    tables = [kineto.load_kept(p) for p in listed_torch_traces(path, manifest) if p.is_file()]
    if not tables:
        raise InputError(path, "PyTorch run directory holds no readable rank trace"
                         + (f" ({len(missing)} listed traces missing)" if missing else "")
                         + (f"; the run stopped: {manifest.error}" if manifest.error is not None else ""),
                         f"{rundir.TORCH_TRACES_DIR}/{rundir.torch_trace_name(0)} ... (one Kineto trace per rank)")
    return _with_run(tables, path, manifest, missing)


def _with_run(tables: list[EventTable], path: Path, manifest: Manifest, missing: list[str]) -> EventTable:
    """One table with the run's metadata and the notes on how its capture ended."""
    table = tables[0] if len(tables) == 1 else concat(tables, align="absolute")
    metadata = table.metadata
    metadata.run_dir, metadata.status, metadata.manifest = str(path), manifest.status, manifest
    metadata.missing = tuple(missing)
    metadata.warnings = (*metadata.warnings, *capture_notes(path, manifest, missing))
    return table


def graph_defs(path: Path, _manifest: Manifest | None = None) -> GraphDefs:
    """``graphs/graph.pb``, ``graphs/partitions/*.pb`` and ``graphs/functions/**``; RunMetadata otherwise."""
    path = Path(path)
    graphs_dir = path / rundir.GRAPHS_DIR
    found = GraphDefs()
    user_file = _pb_or_pbtxt(graphs_dir / rundir.GRAPH_FILE)
    if user_file:
        found.user += read_graph_file(user_file).user
    for f in _graph_files(graphs_dir / rundir.PARTITIONS_DIR):
        part = read_graph_file(f)
        found.runtime += part.user + part.runtime
    functions = graphs_dir / rundir.FUNCTIONS_DIR
    for f in _graph_files(functions, recursive=True):
        part = read_graph_file(f)
        if rundir.PARTITIONS_DIR in f.relative_to(functions).parts:
            found.runtime += part.user + part.runtime
        else:
            found.user += part.user
            found.runtime += part.runtime
    if not found.runtime:
        # Partitions may be missing (interrupted run); RunMetadata holds them too.
        for f in sorted((path / rundir.RUN_METADATA_DIR).glob("step-*.pb"))[:1]:
            try:
                found.runtime += read_graph_file(f).runtime
            except InputError as exc:
                found.warnings.append(str(exc))
    if not found.user and not found.runtime:
        found.warnings.append(f"{path}: no graphs captured")
    return found


def _pb_or_pbtxt(stem: Path) -> Path | None:
    for candidate in (stem, stem.with_suffix(".pbtxt")):
        if candidate.is_file():
            return candidate
    return None


def _graph_files(folder: Path, recursive: bool = False) -> list[Path]:
    """``.pb`` files, or ``.pbtxt`` where no binary twin exists."""
    if not folder.is_dir():
        return []
    pattern = "**/*" if recursive else "*"
    binary = sorted(folder.glob(pattern + ".pb"))
    stems = {f.with_suffix("") for f in binary}
    text = [f for f in sorted(folder.glob(pattern + ".pbtxt")) if f.with_suffix("") not in stems]
    return binary + text


def sniff_graphs_only(probe) -> bool:
    return probe.is_dir and not rundir.is_run_dir(probe.path) and (probe.path / rundir.GRAPHS_DIR).is_dir()


def parse_graphs_only(path: Path) -> None:
    return None
