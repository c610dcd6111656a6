"""What an input says about dependencies between its events, for ``analyzers.critical_path``.

* an rnnprof run directory (or one of its ``run_metadata/step-N.pb``): node inputs of the partition graphs (``graphs.load_graph_set``) and its
  timelines' arrows: ``transfer`` (a ``_Send``/``_Recv`` pair across devices) and ``collective`` (the
  members of one collective instance), which the timelines were built with from the partition graphs;
* a TF1 ``timeline.Timeline`` or an rnnprof timeline file: its arrows (TF1: ``DataFlow``, one per tensor
  read on another thread); a TF1 timeline has no graph, no transfers and no collectives;
* Kineto traces: nothing beyond the events (launches are matched by correlation id, and the
  communication kernels of several ranks by their order, in the analyzer).
"""

from __future__ import annotations

from pathlib import Path

from rnnprof.analyzers.critical_path import EDGE_COLLECTIVE, EDGE_DATA, EDGE_TRANSFER, Dependencies, Flow, FlowEnd
from rnnprof.rundir.chrome_trace import step_stats_to_chrome
from rnnprof.rundir.manifest import listed_timelines
from rnnprof.traces import chrome_json, run_metadata
from rnnprof.traces.graphs import load_graph_set, to_networkx
from rnnprof.traces.registry import identify, probe
from rnnprof.traces.tf_chrome import as_dict, as_float, as_key, lane_kind, metadata_names, trace_events

_FLOW_KINDS = {"transfer": EDGE_TRANSFER, "collective": EDGE_COLLECTIVE, "DataFlow": EDGE_DATA}
TF1_LACKS = ("a TF1 timeline holds no graph: only lane order and its data-flow arrows are dependencies "
             "(no node inputs on one thread, no Send/Recv pairs, no collectives, and no link from an op to the "
             "kernels it launched on a GPU stream)")
KINETO_LACKS = "Kineto traces hold no data dependencies: lane order, launches and matched collectives only"


def flows(doc: object) -> list[Flow]:
    """The arrows of a decoded Chrome trace (rnnprof or TF1 timeline), their ends on TF device lanes."""
    events = trace_events(doc)
    processes, threads = metadata_names(events)
    rnnprof = chrome_json.is_rnnprof(doc)
    starts: dict[tuple, tuple[str, FlowEnd]] = {}
    found = []
    for e in events:
        if not isinstance(e, dict) or e.get("ph") not in ("s", "t", "f"):
            continue
        kind = _FLOW_KINDS.get(str(e.get("cat")))
        pid, tid = as_key(e.get("pid")), as_key(e.get("tid"))
        lane = lane_kind(processes.get(pid, ""), threads.get((pid, tid)) if rnnprof else None)
        if kind is None or lane is None:
            continue
        end = FlowEnd(lane[0], lane[1], as_float(e.get("ts")))
        key = (str(e.get("cat")), as_key(e.get("id")), as_key(as_dict(e.get("args")).get("step")))
        if e["ph"] == "s":
            starts[key] = (kind, end)
        elif key in starts:
            kind, source = starts.pop(key)
            found.append(Flow(kind, source, end))
    return found


def _run_metadata(path: Path, meta) -> tuple[list[tuple[str, str]], list[Flow]]:
    """A RunMetadata's partition graphs: node inputs, and the arrows its step stats' timeline would carry."""
    if not meta.partition_graphs:
        return [], []
    runtime = to_networkx(run_metadata.graph_defs(path, meta).runtime, "runtime")
    doc = step_stats_to_chrome(meta.step_stats, -1, list(meta.partition_graphs))
    return list(runtime.edges) if runtime is not None else [], flows(doc)


def read_dependencies(paths: list[str]) -> Dependencies:
    """The dependencies of one run directory or trace file, or of several Kineto rank traces."""
    node_inputs: list[tuple[str, str]] = []
    found: list[Flow] = []
    lacks: list[str] = []
    for path in paths:
        fmt = identify(probe(path), holding="events")
        if fmt.name == "rundir":
            runtime = load_graph_set(path).runtime
            if runtime is None:
                lacks.append(f"{path}: no partition graphs, so no node inputs")
            else:
                node_inputs += list(runtime.edges)
            for timeline in listed_timelines(Path(path), fmt.parse(Path(path))):
                if timeline.is_file():
                    found += flows(chrome_json.parse(timeline))
        elif fmt.name == "run-metadata":
            node_inputs_, flows_ = _run_metadata(Path(path), fmt.parse(Path(path)))
            node_inputs += node_inputs_
            found += flows_
        elif fmt.name == "chrome-json":
            doc = chrome_json.parse(Path(path))
            if chrome_json.is_tf1_timeline(doc) and not chrome_json.is_rnnprof(doc):
                lacks.append(TF1_LACKS)
            found += flows(doc)
        elif fmt.name in ("kineto", "rank-folder"):
            if KINETO_LACKS not in lacks:
                lacks.append(KINETO_LACKS)
        else:
            lacks.append(f"{path}: {fmt.description} gives lane order only")
    return Dependencies(node_inputs=tuple(node_inputs), flows=tuple(found), lacks=tuple(lacks))
