"""TensorFlow graphs -> networkx DiGraphs: GraphDef (.pb/.pbtxt), RunMetadata, run directories.

Two views are kept apart: the **user graph** (what Python built: ``graphs/graph.pb``, a RunMetadata's
``pre_optimization_graph``; *requested* devices) and the **runtime graph** (the partition graphs TF executes
after placement and Grappler; *assigned* devices, and the nodes the runtime added such as ``_Send``/``_Recv``).

Node ids are node names (``"<function>/<node>"`` in a function body); node attributes ``name``, ``op``,
``requested_device``, ``assigned_device``, ``device``, ``function``, ``partition``, ``colocation`` and, for a
oneDNN-rewritten op, ``kernel``; edges carry ``control`` and ``port``. Which file is which format is
``registry``'s answer; the protos are TensorBoard's copies, so TensorFlow is never imported.
See docs/formats.md (Graphs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx

from rnnprof.errors import InputError
from rnnprof.events import parse_tf_device
from rnnprof.events.names import user_op
from rnnprof import rundir
from rnnprof.traces.formats import GraphDefs
from rnnprof.traces.messages import GRAPHS_EXPECTED
from rnnprof.traces.registry import open_source


@dataclass
class GraphSet:
    """The user and runtime graphs of one input (None when the input has no such graph)."""

    user: nx.DiGraph | None
    runtime: nx.DiGraph | None
    sources: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def read_graph_defs(path: str | Path) -> GraphDefs:
    """The graphs of a run directory (or a folder with ``graphs/``), a GraphDef or a RunMetadata file, whose
    format is recognised from its first bytes; each file is parsed once."""
    return open_source(path, holding="graphs").graph_defs()


# -- networkx conversion ---------------------------------------------------------------------------


def _source_name(text: str) -> tuple[str, int, bool]:
    """``"^a"`` -> (a, -1, control); ``"a:1"`` -> (a, 1); function bodies: ``"a:out:0"`` -> (a, 0)."""
    if text.startswith("^"):
        return text[1:], -1, True
    parts = text.split(":")
    port = int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else 0
    return parts[0], port, False


def add_graph_def(g: nx.DiGraph, graph_def, partition: str, role: str) -> None:
    """Add the nodes and edges of ``graph_def`` (and its function library) to ``g``.

    ``role`` is "user" (device fields are requested devices) or "runtime" (assigned devices).
    """
    _add_nodes(g, graph_def.node, "", partition, role)
    for fn in graph_def.library.function:
        _add_nodes(g, fn.node_def, fn.signature.name, partition, role)
        g.graph.setdefault("functions", set()).add(fn.signature.name)


# Bytes per element of TF's DataType enum values (types.proto), for the sizes of variables.
_DTYPE_BYTES = {1: 4, 2: 8, 3: 4, 4: 1, 5: 2, 6: 1, 9: 8, 10: 1, 14: 2, 17: 2, 19: 2, 22: 4, 23: 8}
_VARIABLE_OPS = ("VarHandleOp", "VariableV2", "Variable")


def variable_bytes(node) -> int | None:
    """The size of a variable node (``shape`` x ``dtype``), None for other nodes or unknown sizes."""
    if node.op not in _VARIABLE_OPS or "shape" not in node.attr or "dtype" not in node.attr:
        return None
    shape = node.attr["shape"].shape
    if shape.unknown_rank or any(d.size < 0 for d in shape.dim):
        return None
    size = _DTYPE_BYTES.get(int(node.attr["dtype"].type) % 100)  # reference types are type + 100
    if size is None:
        return None
    elements = 1
    for d in shape.dim:
        elements *= d.size
    return elements * size


def _node_id(function: str, name: str) -> str:
    return f"{function}/{name}" if function else name


def _add_nodes(g: nx.DiGraph, nodes, function: str, partition: str, role: str) -> None:
    device_key = "requested_device" if role == "user" else "assigned_device"
    for node in nodes:
        nid = _node_id(function, node.name)
        attrs = g.nodes[nid] if nid in g else None
        op = user_op(node.op)  # a oneDNN kernel (_MklNativeConv2D) is the op of the user's graph (Conv2D)
        if attrs is None:
            g.add_node(nid, name=node.name, op=op, requested_device="", assigned_device="",
                       function=function, partition=partition)
            attrs = g.nodes[nid]
        attrs[device_key] = node.device
        if role == "user" and "_class" in node.attr:  # colocate_with groups: "loc:@<node>"
            attrs["colocation"] = tuple(_node_id(function, s.decode(errors="replace")[5:])
                                        for s in node.attr["_class"].list.s if s.startswith(b"loc:@"))
        if role == "runtime":
            attrs["partition"] = partition
            attrs["op"] = op
        if op != node.op:
            attrs["kernel"] = node.op
        size = variable_bytes(node)
        if size is not None:
            attrs["variable_bytes"] = size
        attrs["device"] = parse_tf_device(attrs["assigned_device"] or attrs["requested_device"] or "")
    for node in nodes:
        nid = _node_id(function, node.name)
        for raw in node.input:
            src, port, control = _source_name(raw)
            sid = _node_id(function, src)
            if sid not in g:
                g.graph["dangling_inputs"] = g.graph.get("dangling_inputs", 0) + 1
                continue  # a function argument or a node of another partition
            if g.has_edge(sid, nid):
                g.edges[sid, nid]["control"] = g.edges[sid, nid]["control"] and control
            else:
                g.add_edge(sid, nid, control=control, port=port)


def to_networkx(defs: list, role: str) -> nx.DiGraph | None:
    if not defs:
        return None
    g = nx.DiGraph(role=role, sources=[s for s, _, _ in defs])
    for source, graph_def, _ in defs:
        add_graph_def(g, graph_def, _partition_label(source), role)
    g.graph["functions"] = sorted(g.graph.get("functions", ()))
    return g


def _partition_label(source: str) -> str:
    file = Path(source.split("#", 1)[0])
    parts = file.with_suffix("").parts
    # Inside a run directory, the path under graphs/ tells partitions of different functions apart.
    anchor = len(parts) - 1 - parts[::-1].index(rundir.GRAPHS_DIR) if rundir.GRAPHS_DIR in parts else -1
    name = "/".join(parts[anchor + 1:]) if anchor >= 0 else file.stem
    return f"{name}#{source.split('#', 1)[1]}" if "#" in source else name


def graph_set(defs: GraphDefs) -> GraphSet:
    """The user graph and the runtime graph, kept separate."""
    return GraphSet(
        user=to_networkx(defs.user, "user"),
        runtime=to_networkx(defs.runtime, "runtime"),
        sources=tuple(s for s, _, _ in defs.user + defs.runtime),
        warnings=tuple(defs.warnings),
    )


def merged_graph(defs: GraphDefs) -> nx.DiGraph | None:
    """One DiGraph: the user graph with the runtime's assigned devices joined in by node name (None without graphs).

    Nodes only the runtime has (``_Send``/``_Recv``, rewritten nodes) are included with
    ``requested_device`` "".
    """
    if not defs.user and not defs.runtime:
        return None
    g = nx.DiGraph(role="merged", sources=[s for s, _, _ in defs.user + defs.runtime])
    for source, graph_def, _ in defs.user:
        add_graph_def(g, graph_def, _partition_label(source), "user")
    for source, graph_def, _ in defs.runtime:
        add_graph_def(g, graph_def, _partition_label(source), "runtime")
    g.graph["functions"] = sorted(g.graph.get("functions", ()))
    g.graph["warnings"] = list(defs.warnings)
    return g


def load_graph_set(path: str | Path) -> GraphSet:
    """The user graph and the runtime graph of a file or run directory, kept separate."""
    return graph_set(read_graph_defs(path))


def load_graph(path: str | Path) -> nx.DiGraph:
    """``merged_graph`` of a file or run directory; ``InputError`` when it holds no graph."""
    graph = merged_graph(read_graph_defs(path))
    if graph is None:
        raise InputError(path, "holds no graph", GRAPHS_EXPECTED)
    return graph
