"""TensorFlow ``GraphDef`` files, binary (``.pb``) or text (``.pbtxt``): the user graph as Python built it.

Binary: the first field is a ``NodeDef`` whose name is a node name and whose op is an op name (or, for a
graph of functions only, a function library whose first function has an op-like name). Text: the file
starts with ``node {``, ``library {`` or ``versions {``. The proto classes are TensorBoard's copies of
TF's, so TensorFlow is never imported here.
"""

from __future__ import annotations

import re
from pathlib import Path

from rnnprof.errors import InputError
from rnnprof.traces import wire
from rnnprof.traces.formats import GraphDefs
from rnnprof.traces.jsonstream import read_content
from rnnprof.traces.messages import GRAPHS_EXPECTED, UNREADABLE

OP_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_>.]*$")
_NODE_NAME = re.compile(r"^[A-Za-z0-9._][^\x00-\x1f]*$")
# GraphDef: node, library, version (deprecated int), versions, debug_info.
_GRAPH_FIELDS = {1: wire.LEN, 2: wire.LEN, 3: wire.VARINT, 4: wire.LEN, 5: wire.LEN}
# NodeDef: name, op, input, device, attr, experimental_debug_info, experimental_type.
_NODE_FIELDS = {k: wire.LEN for k in range(1, 8)}
_TEXT_START = re.compile(r"\A\s*(?:#[^\n]*\n\s*)*(?:node|library|versions)\s*\{")


def _text(value: bytes | None) -> str | None:
    try:
        return value.decode("utf-8") if value is not None else None
    except UnicodeDecodeError:
        return None


def looks_like_graph(buf: bytes) -> bool:
    """Whether ``buf`` (a prefix of a serialized message) starts like a GraphDef with nodes or functions."""
    if not wire.only(buf, _GRAPH_FIELDS):
        return False
    for field in wire.fields(buf):
        if field.number == 1:  # the first NodeDef
            name, op = _text(wire.first(field.value, 1)), _text(wire.first(field.value, 2))
            return (wire.only(field.value, _NODE_FIELDS) and name is not None and bool(_NODE_NAME.match(name))
                    and op is not None and bool(OP_NAME.match(op)))
        if field.number == 2:  # no nodes, a function library: library.function[0].signature.name
            function = wire.first(field.value, 1)
            signature = wire.first(function, 1) if function is not None else None
            name = _text(wire.first(signature, 1)) if signature is not None else None
            return name is not None and bool(OP_NAME.match(name))
    return False


def sniff(probe) -> bool:
    return not probe.is_dir and looks_like_graph(probe.prefix)


def sniff_text(probe) -> bool:
    if probe.is_dir:
        return False
    try:
        text = probe.prefix.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(probe.prefix) - 3:  # not just a character cut by the end of the prefix
            return False
        text = probe.prefix[:exc.start].decode("utf-8")
    return bool(_TEXT_START.match(text))


def _graph_pb2():
    from tensorboard.compat.proto import graph_pb2

    return graph_pb2


def plausible(graph) -> bool:
    return bool(graph.node or graph.library.function) and all(n.name and OP_NAME.match(n.op) for n in graph.node)


def parse(path: Path):
    """The GraphDef proto: the one full parse of the file."""
    from google.protobuf.message import DecodeError

    graph = _graph_pb2().GraphDef()
    try:
        graph.ParseFromString(read_content(path))
    except (DecodeError, ValueError):
        raise InputError(path, UNREADABLE, GRAPHS_EXPECTED) from None
    if not plausible(graph):
        raise InputError(path, UNREADABLE, GRAPHS_EXPECTED)
    return graph


def parse_text(path: Path):
    from google.protobuf import text_format

    graph = _graph_pb2().GraphDef()
    try:
        text_format.Parse(read_content(path).decode("utf-8"), graph)
    except (UnicodeDecodeError, text_format.ParseError, ValueError, RecursionError):
        raise InputError(path, UNREADABLE, GRAPHS_EXPECTED) from None
    if not plausible(graph):
        raise InputError(path, UNREADABLE, GRAPHS_EXPECTED)
    return graph


def graph_defs(path: Path, graph):
    """A GraphDef file is a user graph: the devices its nodes request."""
    return GraphDefs(user=[(str(path), graph, "")])
