"""Loading what ``rnnprof placement-audit`` reads: run directories, traces, graphs.

Traces go through ``rnnprof.profiler.loaders.load_events``. Graphs (GraphDef or
RunMetadata, binary or text) become the networkx graph the placement rules read:
one node per op with ``op``, ``requested_device`` (user graph), ``assigned_device``
(partition graphs) and, for receives, ``tensor_name``/``send_device``/``recv_device``.
TensorFlow is imported only when a graph file is actually read.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from rnnprof.errors import InputError
from rnnprof.profiler import rundir

GRAPH_EXPECTED = "a GraphDef or RunMetadata (.pb binary or .pbtxt text)"
_INPUT_REF = re.compile(r"^\^?([^:]+)(?::\d+)?$")


def is_graph_file(path: Path) -> bool:
    name = path.name
    return (name.endswith(".pb") or name.endswith(".pbtxt")) and not name.endswith(".xplane.pb")


def read_graph_protos(path: Path) -> tuple[list, list]:
    """(user-level GraphDefs, partition GraphDefs) held by one graph file."""
    from google.protobuf import message, text_format
    from tensorflow.core.framework.graph_pb2 import GraphDef
    from tensorflow.core.protobuf.config_pb2 import RunMetadata

    data = path.read_bytes()
    if not data.strip():
        raise InputError(path, "is empty", GRAPH_EXPECTED)
    text = path.name.endswith(".pbtxt")
    for cls in (RunMetadata, GraphDef):
        proto = cls()
        try:
            if text:
                text_format.Parse(data.decode("utf-8", "replace"), proto)
            else:
                proto.ParseFromString(data)
        except (message.DecodeError, text_format.ParseError, UnicodeDecodeError, ValueError):
            continue
        if isinstance(proto, RunMetadata):
            partitions = list(proto.partition_graphs)
            users = []
            for function in proto.function_graphs:
                partitions += list(function.partition_graphs)
                if function.HasField("pre_optimization_graph"):
                    users.append(function.pre_optimization_graph)
            if _plausible(partitions) or _plausible(users):
                return users, partitions
        elif _plausible([proto]):
            # A GraphDef whose devices are all fully qualified came out of the placer.
            assigned = all(n.device.startswith("/job:") for n in proto.node)
            return ([], [proto]) if assigned and _has_transfers(proto) else ([proto], [])
    raise InputError(path, "is neither a GraphDef nor a RunMetadata with graphs", GRAPH_EXPECTED)


def _plausible(graphs: Iterable) -> bool:
    nodes = [n for g in graphs for n in g.node]
    return bool(nodes) and all(n.name and n.op for n in nodes)


def _has_transfers(graph) -> bool:
    return any(n.op in ("_Send", "_Recv", "_HostSend", "_HostRecv", "_Arg", "_Retval") for n in graph.node)


def build_graph(users: list, partitions: list):
    """One DiGraph from user graphs (requested devices) and partition graphs (assigned devices)."""
    import networkx as nx

    graph = nx.DiGraph()

    def add(node, key: str) -> None:
        attrs = graph.nodes[node.name] if node.name in graph else {}
        if not attrs:
            graph.add_node(node.name, op=node.op, requested_device="", assigned_device="")
            attrs = graph.nodes[node.name]
        if key == "assigned_device" or not attrs.get("op"):
            attrs["op"] = node.op if key == "requested_device" or not attrs.get("op") else attrs["op"]
        attrs[key] = node.device
        for attr in ("tensor_name", "send_device", "recv_device"):
            if attr in node.attr:
                attrs[attr] = node.attr[attr].s.decode()

    for g in users:
        for node in g.node:
            add(node, "requested_device")
    for g in partitions:
        for node in g.node:
            add(node, "assigned_device")
    for g in list(users) + list(partitions):
        for node in g.node:
            for ref in node.input:
                match = _INPUT_REF.match(ref)
                if match and match.group(1) in graph:
                    control = ref.startswith("^")
                    if not graph.has_edge(match.group(1), node.name):
                        graph.add_edge(match.group(1), node.name, control=control)
    return graph


def run_dir_graph_files(path: Path) -> list[Path]:
    graphs = path / rundir.GRAPHS_DIR
    files = [graphs / rundir.GRAPH_FILE] if (graphs / rundir.GRAPH_FILE).is_file() else []
    files += sorted((graphs / rundir.PARTITIONS_DIR).glob("*.pb"))
    if not files:  # older or partial runs: partition graphs are inside the raw RunMetadata
        files += sorted((path / rundir.RUN_METADATA_DIR).glob("*.pb"))[:1]
    return files


def load_audit_input(paths: list[str]):
    """An ``AuditInput`` from run directories, trace files and graph files, in any mix."""
    from rnnprof.analyzers.placement import AuditInput
    from rnnprof.profiler.loaders import load_events

    manifest, trace_paths, graph_files = None, [], []
    for text in paths:
        path = Path(text)
        if not path.exists():
            raise InputError(path, "does not exist")
        if path.is_dir() and rundir.is_run_dir(path):
            from rnnprof.profiler.loaders.run_dir import read_manifest

            manifest = manifest or read_manifest(path)
            graph_files += run_dir_graph_files(path)
            if (path / rundir.TIMELINES_DIR).is_dir() or (path / rundir.PROFILE_DIR).is_dir():
                trace_paths.append(path)
        elif path.is_file() and is_graph_file(path):
            graph_files.append(path)
        else:
            trace_paths.append(path)
    events = None
    if trace_paths:
        events = load_events(trace_paths[0] if len(trace_paths) == 1 else trace_paths)
    graph = None
    if graph_files:
        users, partitions = [], []
        for path in graph_files:
            u, p = read_graph_protos(path)
            users += u
            partitions += p
        graph = build_graph(users, partitions)
    return AuditInput(graph=graph, events=events, manifest=manifest)
