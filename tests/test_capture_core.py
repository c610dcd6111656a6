"""The run directory writer, step_stats -> Chrome trace / XSpace, on built and on real TF steps."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import stat
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from rnnprof.errors import UsageError
from rnnprof import rundir
from rnnprof.rundir.writer import RunWriter, atomic_write_bytes, default_run_dir, prepare_out_dir, safe_name
from rnnprof.rundir.chrome_trace import OpEvent, pack_threads, parse_label, split_device, step_stats_to_chrome

DEV0 = "/job:localhost/replica:0/task:0/device:CPU:0"
DEV1 = "/job:localhost/replica:0/task:0/device:CPU:1"


# -- built inputs ---------------------------------------------------------------------------------

def _node(name, label, start_us, dur_us, nbytes=0):
    out = [NS(tensor_description=NS(allocation_description=NS(requested_bytes=nbytes)))] if nbytes else []
    return NS(node_name=name, timeline_label=label, all_start_nanos=int(start_us * 1000),
              all_end_rel_nanos=int(dur_us * 1000), output=out)


def _attr(**values):
    return {k: NS(s=v.encode(), i=0) if isinstance(v, str) else NS(s=b"", i=v) for k, v in values.items()}


def _graph(*nodes):
    return NS(node=list(nodes))


def _gnode(name, op, device, inputs=(), **attrs):
    return NS(name=name, op=op, device=device, input=list(inputs), attr=_attr(**attrs))


def _two_device_step():
    stats = NS(dev_stats=[
        NS(device=DEV0, node_stats=[
            _node("a", "a = MatMul(x, w)", 100, 50, nbytes=1024),
            _node("b", "b = Tanh(a)", 110, 20),  # nested in a
            _node("c", "c = Add(x, y)", 120, 60),  # overlaps a without nesting
        ]),
        NS(device=DEV1, node_stats=[_node("d", "d = Mul(a/_1, z)", 200, 10)]),
    ])
    partitions = [
        _graph(_gnode("a", "MatMul", DEV0), _gnode("a/_0", "_Send", DEV0, ["a"], tensor_name="edge_3_a",
                                                   send_device=DEV0, recv_device=DEV1, send_device_incarnation=1)),
        _graph(_gnode("a/_1", "_Recv", DEV1, tensor_name="edge_3_a", send_device=DEV0, recv_device=DEV1,
                      send_device_incarnation=1),
               _gnode("d", "Mul", DEV1, ["a/_1", "z"])),
    ]
    return stats, partitions


def test_device_lane_and_label_parsing():
    assert split_device(DEV0) == (DEV0, "ops")
    assert split_device("/job:localhost/replica:0/task:0/device:GPU:0/stream:7") == (
        "/job:localhost/replica:0/task:0/device:GPU:0", "stream:7")
    assert split_device("/device:GPU:1/memcpy") == ("/device:GPU:1", "memcpy")
    assert parse_label("x = _MklMatMul(a, ^b)", "x") == ("_MklMatMul", ("a", "^b"))
    assert parse_label("", "MatMul:MatMul")[0] == "MatMul"


def _max_concurrency(intervals):
    """The most intervals open at one instant (one ending when another starts is not concurrent)."""
    edges = sorted([(end, -1) for start, end in intervals] + [(start, 1) for start, end in intervals])
    depth = most = 0
    for _, step in edges:
        depth += step
        most = max(most, depth)
    return most


def assert_threads_never_overlap(events):
    by_thread = {}
    for e in events:
        by_thread.setdefault((e.device, e.thread), []).append(e)
    for (_, thread), group in by_thread.items():
        group.sort(key=lambda e: e.start_us)
        for before, after in zip(group, group[1:]):
            assert after.start_us >= before.end_us, f"{after.node} overlaps {before.node} in {thread}"


def test_pack_threads_puts_nested_and_overlapping_events_in_separate_threads():
    spans = [(0, 10), (1, 2), (5, 10), (6, 1), (12, 5), (12, 1), (17, 3), (30, 1), (30, 0), (31, 0)]
    events = [OpEvent(DEV0, "ops", f"n{k}", "Op", start, dur) for k, (start, dur) in enumerate(spans)]
    events.append(OpEvent(DEV0, "stream:7", "k", "Kernel", 1, 5))
    events.append(OpEvent(DEV1, "ops", "other", "Op", 1, 5))
    pack_threads(events)
    assert_threads_never_overlap(events)
    thread = {e.node: e.thread for e in events}
    assert thread["n0"] == "ops" and thread["n1"] == "ops/2"  # nested in n0: not in its thread
    assert thread["n2"] == "ops/2" and thread["n3"] == "ops/3"  # n2 starts after n1 ends; n3 nests in n2
    assert thread["n4"] == thread["n6"] == "ops"  # n6 starts as n4 ends: touching shares a thread
    assert thread["k"] == "stream:7" and thread["other"] == "ops"  # lanes and devices are packed apart
    lane = [e for e in events if e.device == DEV0 and e.lane == "ops"]
    assert len({e.thread for e in lane}) == _max_concurrency([(e.start_us, e.end_us) for e in lane]) == 3


def test_device_xspace_lines_hold_no_overlapping_ops():
    pytest.importorskip("tensorflow")
    from rnnprof.rundir.xspace import build_xspace

    stats, _ = _two_device_step()  # b nests in a, c overlaps a
    plane = build_xspace([(0, stats)]).planes[0]
    names = {k: m.name for k, m in plane.event_metadata.items()}
    lines = {line.name: sorted((e.offset_ps, e.offset_ps + e.duration_ps, names[e.metadata_id]) for e in line.events)
             for line in plane.lines}
    for name, events in lines.items():
        for before, after in zip(events, events[1:]):
            assert after[0] >= before[1], f"{after[2]} overlaps {before[2]} on {name}"
    assert [e[2] for e in lines[f"{DEV0} ops"]] == ["a:MatMul"]
    assert [e[2] for e in lines[f"{DEV0} ops/2"]] == ["b:Tanh"]
    assert [e[2] for e in lines[f"{DEV0} ops/3"]] == ["c:Add"]


def _overview_steps(xplane: Path, tmp_path: Path) -> tuple[dict, list[dict]]:
    """xprof's overview page for an xplane: the step table's properties and its rows by column id."""
    table = next(t for t in json.loads(xprof_tool(xplane, tmp_path, "overview_page"))
                 if any(c["id"] == "stepTimeMs" for c in t.get("cols", [])))
    ids = [c["id"] for c in table["cols"]]
    return table["p"], [{k: c.get("v") for k, c in zip(ids, row["c"])} for row in table["rows"]]


def test_device_xspace_gives_xprof_overview_a_step_time_per_step(tmp_path):
    pytest.importorskip("xprof")
    from rnnprof.rundir.xspace import build_xspace

    stats, _ = _two_device_step()  # ops from 100 µs (a) to 210 µs (d)
    later = NS(dev_stats=[NS(device=d.device, node_stats=[
        _node(n.node_name, n.timeline_label, n.all_start_nanos / 1000 + 1000, 2 * n.all_end_rel_nanos / 1000)
        for n in d.node_stats]) for d in stats.dev_stats])  # from 1100 µs (a) to 1240 µs (c)
    xplane = tmp_path / "run_devices" / "host.xplane.pb"
    xplane.parent.mkdir()
    xplane.write_bytes(build_xspace([(4, stats), (5, later)], "host").SerializeToString())
    summary, rows = _overview_steps(xplane, tmp_path / "xprof")
    assert [row["stepnum"] for row in rows] == ["train 4", "train 5"]
    assert [row["stepTimeMs"] for row in rows] == pytest.approx([0.110, 0.140])
    assert float(summary["steptime_ms_average"]) > 0
    assert all(row["hostComputeTimeMs"] > 0 for row in rows)  # the ops belong to their steps


def test_chrome_trace_from_built_step_has_devices_lanes_and_transfer_flow():
    stats, partitions = _two_device_step()
    trace = step_stats_to_chrome(stats, 7, partitions)
    events = trace["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert sorted(processes.values()) == [DEV0, DEV1]
    ops = [e for e in events if e["ph"] == "X"]
    assert {e["args"]["name"] for e in ops} == {"a", "b", "c", "d"}
    assert all(e["args"]["step"] == 7 for e in ops)
    a = next(e for e in ops if e["args"]["name"] == "a")
    assert (a["ts"], a["dur"], a["name"], a["args"]["bytes"]) == (100.0, 50.0, "MatMul", 1024)
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    c = next(e for e in ops if e["args"]["name"] == "c")
    b = next(e for e in ops if e["args"]["name"] == "b")
    assert threads[(a["pid"], a["tid"])] == "ops"
    assert threads[(b["pid"], b["tid"])] == "ops/2" and threads[(c["pid"], c["tid"])] == "ops/3"
    start = [e for e in events if e["ph"] == "s"]
    finish = [e for e in events if e["ph"] == "f"]
    assert len(start) == len(finish) == 1
    assert processes[start[0]["pid"]] == DEV0 and processes[finish[0]["pid"]] == DEV1
    # Both ends lie strictly inside their ops (a viewer binds each to the slice enclosing it):
    # the arrow leaves near the end of the producer a and arrives near the start of the reader d.
    assert a["ts"] + a["dur"] / 2 <= start[0]["ts"] < a["ts"] + a["dur"]
    assert 200.0 < finish[0]["ts"] <= 205.0 and finish[0]["args"]["tensor"] == "edge_3_a"
    assert finish[0]["args"]["key"].startswith(f"{DEV0};0000000000000001;{DEV1};edge_3_a")
    assert trace["otherData"] == {"producer": "rnnprof", "version": 1, "step": 7}


DEV2 = "/job:localhost/replica:0/task:0/device:CPU:2"


def _const(name, value, device):
    return NS(name=name, op="Const", device=device, input=[],
              attr={"value": NS(tensor=NS(int_val=[value], int64_val=[]))})


def _enclosing(events, point):
    """The X slice a flow event binds to, as Perfetto binds it: same pid and tid, ts within the slice."""
    return [e for e in events if e["ph"] == "X" and e["pid"] == point["pid"] and e["tid"] == point["tid"]
            and e["ts"] <= point["ts"] <= e["ts"] + e["dur"]]


def test_ring_collectives_become_arrows_from_each_member_to_the_next():
    devices = [DEV0, DEV1, DEV2]
    # Instance 7 (V1, keys as attrs) runs twice per step, as inside a loop; instance 8 is V2 (keys as inputs).
    stats = NS(dev_stats=[NS(device=d, node_stats=[
        _node(f"ar{k}", f"ar{k} = CollectiveReduce(g{k})", 100 + k, 50),
        _node(f"ar{k}", f"ar{k} = CollectiveReduce(g{k})", 300 + k, 50),
        _node(f"v2_{k}", f"v2_{k} = CollectiveReduceV2(g{k}, size, gk, ik)", 500 + k, 30),
        _node(f"x{k}", f"x{k} = Add(a, b)", 600, 5),
    ]) for k, d in enumerate(devices)])
    partitions = [_graph(_gnode(f"ar{k}", "CollectiveReduce", d, [f"g{k}"], group_key=1, instance_key=7),
                         _gnode(f"v2_{k}", "CollectiveReduceV2", d, [f"g{k}", f"size{k}", f"gk{k}", f"ik{k}"]),
                         _const(f"size{k}", 3, d), _const(f"gk{k}", 1, d), _const(f"ik{k}", 8, d),
                         _gnode(f"x{k}", "Add", d))
                  for k, d in enumerate(devices)]
    events = step_stats_to_chrome(stats, 3, partitions)["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    starts = {e["id"]: e for e in events if e["ph"] == "s" and e["cat"] == "collective"}
    ends = {e["id"]: e for e in events if e["ph"] == "f" and e["cat"] == "collective"}
    assert set(starts) == set(ends) and len(starts) == 3 * 3  # (2 runs of instance 7 + 1 of 8) x 3 members
    ring = {(DEV0, DEV1), (DEV1, DEV2), (DEV2, DEV0)}
    for instance, runs in ((7, 2), (8, 1)):
        ids = [i for i, e in starts.items() if e["args"]["instance_key"] == instance]
        assert len(ids) == 3 * runs
        assert {(processes[starts[i]["pid"]], processes[ends[i]["pid"]]) for i in ids} == ring
        for i in ids:
            sender, receiver = _enclosing(events, starts[i]), _enclosing(events, ends[i])
            assert len(sender) == len(receiver) == 1
            assert sender[0]["args"]["name"].startswith("ar" if instance == 7 else "v2_")
            assert receiver[0]["args"]["name"].startswith("ar" if instance == 7 else "v2_")
            assert sender[0]["ts"] // 100 == receiver[0]["ts"] // 100  # the same run of the loop
            assert starts[i]["ts"] <= ends[i]["ts"]


def test_flow_ends_bind_to_their_own_op_when_neighbours_touch_it_on_the_wall_clock():
    # Real step_stats carry wall-clock nanoseconds; as microseconds near 1.8e15 a double keeps about
    # 0.25 µs. Each op an arrow leaves or reaches is touched by the ops before and after it.
    t0 = 1_795_404_321_885_604_000  # ns

    def wall(name, label, start_us, dur_us):
        return NS(node_name=name, timeline_label=label, all_start_nanos=t0 + int(start_us * 1000),
                  all_end_rel_nanos=int(dur_us * 1000), output=[])

    def touching(device_index, name, label, start_us, dur_us):
        return [wall(f"before{device_index}_{name}", "Const", start_us - 4, 4), wall(name, label, start_us, dur_us),
                wall(f"after{device_index}_{name}", "Const", start_us + dur_us, 4)]

    stats = NS(dev_stats=[
        NS(device=DEV0, node_stats=touching(0, "p", "p = MatMul(x, w)", 10, 5)
           + touching(0, "ar0", "ar0 = CollectiveReduce(g0)", 40, 30)),
        NS(device=DEV1, node_stats=touching(1, "r", "r = Mul(p/_1, z)", 20, 3)
           + touching(1, "ar1", "ar1 = CollectiveReduce(g1)", 41, 30)),
    ])
    partitions = [
        _graph(_gnode("p", "MatMul", DEV0), _gnode("p/_0", "_Send", DEV0, ["p"], tensor_name="edge_p",
                                                   send_device=DEV0, recv_device=DEV1, send_device_incarnation=1),
               _gnode("ar0", "CollectiveReduce", DEV0, ["g0"], group_key=1, instance_key=5)),
        _graph(_gnode("p/_1", "_Recv", DEV1, tensor_name="edge_p", send_device=DEV0, recv_device=DEV1,
                      send_device_incarnation=1),
               _gnode("r", "Mul", DEV1, ["p/_1", "z"]),
               _gnode("ar1", "CollectiveReduce", DEV1, ["g1"], group_key=1, instance_key=5)),
    ]
    events = step_stats_to_chrome(stats, 0, partitions)["traceEvents"]
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert set(starts) == set(ends) and len(starts) == 3  # p -> r, ar0 -> ar1, ar1 -> ar0
    bound = set()
    for i in starts:
        sender, receiver = _enclosing(events, starts[i]), _enclosing(events, ends[i])
        assert len(sender) == 1 and len(receiver) == 1, (starts[i], ends[i])
        bound.add((sender[0]["args"]["name"], receiver[0]["args"]["name"]))
    assert bound == {("p", "r"), ("ar0", "ar1"), ("ar1", "ar0")}


def test_a_collective_on_one_device_only_gets_no_arrow():
    stats = NS(dev_stats=[NS(device=DEV0, node_stats=[_node("ar", "ar = CollectiveReduce(g)", 10, 5)])])
    partitions = [_graph(_gnode("ar", "CollectiveReduce", DEV0, ["g"], group_key=1, instance_key=1))]
    assert not [e for e in step_stats_to_chrome(stats, 0, partitions)["traceEvents"] if e["ph"] in ("s", "f")]


# -- run directory writer --------------------------------------------------------------------------

def test_out_dir_refused_when_not_empty_and_force_keeps_foreign_files(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="--force"):
        prepare_out_dir(out)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    (out / rundir.MANIFEST).write_text("{}")
    (out / "timelines").mkdir()
    prepare_out_dir(out, force=True)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert (out / "notes.txt").read_text() == "mine"


def test_run_names_stay_inside_their_folder(tmp_path):
    for bad in ("../../etc", "/abs/path", "..", "a/b\\c"):
        name = safe_name(bad)
        assert "/" not in name and "\\" not in name and name not in ("", ".", "..")
        assert (tmp_path / name).resolve().parent == tmp_path.resolve()
    fresh = default_run_dir("../nmt", tmp_path)
    assert fresh.parent == tmp_path and not fresh.exists() and fresh.name.startswith("nmt-")


def test_atomic_write_leaves_no_temporary_files(tmp_path):
    atomic_write_bytes(tmp_path / "a" / "x.pb", b"123")
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["x.pb"]


def test_writer_manifest_lists_written_files(tmp_path):
    stats, partitions = _two_device_step()
    writer = RunWriter(tmp_path / "run", command=["rnnprof", "trace"], config={"model": "x"})
    assert json.loads((writer.path / rundir.MANIFEST).read_text())["status"] == rundir.STATUS_RUNNING
    rm = NS(step_stats=stats, partition_graphs=[], SerializeToString=lambda: b"rm")
    writer.write_step(3, rm)
    writer.finish()
    manifest = json.loads((writer.path / rundir.MANIFEST).read_text())
    assert manifest["status"] == "complete" and manifest["traced_steps"] == [3]
    assert manifest["captured"]["timelines"] == ["timelines/step-3.trace.json.gz"]
    assert manifest["captured"]["run_metadata"] == ["run_metadata/step-3.pb"]
    for rel in manifest["captured"]["timelines"] + manifest["captured"]["run_metadata"]:
        assert (writer.path / rel).is_file()
    assert set(manifest["versions"]) == {"rnnprof", "tensorflow", "python"}


def test_an_interrupt_between_a_timeline_in_place_and_its_step_leaves_them_agreeing(tmp_path):
    """An interrupt can land after a step's timeline was renamed into place and before the step was recorded
    (a fresh clone's run of tests/test_interrupt.py once listed timelines of steps 2-5 beside traced steps 2-4):
    the run's end lists the timeline and the step both."""
    stats, _ = _two_device_step()
    writer = RunWriter(tmp_path / "run", command=["rnnprof", "trace"])
    writer.write_step(2, NS(step_stats=stats, partition_graphs=[], SerializeToString=lambda: b"rm"))
    writer.write_step(3, NS(step_stats=stats, partition_graphs=[], SerializeToString=lambda: b"rm"))
    writer.manifest["traced_steps"].remove(3)  # as if interrupted before step 3 was recorded
    writer.manifest["captured"]["timelines"].remove("timelines/step-3.trace.json.gz")
    writer.finish(rundir.STATUS_INTERRUPTED)
    manifest = json.loads((writer.path / rundir.MANIFEST).read_text())
    assert manifest["traced_steps"] == [2, 3]
    assert manifest["captured"]["timelines"] == ["timelines/step-2.trace.json.gz", "timelines/step-3.trace.json.gz"]
    assert rundir.timeline_step("step-12.trace.json.gz") == 12 and rundir.timeline_step("step-x.trace.json.gz") is None


def test_session_config_in_the_manifest_is_read_from_the_config_proto():
    from tensorflow.core.protobuf import config_pb2

    from rnnprof.rundir.manifest import session_config_fields

    proto = config_pb2.ConfigProto(inter_op_parallelism_threads=3, intra_op_parallelism_threads=5,
                                   allow_soft_placement=True)
    assert session_config_fields(proto) == {"inter_op_threads": 3, "intra_op_threads": 5,
                                            "allow_soft_placement": True}
    assert session_config_fields(config_pb2.ConfigProto())["allow_soft_placement"] is False


# -- real TF: a two-device graph-mode program -----------------------------------------------------

class TwoDeviceToy:
    """Graph mode, two logical CPU devices, ops pinned to each, tensors crossing both ways."""

    def __init__(self, tf):
        import numpy as np

        tf1 = tf.compat.v1
        self.graph = tf.Graph()
        with self.graph.as_default():
            with tf.device("/cpu:0"):
                self.x = tf1.placeholder(tf.float32, [32, 32], name="x")
                h = tf.tanh(tf.matmul(self.x, tf1.get_variable("w0", [32, 32])))
            with tf.device("/cpu:1"):
                loss = tf.reduce_sum(tf.tanh(tf.matmul(h, tf1.get_variable("w1", [32, 32]))))
            self.train_op = tf1.train.GradientDescentOptimizer(0.01).minimize(loss)
            init = tf1.global_variables_initializer()
        config = tf1.ConfigProto(device_count={"CPU": 2}, inter_op_parallelism_threads=4,
                                 intra_op_parallelism_threads=1)
        self.session = tf1.Session(graph=self.graph, config=config)
        self.session.run(init)
        self.device_names = [DEV0, DEV1]
        self.feed = {self.x: np.ones((32, 32), dtype=np.float32)}

    def step(self, options=None, run_metadata=None):
        self.session.run(self.train_op, self.feed, options=options, run_metadata=run_metadata)


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    tf = pytest.importorskip("tensorflow")
    from rnnprof.recording.session import capture_after

    toy = TwoDeviceToy(tf)
    writer = RunWriter(tmp_path_factory.mktemp("toy") / "run", command=["test"])
    writer.set_devices(toy.device_names, "logical-cpu")
    for _ in range(2):
        toy.step()
    capture_after(writer, toy.step, 2, 2, graph=toy.graph)
    writer.finish()
    toy.session.close()
    return writer.path


def xprof_tool(xplane: Path, tmp_path: Path, tool: str):
    """Convert a copy (xprof writes cache files next to its input)."""
    from xprof.convert import raw_to_tool_data

    copy_dir = tmp_path / xplane.parent.name
    copy_dir.mkdir(parents=True, exist_ok=True)
    copy = shutil.copy(xplane, copy_dir)
    data, _ = raw_to_tool_data.xspace_to_tool_data([copy], tool, {})
    return data


@pytest.mark.slow
def test_toy_capture_timelines_have_both_devices_and_flows(toy_run):
    manifest = json.loads((toy_run / rundir.MANIFEST).read_text())
    assert manifest["status"] == "complete"
    assert manifest["traced_steps"] == [2, 3] and manifest["profiled_steps"] == [4, 5]
    for step in manifest["traced_steps"]:
        with gzip.open(toy_run / rundir.TIMELINES_DIR / rundir.timeline_name(step)) as handle:
            events = json.load(handle)["traceEvents"]
        processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
        assert sorted(processes.values()) == [DEV0, DEV1]
        ops = [e for e in events if e["ph"] == "X"]
        assert {processes[e["pid"]] for e in ops} == {DEV0, DEV1}
        assert {e["args"]["step"] for e in ops} == {step}
        starts = {e["id"]: processes[e["pid"]] for e in events if e["ph"] == "s"}
        ends = {e["id"]: processes[e["pid"]] for e in events if e["ph"] == "f"}
        assert starts and set(starts) == set(ends)
        assert {(starts[i], ends[i]) for i in starts} == {(DEV0, DEV1), (DEV1, DEV0)}


@pytest.mark.slow
def test_toy_capture_graphs_and_run_metadata_load(toy_run):
    from tensorflow.core.framework import graph_pb2
    from tensorflow.core.protobuf import config_pb2

    manifest = json.loads((toy_run / rundir.MANIFEST).read_text())
    partitions = sorted((toy_run / rundir.GRAPHS_DIR / rundir.PARTITIONS_DIR).glob("*.pb"))
    assigned = set()
    for path in partitions:
        graph = graph_pb2.GraphDef.FromString(path.read_bytes())
        devices = {n.device for n in graph.node}
        assert len(devices) == 1
        assigned |= devices
    assert assigned == {DEV0, DEV1}
    user = graph_pb2.GraphDef.FromString((toy_run / rundir.GRAPHS_DIR / rundir.GRAPH_FILE).read_bytes())
    assert {n.device for n in user.node if n.device} == {"/device:CPU:0", "/device:CPU:1"}  # requested
    for rel in manifest["captured"]["run_metadata"]:
        rm = config_pb2.RunMetadata.FromString((toy_run / rel).read_bytes())
        assert {d.device for d in rm.step_stats.dev_stats} == {DEV0, DEV1}


@pytest.mark.slow
def test_toy_capture_xplanes_convert_with_xprof(toy_run, tmp_path):
    manifest = json.loads((toy_run / rundir.MANIFEST).read_text())
    xplanes = [toy_run / rel for rel in manifest["captured"]["xplane"]]
    devices_view = [p for p in xplanes if p.parent.name.endswith(rundir.DEVICES_RUN_SUFFIX)]
    profiler_view = [p for p in xplanes if p not in devices_view]
    assert len(devices_view) == 1 and len(profiler_view) == 1
    assert devices_view[0].parent.name == profiler_view[0].parent.name + rundir.DEVICES_RUN_SUFFIX
    trace = json.loads(xprof_tool(devices_view[0], tmp_path, "trace_viewer"))
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert f"{DEV0} ops" in threads and f"{DEV1} ops" in threads
    named = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    assert any("MatMul" in e["name"] for e in named)
    profiled = json.loads(xprof_tool(profiler_view[0], tmp_path, "trace_viewer"))
    steps = {int(e["args"]["step_num"]) for e in profiled["traceEvents"]
             if e.get("ph") == "X" and str(e.get("name", "")).startswith("train ") and "step_num" in e.get("args", {})}
    assert steps == set(manifest["profiled_steps"])  # xprof found the step markers


# -- real TF: the built-in NMT on three devices -------------------------------------------------

NMT3 = ["--model", "nmt", "--devices", "3", "--units", "16", "--layers", "1", "--src-max-len", "6",
        "--tgt-max-len", "6", "--vocab-size", "100", "--batch-size", "4", "--warmup", "1", "--batches", "1",
        "--trace-steps", "3"]


@pytest.fixture(scope="module")
def nmt3_run(tmp_path_factory):
    pytest.importorskip("tensorflow")
    from rnnprof.cli import main

    out = tmp_path_factory.mktemp("nmt3") / "run"
    assert main(["trace", *NMT3, "--out", str(out)]) == 0
    return out


def _partition_nodes(run: Path) -> dict:
    """(device, node name) -> NodeDef over the run's partition graphs."""
    from tensorflow.core.framework import graph_pb2

    nodes = {}
    for path in (run / rundir.GRAPHS_DIR / rundir.PARTITIONS_DIR).glob("*.pb"):
        for node in graph_pb2.GraphDef.FromString(path.read_bytes()).node:
            nodes[(node.device, node.name)] = node
    return nodes


def _intended_transfer_ends(nodes: dict, tensor: str, src: str, dst: str) -> tuple[set, set]:
    """Ops an arrow for rendezvous ``tensor`` may leave (the _Send or what it sends) and reach
    (the _Recv or an op reading it), from the partition graphs."""
    send = [n for (d, _), n in nodes.items() if d == src and n.op == "_Send"
            and n.attr["tensor_name"].s.decode() == tensor]
    recv = [n for (d, _), n in nodes.items() if d == dst and n.op == "_Recv"
            and n.attr["tensor_name"].s.decode() == tensor]
    assert len(send) == 1 and len(recv) == 1, tensor
    leaving = {send[0].name, send[0].input[0].split(":")[0]}
    reaching = {recv[0].name} | {n.name for (d, _), n in nodes.items() if d == dst
                                 and any(i.lstrip("^").split(":")[0] == recv[0].name for i in n.input)}
    return leaving, reaching


@pytest.mark.slow
def test_nmt_three_devices_lanes_hold_no_overlapping_ops_and_every_arrow_binds_to_its_op(nmt3_run):
    manifest = json.loads((nmt3_run / rundir.MANIFEST).read_text())
    devices = {d["name"] for d in manifest["devices"]}
    assert len(devices) == 3 and len(manifest["traced_steps"]) == 3
    nodes = _partition_nodes(nmt3_run)
    for step in manifest["traced_steps"]:
        with gzip.open(nmt3_run / rundir.TIMELINES_DIR / rundir.timeline_name(step)) as handle:
            events = json.load(handle)["traceEvents"]
        processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
        ops = [e for e in events if e["ph"] == "X"]
        assert {processes[e["pid"]] for e in ops} == devices
        lanes = {}
        for e in ops:
            lanes.setdefault((e["pid"], e["tid"]), []).append(e)
        for lane in lanes.values():
            lane.sort(key=lambda e: e["ts"])
            for before, after in zip(lane, lane[1:]):
                assert after["ts"] >= before["ts"] + before["dur"], (step, before, after)
        starts = {e["id"]: e for e in events if e["ph"] == "s"}
        ends = {e["id"]: e for e in events if e["ph"] == "f"}
        assert set(starts) == set(ends)
        kinds = {e["cat"] for e in starts.values()}
        assert kinds == {"transfer", "collective"}, kinds
        reductions = [e for e in ops if e["name"] == "CollectiveReduce"]
        # each member's op of each collective run sends one arrow to the next member
        assert reductions and len([i for i in starts if starts[i]["cat"] == "collective"]) == len(reductions)
        for i, start in starts.items():
            end, args = ends[i], start["args"]
            sender, receiver = _enclosing(events, start), _enclosing(events, end)
            assert len(sender) == 1 and len(receiver) == 1, (step, start, end, sender, receiver)
            sender, receiver = sender[0], receiver[0]
            assert (processes[sender["pid"]], processes[receiver["pid"]]) == (args["from"], args["to"])
            if start["cat"] == "collective":
                for op in (sender, receiver):
                    node = nodes[(processes[op["pid"]], op["args"]["name"])]
                    assert node.op.startswith("Collective"), node.op
                    assert (node.attr["group_key"].i, node.attr["instance_key"].i) == (
                        args["group_key"], args["instance_key"])
            else:
                leaving, reaching = _intended_transfer_ends(nodes, args["tensor"], args["from"], args["to"])
                assert sender["args"]["name"] in leaving and receiver["args"]["name"] in reaching, args


def test_atomic_writes_get_the_mode_of_an_ordinary_new_file(tmp_path):
    # mkstemp creates 0600 files; run directories are shared and viewed by others like any file.
    umask = os.umask(0)
    os.umask(umask)
    written = atomic_write_bytes(tmp_path / "x.pb", b"123")
    ordinary = tmp_path / "ordinary"
    ordinary.write_bytes(b"123")
    assert stat.S_IMODE(written.stat().st_mode) == stat.S_IMODE(ordinary.stat().st_mode) == 0o666 & ~umask


def test_an_artifact_in_place_but_not_yet_recorded_is_listed_when_the_run_ends(tmp_path):
    # An interrupt can land between a file's rename into place and its entry in the manifest.
    writer = RunWriter(tmp_path / "run", command=["rnnprof", "trace"])
    writer.write_run_metadata(rundir.run_metadata_name(2), b"listed")
    atomic_write_bytes(writer.path / rundir.RUN_METADATA_DIR / rundir.run_metadata_name(3), b"interrupted")
    atomic_write_bytes(writer.path / rundir.TIMELINES_DIR / rundir.timeline_name(3), b"{}")
    writer.finish(rundir.STATUS_INTERRUPTED)
    captured = json.loads((writer.path / rundir.MANIFEST).read_text())["captured"]
    assert captured["run_metadata"] == ["run_metadata/step-2.pb", "run_metadata/step-3.pb"]
    assert captured["timelines"] == ["timelines/step-3.trace.json.gz"]
