"""Graph loader on GraphDefs built here: a while loop in the function library, explicit devices,
partition graphs that assign devices, control and multi-output edges."""

import json

import pytest
from google.protobuf import text_format
from tensorboard.compat.proto import config_pb2, graph_pb2

from rnnprof.errors import InputError
from rnnprof.events import Device
from rnnprof.traces.graphs import load_graph, load_graph_set

CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
CPU1 = "/job:localhost/replica:0/task:0/device:CPU:1"


def user_graph() -> graph_pb2.GraphDef:
    g = graph_pb2.GraphDef()
    nodes = [
        ("x", "Placeholder", "/device:CPU:0", []),
        ("w", "VarHandleOp", "/device:CPU:1", []),
        ("split", "Split", "", ["x"]),
        ("loop", "While", "/device:CPU:1", ["split:1", "w", "^x"]),
        ("out", "Identity", "/device:CPU:0", ["loop:1"]),
    ]
    for name, op, device, inputs in nodes:
        n = g.node.add(name=name, op=op, device=device)
        n.input.extend(inputs)
    body = g.library.function.add()
    body.signature.name = "loop_body_7"
    for name, op, inputs in [("matmul", "MatMul", ["h", "w"]), ("tanh", "Tanh", ["matmul:product:0"]),
                             ("next", "AddV2", ["tanh:y:0", "^matmul"])]:
        n = body.node_def.add(name=name, op=op)
        n.input.extend(inputs)
    cond = g.library.function.add()
    cond.signature.name = "loop_cond_7"
    cond.node_def.add(name="less", op="Less")
    return g


def partitions() -> list[graph_pb2.GraphDef]:
    p0, p1 = graph_pb2.GraphDef(), graph_pb2.GraphDef()
    for g, nodes in ((p0, [("x", "Placeholder", CPU0, []), ("split", "Split", CPU0, ["x"]),
                           ("split/_send", "_Send", CPU0, ["split:1"]), ("out", "Identity", CPU0, ["out/_recv"]),
                           ("out/_recv", "_Recv", CPU0, [])]),
                     (p1, [("w", "VarHandleOp", CPU1, []), ("loop/Enter", "Enter", CPU1, ["split/_recv"]),
                           ("split/_recv", "_Recv", CPU1, []), ("loop/MatMul", "_MklMatMul", CPU1, ["loop/Enter", "w"]),
                           ("loop/Exit", "Exit", CPU1, ["loop/MatMul"])])):
        for name, op, device, inputs in nodes:
            n = g.node.add(name=name, op=op, device=device)
            n.input.extend(inputs)
    return [p0, p1]


def test_graphdef_nodes_edges_and_function_library(tmp_path):
    path = tmp_path / "graph.pb"
    path.write_bytes(user_graph().SerializeToString())
    g = load_graph(path)
    assert g.number_of_nodes() == 5 + 3 + 1
    assert g.nodes["loop"]["op"] == "While"
    assert g.nodes["loop"]["requested_device"] == "/device:CPU:1"
    assert g.nodes["loop"]["device"] == Device("cpu", 1)
    assert g.nodes["split"]["device"] is None  # no device requested
    assert g.nodes["loop_body_7/matmul"]["function"] == "loop_body_7"
    assert g.nodes["x"]["function"] == ""
    assert g.graph["functions"] == ["loop_body_7", "loop_cond_7"]
    # "split:1" is an output port of split; "^x" a control input.
    assert g.edges["split", "loop"] == {"control": False, "port": 1}
    assert g.edges["x", "loop"]["control"] is True
    # Function-body inputs "node:out:0" point at the node; "^matmul" at the same node as data too.
    assert g.has_edge("loop_body_7/matmul", "loop_body_7/tanh")
    assert g.edges["loop_body_7/matmul", "loop_body_7/next"]["control"] is True
    assert g.graph["dangling_inputs"] == 2  # "h" and "w" in the body are function arguments, not nodes


def test_pbtxt_reads_like_binary(tmp_path):
    binary, text = tmp_path / "g.pb", tmp_path / "g.pbtxt"
    binary.write_bytes(user_graph().SerializeToString())
    text.write_text(text_format.MessageToString(user_graph()))
    a, b = load_graph(binary), load_graph(text)
    assert dict(a.nodes(data="op")) == dict(b.nodes(data="op"))
    assert set(a.edges) == set(b.edges)


def _run_dir(tmp_path):
    run = tmp_path / "run"
    (run / "graphs" / "partitions").mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"status": "complete"}))
    (run / "graphs" / "graph.pb").write_bytes(user_graph().SerializeToString())
    for k, p in enumerate(partitions()):
        (run / "graphs" / "partitions" / f"{k}_CPU_{k}.pb").write_bytes(p.SerializeToString())
    return run


def test_run_directory_joins_requested_and_assigned_devices(tmp_path):
    g = load_graph(_run_dir(tmp_path))
    # Requested on CPU:0 in Python, assigned CPU:0 by the runtime.
    assert g.nodes["x"]["requested_device"] == "/device:CPU:0"
    assert g.nodes["x"]["assigned_device"] == CPU0
    # No request, placed on CPU:0: the assigned device wins.
    assert g.nodes["split"]["requested_device"] == ""
    assert g.nodes["split"]["device"] == Device("cpu", 0)
    assert g.nodes["split"]["partition"] == "partitions/0_CPU_0"
    # Runtime-only nodes are present with no request.
    assert g.nodes["split/_send"]["op"] == "_Send" and g.nodes["split/_send"]["requested_device"] == ""
    assert g.nodes["loop/MatMul"]["device"] == Device("cpu", 1)


def test_graph_set_keeps_user_and_runtime_views_apart(tmp_path):
    gs = load_graph_set(_run_dir(tmp_path))
    assert gs.user.number_of_nodes() == 9
    assert gs.runtime.number_of_nodes() == 10
    assert {a["device"] for _, a in gs.runtime.nodes(data=True)} == {Device("cpu", 0), Device("cpu", 1)}
    assert "loop_body_7/matmul" not in gs.runtime


def test_run_metadata_partition_and_function_graphs(tmp_path):
    meta = config_pb2.RunMetadata()
    for p in partitions():
        meta.partition_graphs.add().CopyFrom(p)
    fg = meta.function_graphs.add()
    fg.pre_optimization_graph.CopyFrom(user_graph())
    fg.partition_graphs.add().CopyFrom(partitions()[1])
    path = tmp_path / "step-0.pb"
    path.write_bytes(meta.SerializeToString())
    gs = load_graph_set(path)
    assert gs.user.number_of_nodes() == 9
    assert gs.runtime.number_of_nodes() == 10  # the function partition repeats nodes of partition 1


@pytest.mark.parametrize("content", [b"", b"\x0a\xff\xff\xff\xff\x0f", b"node { name: 'a' op: "])
def test_bad_graph_files_are_input_errors(tmp_path, content):
    path = tmp_path / "graph.pb"
    path.write_bytes(content)
    with pytest.raises(InputError) as info:
        load_graph(path)
    assert str(path) in str(info.value)


def test_truncated_graphdef_is_an_input_error(tmp_path):
    data = user_graph().SerializeToString()
    path = tmp_path / "cut.pb"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError):
        load_graph(path)
