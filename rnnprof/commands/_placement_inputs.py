"""Loading what ``rnnprof placement-audit`` reads: run directories, traces, graphs, in any mix.

Traces go through ``rnnprof.profiler.loaders.load_events`` and graphs (GraphDef, RunMetadata,
a run directory's graphs) through ``rnnprof.profiler.loaders.graphs.load_graph``; several graphs are
joined by node name.
"""

from __future__ import annotations

from pathlib import Path

from rnnprof.errors import InputError
from rnnprof.profiler import rundir


def is_graph_file(path: Path) -> bool:
    name = path.name
    return (name.endswith(".pb") or name.endswith(".pbtxt")) and not name.endswith(".xplane.pb")


def load_audit_input(paths: list[str]):
    """An ``AuditInput`` from run directories, trace files and graph files."""
    import networkx as nx

    from rnnprof.analyzers.placement import AuditInput
    from rnnprof.profiler.loaders import graphs
    from rnnprof.profiler.loaders import load_events

    manifest, trace_paths, graph_paths = None, [], []
    for text in paths:
        path = Path(text)
        if not path.exists():
            raise InputError(path, "does not exist")
        if path.is_dir() and rundir.is_run_dir(path):
            from rnnprof.profiler.rundir.manifest import read_manifest

            manifest = manifest or read_manifest(path)
            defs = graphs.read_graph_defs(path)  # a corrupt graph file is an error, not "no graph"
            if defs.user or defs.runtime:
                graph_paths.append(path)
            if (path / rundir.TIMELINES_DIR).is_dir() or (path / rundir.PROFILE_DIR).is_dir():
                trace_paths.append(path)
        elif path.is_file() and is_graph_file(path):
            graph_paths.append(path)
        else:
            trace_paths.append(path)
    events = None
    if trace_paths:
        events = load_events(trace_paths[0] if len(trace_paths) == 1 else trace_paths)
    graph = None
    for path in graph_paths:
        loaded = graphs.load_graph(path)
        graph = loaded if graph is None else nx.compose(graph, loaded)
    if events is None and graph is None:
        runs = [Path(p) for p in paths if rundir.is_run_dir(Path(p))]
        if runs:
            load_events(runs[0])  # raises the specific reason (listed timelines missing, ...)
        raise InputError(", ".join(paths), "holds no trace events and no graph (nothing was captured?)",
                         "a run directory with timelines or graphs, a trace file or a graph file")
    return AuditInput(graph=graph, events=events, manifest=manifest)
