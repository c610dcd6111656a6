"""Loaders on artifacts that real TensorFlow runs produce here: a captured two-device run directory
(timelines, RunMetadata, per-device XSpace, graphs), a tf.profiler XSpace and its xprof trace_viewer JSON,
and TF2's RunMetadata of a function's graphs."""

import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from rnnprof.cli import main
from rnnprof.events import Device, Kind
from rnnprof.traces.graphs import load_graph, load_graph_set
from rnnprof.traces import detect_format, load_events

pytestmark = pytest.mark.slow

PROGRAM = textwrap.dedent('''
    import sys
    from pathlib import Path
    import numpy as np
    import tensorflow as tf
    from rnnprof.rundir.writer import RunWriter
    from rnnprof.recording.session import write_device_xspace

    out = Path(sys.argv[1])
    tf1 = tf.compat.v1

    def build(iterations):
        g = tf.Graph()
        with g.as_default():
            outs = []
            for d in range(2):
                with tf.device(f"/cpu:{d}"):
                    x = tf1.placeholder(tf.float32, [8, 8], name=f"x{d}")
                    w = tf1.get_variable(f"w{d}", [8, 8])
                    _, y = tf1.while_loop(lambda i, h: i < iterations,
                                          lambda i, h: (i + 1, tf.tanh(tf.matmul(h, w))), [tf.constant(0), x])
                    outs.append(tf.reduce_sum(y))
            with tf.device("/cpu:0"):
                total = tf.add_n(outs)
            init = tf1.global_variables_initializer()
        return g, total, init

    for label, iterations in (("long", 6), ("short", 1)):
        g, total, init = build(iterations)
        writer = RunWriter(out / label, command=["test"])
        config = tf1.ConfigProto(device_count={"CPU": 2}, inter_op_parallelism_threads=4)
        with tf1.Session(graph=g, config=config) as sess:
            sess.run(init)
            feed = {g.get_tensor_by_name(f"x{d}:0"): np.ones((8, 8)) for d in range(2)}
            opts = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE, output_partition_graphs=True)
            writer.write_graph(g.as_graph_def())
            collected = []
            for step in range(2):
                md = tf1.RunMetadata()
                sess.run(total, feed, options=opts, run_metadata=md)
                writer.write_step(step, md)
                collected.append((step, md))
            write_device_xspace(writer, collected, "steps")
        writer.finish()
''')

# A TF2 program under tf.profiler, then xprof's trace_viewer conversion of a copy of its XSpace.
PROFILE = textwrap.dedent('''
    import shutil, sys
    from pathlib import Path
    import tensorflow as tf

    out = Path(sys.argv[1])

    @tf.function
    def f(x):
        return tf.while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, tf.tanh(tf.matmul(h, h))), [0, x])[1]

    x = tf.ones((16, 16))
    f(x)
    tf.profiler.experimental.start(str(out / "logdir"))
    for step in range(2):
        with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
            f(x)
    tf.profiler.experimental.stop()
    xplane = next((out / "logdir").rglob("*.xplane.pb"))
    copy = out / "copy" / "run"
    copy.mkdir(parents=True)
    shutil.copy(xplane, copy / xplane.name)
    from xprof.convert.raw_to_tool_data import xspace_to_tool_data
    data, _ = xspace_to_tool_data([str(copy / xplane.name)], "trace_viewer", {})
    (out / "trace_viewer.json").write_text(data if isinstance(data, str) else data.decode())
    (out / "xplane_path").write_text(str(xplane))

    # TF2's RunMetadata of a function traced while run metadata is on: function graphs, no step stats.
    from tensorflow.python.eager import context

    context.context().enable_run_metadata()

    @tf.function
    def g(x):
        return tf.tanh(tf.matmul(x, x))

    g(x)
    (out / "functions.pb").write_bytes(context.context().export_run_metadata().SerializeToString())
    context.context().disable_run_metadata()
''')


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf")
    from processes import run_together

    # one interpreter, one TensorFlow import: the TF1 sessions first, then the TF2 profiler's programs
    (done,) = run_together([[sys.executable, "-c", PROGRAM + PROFILE, str(out)]])
    assert done.returncode == 0, done.stderr
    return out


def _ops(table):
    keep = table.select(table.kind != Kind.ANNOTATION)
    labels = [d.label for d in keep.devices]
    return Counter((labels[d], int(s)) for d, s in zip(keep.device, keep.step))


def test_run_dir_timelines_runmetadata_and_device_xspace_agree(artifacts):
    run = artifacts / "long"
    assert detect_format(run) == "rundir"
    from_timelines = load_events(run)
    from_run_metadata = load_events([run / "run_metadata" / "step-0.pb", run / "run_metadata" / "step-1.pb"])
    xspace = next((run / "plugins" / "profile").rglob("*.xplane.pb"))
    assert detect_format(xspace) == "xplane"
    from_xspace = load_events(xspace)
    expected = _ops(from_timelines)
    assert set(from_timelines.devices) == {Device("cpu", 0), Device("cpu", 1)}
    assert {k[1] for k in expected} == {0, 1}
    assert _ops(from_run_metadata) == expected
    assert _ops(from_xspace) == expected


def test_captured_graphs_requested_vs_assigned(artifacts):
    g = load_graph(artifacts / "long")
    matmuls = [a for _, a in g.nodes(data=True) if a["op"] == "MatMul" and a["function"]]
    assert {a["requested_device"] for a in matmuls} == {"/device:CPU:0", "/device:CPU:1"}
    runtime = load_graph_set(artifacts / "long").runtime
    assert {a["device"] for _, a in runtime.nodes(data=True)} == {Device("cpu", 0), Device("cpu", 1)}
    assert all(a["assigned_device"] for _, a in runtime.nodes(data=True))


def test_count_ops_vs_on_two_captures(artifacts, capsys):
    import json

    from rich.console import Console

    console = Console(record=True, width=10_000)
    with console.capture() as cap:
        assert main(["count-ops", "--json", str(artifacts / "long"), "--vs", str(artifacts / "short")],
                    console=console) == 0
    doc = json.loads(cap.get())
    ratios = {r["metric"]: r["ratio"] for r in doc["ratios"]}
    # Same graph, more iterations: graph sizes equal, kernel launches grow with the loop.
    assert ratios["runtime graph ops (all)"] == pytest.approx(1.0)
    assert ratios["CPU kernels per step"] > 2.0
    long_ops = _ops(load_events(artifacts / "long"))
    assert doc["left"]["kernels"]["per_step"]["cpu_kernels"] == sum(long_ops.values()) / 2


def test_tf_profiler_xplane_and_trace_viewer_agree(artifacts):
    xplane = Path((artifacts / "xplane_path").read_text())
    from_xplane = load_events(xplane)
    from_viewer = load_events(artifacts / "trace_viewer.json")
    assert from_viewer.source_format == "xprof-trace-viewer"
    ops = lambda t: Counter(t.text(t.op_type[t.kind != Kind.ANNOTATION]))  # noqa: E731
    assert ops(from_xplane) == ops(from_viewer)
    assert ops(from_xplane)["MatMul"] + ops(from_xplane)["_MklMatMul"] >= 6  # 3 per step, 2 steps
    assert list(from_xplane.steps()) == [0, 1] == list(from_viewer.steps())


def _captures(artifacts) -> dict:
    """Every file and folder the captures wrote that rnnprof reads, with the format it is."""
    run = artifacts / "long"
    found = {run: "rundir", artifacts / "logdir": "xplane-dir", artifacts / "trace_viewer.json": "chrome-json",
             Path((artifacts / "xplane_path").read_text()): "xplane", artifacts / "functions.pb": "run-metadata-graphs"}
    patterns = {"timelines/*.trace.json.gz": "chrome-json", "run_metadata/*.pb": "run-metadata",
                "plugins/profile/*/*.xplane.pb": "xplane", "graphs/**/*.pb": "graphdef", "graphs/**/*.pbtxt": "graphdef-text"}
    for pattern, fmt in patterns.items():
        files = sorted(run.glob(pattern))
        assert files, pattern
        found.update(dict.fromkeys(files, fmt))
    return found


def test_every_capture_is_sniffed_as_exactly_one_format(artifacts):
    from rnnprof.traces.registry import REGISTRY, probe

    captures = _captures(artifacts)
    # Kineto traces come from PyTorch (tests/data); no capture writes a graphs folder without a manifest, nor a
    # folder of rank files.
    assert {f.name for f in REGISTRY} - set(captures.values()) == {"kineto", "graphs-dir", "rank-folder"}
    for path, expected in captures.items():
        target = probe(path)
        assert [f.name for f in REGISTRY if f.sniff(target)] == [expected], path


def test_reading_any_capture_parses_each_protobuf_once(artifacts, monkeypatch):
    from test_loaders import ParseCounter

    from rnnprof.inputs.read import read_inputs

    counter = ParseCounter(monkeypatch)
    run = artifacts / "long"
    for path in _captures(artifacts):
        counter.calls.clear()
        inputs = read_inputs([str(path)])
        assert inputs.events is not None or inputs.graph_set is not None, path
        assert max(counter.calls.values(), default=1) == 1, (path, counter.calls)
    counter.calls.clear()
    read_inputs([str(run)])  # timelines and graphs: every graph file once, the RunMetadata not needed
    graph_files = sorted((run / "graphs").rglob("*.pb"))
    assert counter.of(*graph_files) == Counter({("GraphDef", f.name): 1 for f in graph_files})


def test_tf2_function_graphs_count_as_user_and_runtime_graphs(artifacts):
    from tensorflow.core.protobuf import config_pb2

    meta = config_pb2.RunMetadata.FromString((artifacts / "functions.pb").read_bytes())
    (function,) = meta.function_graphs
    gs = load_graph_set(artifacts / "functions.pb")
    assert gs.user.number_of_nodes() == len(function.pre_optimization_graph.node) + sum(
        len(f.node_def) for f in function.pre_optimization_graph.library.function)
    assert "MatMul" in {a["op"] for _, a in gs.user.nodes(data=True)}
    assert gs.runtime is not None and gs.runtime.number_of_nodes() > 0
