"""TensorFlow's oneDNN build runs some ops under rewritten names (``Conv2D`` as ``_MklNativeConv2D``): every TF
loader names them by the op of the user's graph and keeps the rewritten name as a detail. No TensorFlow needed
except for the check against the installed registry."""

from __future__ import annotations

import json

import networkx as nx
import pytest

from rnnprof.cli import main
from rnnprof.events import Device, EventTableBuilder, Kind
from rnnprof.events.names import ONEDNN_OPS, user_op

# Names seen in this project's own ResNet/NMT runs on an AVX-512 CPU, and in TensorFlow 2.21's op registry.
REWRITTEN = {
    "_MklNativeConv2D": "Conv2D",
    "_MklNativeConv2DBackpropFilter": "Conv2DBackpropFilter",
    "_MklNativeConv2DBackpropInput": "Conv2DBackpropInput",
    "_MklNativeFusedBatchNormV3": "FusedBatchNormV3",
    "_MklNativeFusedBatchNormGradV3": "FusedBatchNormGradV3",
    "_MklNativeMaxPool": "MaxPool",
    "_MklNativeMaxPoolGrad": "MaxPoolGrad",
    "_MklMatMul": "MatMul",
    "_MklConv2D": "Conv2D",  # oneDNN's own layout (older builds)
    "_MklRelu": "Relu",
    "_MklBatchMatMulV2": "BatchMatMulV2",
    "_MklEinsum": "Einsum",
    "_MklQuantizedConv2DWithBiasAndRelu": "QuantizedConv2DWithBiasAndRelu",
    "_MklNativeDepthwiseConv2dNative": "DepthwiseConv2dNative",
    # grappler's fused ops run by oneDNN: the fused op the optimized graph holds either way
    "_MklNativeFusedBatchNormEx": "_FusedBatchNormEx",
    "_MklNativeFusedConv2D": "_FusedConv2D",
    "_MklFusedConv2D": "_FusedConv2D",
    "_MklNativeFusedMatMul": "_FusedMatMul",
    "_MklNativeFusedConv3D": "_FusedConv3D",
}
# Fusions only oneDNN makes: no one op of the user's graph behind them, so they keep their names.
ONEDNN_FUSIONS = ["_MklLayerNorm", "_MklFusedInstanceNorm", "_MklFusedMish", "_MklSwish", "_MklFusedBatchMatMulV2",
                  "_MklConv2DWithBias", "_MklNativeConv2DWithBias", "_MklPadWithConv2D", "_MklNativePadWithConv2D",
                  "_MklPadWithFusedConv2D", "_MklNativePadWithFusedConv2D", "_MklConv2DBackpropFilterWithBias",
                  "_MklNativeConv2DBackpropFilterWithBias"]
# Kept as they are: user ops, grappler's own names, oneDNN's fusions, and names that merely look like a rewrite
# (a user's own op called _MklFoo is not TensorFlow's and is left alone).
KEPT = ["Conv2D", "MatMul", "_FusedConv2D", "_FusedBatchNormEx", *ONEDNN_FUSIONS, "__MklDummyConv2DWithBias",
        "_MklFoo", "_MklNativeFoo", "MklConv2D", "_mklnativeconv2d", "_MklNative", "_Mkl", "_MklNativeConv2D2",
        "tower_0/conv/_MklNativeConv2D", ""]


@pytest.mark.parametrize("rewritten,user", sorted(REWRITTEN.items()))
def test_rewritten_names_map_to_the_users_op(rewritten, user):
    assert user_op(rewritten) == user


@pytest.mark.parametrize("name", KEPT)
def test_other_names_are_kept(name):
    assert user_op(name) == name


def test_the_table_matches_the_installed_tensorflow_registry():
    """Every ``_Mkl*`` op TensorFlow registers is mapped to a registered op, or is one of oneDNN's own fusions."""
    pytest.importorskip("tensorflow")
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session

    ops = op_def_pb2.OpList.FromString(pywrap_tf_session.TF_GetBuffer(pywrap_tf_session.TF_GetAllOpList()))
    registered = {o.name for o in ops.op}
    onednn = {n for n in registered if n.startswith("_Mkl")}
    if not onednn:
        pytest.skip("this TensorFlow has no oneDNN ops")
    assert sorted(n for n in onednn if user_op(n) == n) == sorted(n for n in ONEDNN_FUSIONS if n in registered)
    assert sorted(n for n in onednn if user_op(n) not in registered) == []
    assert sorted({t for t in ONEDNN_OPS.values() if t not in registered}) == []


# -- loaders -----------------------------------------------------------------------------------------------------

CPU = "/job:localhost/replica:0/task:0/device:CPU:0"


def _timeline(ops: list[tuple[str, str]]) -> dict:
    """A TF1 ``timeline.Timeline`` document: one ``<device> Compute`` process, ``(node, op)`` events in order."""
    events = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": f"{CPU} Compute"}}]
    for k, (node, op) in enumerate(ops):
        events.append({"ph": "X", "pid": 1, "tid": 0, "ts": 10 * k, "dur": 5, "name": op,
                       "args": {"name": node, "op": op}})
    return {"traceEvents": events}


def test_timeline_loader_counts_the_users_op_and_keeps_the_kernel(tmp_path):
    from rnnprof.traces import tf_chrome

    table = tf_chrome.load_doc(tmp_path / "t.json", _timeline([
        ("tower_0/conv/Conv2D", "_MklNativeConv2D"), ("tower_0/conv2/Conv2D", "_MklNativeConv2D"),
        ("tower_0/mm", "_MklMatMul"), ("tower_0/relu", "Relu"), ("tower_0/norm", "_MklLayerNorm"),
        ("_MklNativeFusedConv2D", "_MklNativeFusedConv2D"),  # no node name: the name is the op too
        ("tower_0/ar", "CollectiveReduceV2")]), tf_chrome.TF1_FORMAT)
    ops = [table.strings[c] for c in table.op_type]
    names = [table.strings[c] for c in table.name]
    assert ops == ["Conv2D", "Conv2D", "MatMul", "Relu", "_MklLayerNorm", "_FusedConv2D", "CollectiveReduceV2"]
    assert names[:5] == ["tower_0/conv/Conv2D", "tower_0/conv2/Conv2D", "tower_0/mm", "tower_0/relu", "tower_0/norm"]
    assert names[5] == "_FusedConv2D"
    assert table.metadata.ran_as == {"Conv2D": ("_MklNativeConv2D",), "MatMul": ("_MklMatMul",),
                                     "_FusedConv2D": ("_MklNativeFusedConv2D",)}
    assert list(table.metadata.ran_as) == sorted(table.metadata.ran_as)
    assert table.kind[-1] == Kind.COMMUNICATION and (table.kind[:-1] == Kind.HOST_OP).all()


def test_xplane_host_ops_count_the_users_op(tmp_path):
    from rnnprof.traces import xplane

    builder = EventTableBuilder(xplane.FORMAT)
    lane = (Device("host"), "tf_Compute", Kind.HOST_OP)
    for k, raw in enumerate(["tower_0/conv/Conv2D:_MklNativeConv2D", "tower_0/bn:_MklNativeFusedBatchNormEx",
                             "tower_0/mm:MatMul"]):
        xplane.add_event(builder, [], lane, True, raw, float(k), 1.0, {})
    # the op given by a stat (no "node:Op" name)
    xplane.add_event(builder, [], lane, True, "_MklNativeConv2DBackpropInput", 5.0, 1.0,
                     {"tf_op": "tower_0/grad:_MklNativeConv2DBackpropInput"})
    # a GPU kernel's name is never an op name
    xplane.add_event(builder, [], (Device("gpu"), "stream:7", Kind.KERNEL), False, "_MklNativeConv2D", 6.0, 1.0, {})
    table = builder.build()
    assert [table.strings[c] for c in table.op_type] == [
        "Conv2D", "_FusedBatchNormEx", "MatMul", "Conv2DBackpropInput", "_MklNativeConv2D"]
    assert table.metadata.ran_as == {"Conv2D": ("_MklNativeConv2D",),
                                     "Conv2DBackpropInput": ("_MklNativeConv2DBackpropInput",),
                                     "_FusedBatchNormEx": ("_MklNativeFusedBatchNormEx",)}
    assert list(table.metadata.ran_as) == sorted(table.metadata.ran_as)


def _graph_def(nodes: list[tuple[str, str]], device: str = CPU):
    from tensorboard.compat.proto import graph_pb2

    graph = graph_pb2.GraphDef()
    for name, op in nodes:
        node = graph.node.add()
        node.name, node.op, node.device = name, op, device
    return graph


def test_graphs_name_nodes_by_the_users_op_and_keep_the_kernel():
    from rnnprof.analyzers.opcount import count_graph
    from rnnprof.traces.formats import GraphDefs
    from rnnprof.traces.graphs import graph_set, merged_graph

    user = _graph_def([("conv", "Conv2D"), ("conv2", "Conv2D"), ("mm", "MatMul"), ("ln", "Mean")])
    runtime = _graph_def([("conv", "_MklNativeConv2D"), ("conv2", "Conv2D"), ("mm", "_MklMatMul"),
                          ("ln", "_MklLayerNorm"), ("send", "_Send")])
    defs = GraphDefs(user=[("graph.pb", user, "")], runtime=[("partitions/0.pb", runtime, "")])
    graphs = graph_set(defs)
    counts = count_graph(graphs.runtime)
    assert counts.by_type == {"Conv2D": 2, "MatMul": 1, "_MklLayerNorm": 1, "_Send": 1}
    assert counts.ran_as == {"Conv2D": {"_MklNativeConv2D": 1}, "MatMul": {"_MklMatMul": 1}}
    assert count_graph(graphs.user).ran_as == {}
    merged = merged_graph(defs)
    assert isinstance(merged, nx.DiGraph)
    assert merged.nodes["conv"]["op"] == "Conv2D" and merged.nodes["conv"]["kernel"] == "_MklNativeConv2D"
    assert "kernel" not in merged.nodes["conv2"]


def _run_metadata(path, onednn: bool):
    """A RunMetadata of one step on one CPU: step stats and the partition graph, as a oneDNN build (or not)
    records them; the build without oneDNN runs each op longer (70 µs, not 50), so every op type shows in a diff."""
    from tensorboard.compat.proto import config_pb2

    conv, mm = ("_MklNativeConv2D", "_MklMatMul") if onednn else ("Conv2D", "MatMul")
    nodes = [("tower_0/conv", conv), ("tower_0/conv2", conv), ("tower_0/mm", mm), ("tower_0/relu", "Relu")]
    meta = config_pb2.RunMetadata()
    dev = meta.step_stats.dev_stats.add()
    dev.device = CPU
    for k, (name, op) in enumerate(nodes):
        stats = dev.node_stats.add()
        stats.node_name = name
        stats.all_start_micros = 1_000_000 + 100 * k
        stats.op_end_rel_micros = stats.all_end_rel_micros = 50 if onednn else 70
        stats.timeline_label = f"{name} = {op}(x)"
    meta.partition_graphs.add().CopyFrom(_graph_def(nodes))
    path.write_bytes(meta.SerializeToString())
    return path


def test_count_ops_of_a_onednn_run_counts_conv2d_and_shows_the_kernel(tmp_path, capsys):
    pb = _run_metadata(tmp_path / "step-1.pb", onednn=True)
    assert main(["count-ops", str(pb), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["runtime_graph"]["by_type"] == {"Conv2D": 2, "MatMul": 1, "Relu": 1}
    assert doc["runtime_graph"]["ran_as"] == {"Conv2D": {"_MklNativeConv2D": 2}, "MatMul": {"_MklMatMul": 1}}
    assert doc["kernels"]["by_type"]["Conv2D"] == {"cpu_kernels": 2, "gpu_kernels": 0}
    assert doc["kernels"]["ran_as"] == {"Conv2D": ["_MklNativeConv2D"], "MatMul": ["_MklMatMul"]}
    assert main(["count-ops", str(pb)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Conv2D as _MklNativeConv2D (2)" in text  # the runtime graph's note
    assert "Conv2D as _MklNativeConv2D; MatMul as _MklMatMul" in text  # the kernels' note


def test_diff_of_runs_with_and_without_onednn_sees_the_same_ops(tmp_path, capsys):
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    on = _run_metadata(tmp_path / "on" / "step-1.pb", onednn=True)
    off = _run_metadata(tmp_path / "off" / "step-1.pb", onednn=False)
    assert main(["diff", str(on), str(off), "--json", "--top", "0"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_type = {r["key"]: r for r in doc["ops"]["by_type"]}
    assert set(by_type) == {"Conv2D", "MatMul", "Relu"}
    assert all(r["status"] not in ("appeared", "vanished") for r in by_type.values())
    assert by_type["Conv2D"]["count_a_per_step"] == by_type["Conv2D"]["count_b_per_step"] == 2
    assert doc["ops"]["appeared"] == doc["ops"]["vanished"] == []
    assert all(r["delta"] == 0 for r in doc["graphs"]["counts"]), doc["graphs"]["counts"]
