"""The TensorFlow gRPC cluster without TensorFlow: spec files, flags, clock offsets, cross-task timelines,
per-task analyses and the ps-balance rule on synthetic inputs."""

from __future__ import annotations

import json

import networkx as nx
import pytest

from rnnprof.analyzers.placement import ps_balance
from rnnprof.analyzers.placement.inputs import AuditInput
from rnnprof.analyzers.tasks import analyze_tasks
from rnnprof.cli import main
from rnnprof.errors import InputError
from rnnprof.events import Device, EventTableBuilder, Kind, Manifest
from rnnprof.rundir.manifest import applied_offsets
from rnnprof.training import clock
from rnnprof.training.cluster import free_ports, local_spec, parse_cluster_spec
from rnnprof.training.runner import ParameterSpread

W0, W1, PS0 = "/job:worker/replica:0/task:0", "/job:worker/replica:0/task:1", "/job:ps/replica:0/task:0"


# -- cluster specs --------------------------------------------------------------------------------

def test_a_spec_lists_workers_then_ps_and_its_master_is_worker_0():
    spec = parse_cluster_spec({"ps": ["h2:2222"], "worker": ["h1:2222", "h2:2223"]}, "spec.json")
    assert spec.workers == 2 and spec.ps_tasks == 1
    assert spec.tasks() == [("worker", 0, "h1:2222"), ("worker", 1, "h2:2223"), ("ps", 0, "h2:2222")]
    assert spec.master() == "grpc://h1:2222"


@pytest.mark.parametrize("value, problem", [
    ([], "not a cluster spec"),
    ({"chief": ["h:1"]}, "unknown job 'chief'"),
    ({"worker": "h:1"}, "not a list"),
    ({"worker": ["h"]}, "not a list"),
    ({"worker": ["h:99999"]}, "not a list"),
    ({"ps": ["h:1"]}, "no worker task"),
    ({"worker": ["h:1"], "ps": ["h:1"]}, "two tasks"),
])
def test_a_bad_spec_names_what_is_wrong(value, problem):
    with pytest.raises(InputError, match=problem):
        parse_cluster_spec(value, "spec.json")


def test_free_ports_are_distinct_and_a_local_spec_uses_them():
    ports = free_ports(5)
    assert len(set(ports)) == 5
    spec = local_spec(2, 1)
    addresses = [a for _, _, a in spec.tasks()]
    assert len(set(addresses)) == 3 and all(a.startswith("localhost:") for a in addresses)


@pytest.mark.parametrize("argv, message", [
    (["trace", "--ps-tasks", "1"], "--ps-tasks needs a cluster"),
    (["trace", "--workers", "2", "--ps-tasks", "1", "--variable-update", "replicated"],
     "--ps-tasks applies to --variable-update parameter_server"),
    (["trace", "--workers", "2", "--cluster-spec", "SPEC"], "--workers and --cluster-spec cannot be combined"),
    (["trace", "--cluster-spec", "MISSING"], "cannot be read"),
    (["scale", "--framework", "torch", "--model", "rnnlm", "--workers", "2"], "--workers applies to --framework tensorflow"),
    (["scale", "--workers", "1,x"], "--workers takes comma-separated whole numbers"),
    (["trace", "--workers", "2", "--ps-placement", "first", "--variable-update", "replicated"],
     "--ps-placement needs parameter server tasks"),
    (["worker", "--cluster-spec", "SPEC", "--job", "worker", "--task", "2"], "--task 2: job worker has tasks 0 to 0"),
])
def test_cluster_flags_are_refused_in_one_line_before_tensorflow_loads(tmp_path, capsys, argv, message):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"worker": ["localhost:1"]}))
    argv = [str(spec) if a == "SPEC" else str(tmp_path / "none.json") if a == "MISSING" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


# -- clocks ---------------------------------------------------------------------------------------

def test_a_round_trip_gives_the_offset_against_the_midpoint_and_half_the_trip_as_uncertainty():
    chief = iter([100.0, 100.004])  # the chief's clock before and after the exchange
    offset, uncertainty = clock.exchange(lambda: 100.037, clock=lambda: next(chief))  # the task is 35 ms ahead
    assert offset == pytest.approx(35_000, abs=1e-3) and uncertainty == pytest.approx(2_000, abs=1e-3)


def test_the_shortest_round_trip_is_kept():
    readings = iter([0.0, 0.010, 0.0, 0.002, 0.0, 0.006])  # trips of 10, 2 and 6 ms

    class Session:
        def run(self, op):
            return 1.0 + {0: 0.0}.get(0)  # the task reads 1 s ahead of the chief's midpoints

    found = clock.measure_offsets(Session(), {W1: "op"}, exchanges=3, clock=lambda: next(readings))
    assert found[0].uncertainty_us == pytest.approx(1_000)
    assert found[0].offset_us == pytest.approx(1e6 - 1_000)


def test_an_offset_within_its_uncertainty_is_recorded_but_not_applied():
    start = [clock.MeasuredOffset(W0, 120.0, 400.0), clock.MeasuredOffset(W1, 37_000.0, 500.0)]
    end = [clock.MeasuredOffset(W0, 90.0, 300.0), clock.MeasuredOffset(W1, 37_100.0, 450.0)]
    combined = clock.manifest_offsets(start, end)
    assert combined[W0]["applied_us"] == 0.0 and combined[W0]["offset_us"] == 120.0
    assert combined[W1]["applied_us"] == 37_000.0 and combined[W1]["drift_us"] == pytest.approx(100.0)
    assert applied_offsets(combined) == {W0: 0.0, W1: 37_000.0}
    assert applied_offsets({"x": {"applied_us": "7"}, "y": None}) == {}


# -- timelines from a cluster's step stats ----------------------------------------------------------

def _step_stats(offset_w1_us: float = 0.0):
    from tensorboard.compat.proto import step_stats_pb2

    stats = step_stats_pb2.StepStats()

    def node(device, name, label, start, dur):
        dev = next((d for d in stats.dev_stats if d.device == device), None) or stats.dev_stats.add(device=device)
        n = dev.node_stats.add(node_name=name, timeline_label=label, all_start_micros=int(start),
                               all_end_rel_micros=int(dur))
        return n

    node(f"{W1}/device:CPU:0", "tower_1/grad", "tower_1/grad = MatMul(a, b)", 1000 + offset_w1_us, 100)
    node(f"{PS0}/device:CPU:0", "RecvTensor",
         f"[4000B] [30.0Mb/s] edge_5_tower_1/grad from {W1}/device:CPU:0 to {PS0}/device:CPU:0", 1120, 300)
    node(f"{PS0}/device:CPU:0", "update/Apply", "update/Apply = ResourceApplyGradientDescent(v, lr, g)", 1450, 20)
    return stats


def _partitions():
    from tensorboard.compat.proto import graph_pb2

    send_graph, recv_graph = graph_pb2.GraphDef(), graph_pb2.GraphDef()
    send = send_graph.node.add(name="tower_1/grad/_send", op="_Send", device=f"{W1}/device:CPU:0",
                               input=["tower_1/grad"])
    send.attr["tensor_name"].s = b"edge_5_tower_1/grad"
    send.attr["send_device"].s = f"{W1}/device:CPU:0".encode()
    send.attr["recv_device"].s = f"{PS0}/device:CPU:0".encode()
    recv = recv_graph.node.add(name="tower_1/grad/_recv", op="_Recv", device=f"{PS0}/device:CPU:0")
    recv.attr["tensor_name"].s = b"edge_5_tower_1/grad"
    recv_graph.node.add(name="update/Apply", op="ResourceApplyGradientDescent", device=f"{PS0}/device:CPU:0",
                        input=["v", "lr", "tower_1/grad/_recv"])
    return [send_graph, recv_graph]


def test_a_cross_task_transfer_is_a_timed_receive_with_an_arrow_from_the_sender():
    from rnnprof.rundir.chrome_trace import step_stats_to_chrome

    doc = step_stats_to_chrome(_step_stats(), 3, _partitions())
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert sorted(names.values()) == [f"{PS0}/device:CPU:0", f"{W1}/device:CPU:0"]
    recv = next(e for e in doc["traceEvents"] if e.get("ph") == "X" and e["name"] == "RecvTensor")
    assert recv["args"]["bytes"] == 4000 and recv["args"]["from"] == f"{W1}/device:CPU:0"
    assert names[recv["pid"]] == f"{PS0}/device:CPU:0"
    start, end = (next(e for e in doc["traceEvents"] if e.get("ph") == ph and e["cat"] == "transfer")
                  for ph in ("s", "f"))
    assert names[start["pid"]] == f"{W1}/device:CPU:0" and names[end["pid"]] == f"{PS0}/device:CPU:0"
    # the arrow ends inside the receive (not on the update that reads it later)
    assert recv["ts"] < end["ts"] < recv["ts"] + recv["dur"]


def test_clock_offsets_put_each_task_on_the_chiefs_clock():
    from rnnprof.rundir.chrome_trace import step_stats_to_chrome

    doc = step_stats_to_chrome(_step_stats(offset_w1_us=37_000), 3, _partitions(), offsets={W1: 37_000.0})
    grad = next(e for e in doc["traceEvents"] if e.get("ph") == "X" and e["args"]["name"] == "tower_1/grad")
    assert grad["ts"] == 1000 and doc["otherData"]["clock_offsets_us"] == {W1: 37_000.0}


# -- per-task figures ------------------------------------------------------------------------------

def _cluster_table():
    b = EventTableBuilder("test")
    w0, w1, ps = Device("cpu", 0, W0), Device("cpu", 0, W1), Device("cpu", 0, PS0)
    for step, base in ((1, 0.0), (2, 10_000.0)):
        b.add(base + 0, 1000, "tower_0/MatMul", "MatMul", w0, "ops", Kind.HOST_OP, step=step)
        b.add(base + 1000, 500, "RecvTensor", "RecvTensor", w0, "ops", Kind.COMMUNICATION, step=step, nbytes=400)
        b.add(base + 0, 3000, "tower_1/MatMul", "MatMul", w1, "ops", Kind.HOST_OP, step=step)  # the slow worker
        b.add(base + 3000, 200, "RecvTensor", "RecvTensor", w1, "ops", Kind.COMMUNICATION, step=step, nbytes=400)
        b.add(base + 3100, 200, "RecvTensor", "RecvTensor", w1, "ops", Kind.COMMUNICATION, step=step, nbytes=400)
        b.add(base + 1500, 700, "RecvTensor", "RecvTensor", ps, "ops", Kind.COMMUNICATION, step=step, nbytes=800)
    return b.build()


def test_each_task_gets_its_cross_task_transfer_time_and_the_slow_worker_is_named():
    report = analyze_tasks(_cluster_table())
    by_task = {t.task: t for t in report.tasks}
    assert set(by_task) == {W0, W1, PS0}
    assert by_task[W0].cross_task_us == 1000 and by_task[W0].cross_task_events == 2
    assert by_task[W1].cross_task_us == 2 * 300  # two overlapping fetches: 3000-3300 in each step
    assert by_task[PS0].cross_task_us == 1400 and by_task[PS0].busy_us == 1400
    assert [(s.step, s.last_to_finish) for s in report.stragglers] == [(1, W1), (2, W1)]
    assert report.stragglers[0].lag_vs_earliest_us == pytest.approx(3300 - 1500)


def test_a_single_process_trace_has_no_tasks():
    b = EventTableBuilder("test")
    b.add(0, 10, "a", "MatMul", Device("cpu", 0), "ops", Kind.HOST_OP, step=1)
    b.add(0, 10, "b", "MatMul", Device("cpu", 1), "ops", Kind.HOST_OP, step=1)
    assert analyze_tasks(b.build()).tasks == ()


def test_count_ops_totals_per_task_and_leaves_fetches_out_of_kernels():
    from rnnprof.analyzers.opcount import count_kernels

    kernels = count_kernels(_cluster_table())
    assert kernels.by_task()[W1]["cpu_kernels"] == 2  # its MatMul in 2 steps; the 4 fetches are not op runs
    assert PS0 not in kernels.by_task()  # it only fetched: no op ran there


# -- parameter servers -------------------------------------------------------------------------------

def test_greedy_spread_puts_each_variable_on_the_lightest_ps_task():
    spread = ParameterSpread(["ps0", "ps1"])
    placed = [spread.device_for(name, shape, None) for name, shape in
              (("big", [100, 10]), ("mid", [600]), ("small", [300]), ("big", [100, 10]), ("tiny", [10]))]
    # float32 bytes: big 4000 -> ps0; mid 2400 -> ps1; small 1200 -> ps1 (3600 < 4000); big asked again stays
    # on ps0 and is not counted twice; tiny 40 -> ps1 (still the lighter)
    assert placed == ["ps0", "ps1", "ps1", "ps0", "ps1"]
    assert spread.bytes == [4000, 3640]
    first = ParameterSpread(["ps0", "ps1"], "first")
    assert {first.device_for(n, [10], None) for n in "abc"} == {"ps0"}


def _ps_graph(placement: dict[str, tuple[str, int]]):
    g = nx.DiGraph()
    for name, (task, size) in placement.items():
        g.add_node(name, name=name, op="VarHandleOp", assigned_device=f"{task}/device:CPU:0",
                   requested_device="", variable_bytes=size)
    return g


PS1 = "/job:ps/replica:0/task:1"


def _ps_tasks(n: int) -> Manifest:
    """A run manifest that records ``n`` parameter-server tasks."""
    return Manifest.from_dict({"config": {"ps_tasks": n}})


def test_pa008_flags_a_ps_task_holding_most_variable_bytes():
    graph = _ps_graph({"emb": (PS0, 4000), "w": (PS0, 3000), "b": (PS1, 100)})
    findings = ps_balance.check(AuditInput(graph=graph, manifest=_ps_tasks(2)))
    assert len(findings) == 1 and findings[0].devices == (PS0,)
    assert findings[0].evidence["share"] == pytest.approx(7000 / 7100, abs=1e-3)


def test_pa008_counts_a_ps_task_holding_nothing():
    graph = _ps_graph({"emb": (PS0, 4000), "w": (PS0, 3000)})  # ps task 1 exists but holds no variable
    findings = ps_balance.check(AuditInput(graph=graph, manifest=_ps_tasks(2)))
    assert findings and findings[0].evidence["bytes_by_task"] == {PS0: 7000, PS1: 0}


def test_pa008_passes_a_fair_split_and_skips_a_single_ps_task():
    graph = _ps_graph({"emb": (PS0, 4000), "w": (PS1, 3000), "b": (PS1, 100)})
    assert ps_balance.check(AuditInput(graph=graph, manifest=_ps_tasks(2))) == []
    one = ps_balance.check(AuditInput(graph=_ps_graph({"emb": (PS0, 10)}), manifest=_ps_tasks(1)))
    assert one.rule_id == ps_balance.RULE_ID and "2 or more ps tasks" in one.reason


def test_pa008_flags_traffic_to_one_ps_task():
    b = EventTableBuilder("test")
    for k, (task, size) in enumerate(((PS0, 9000), (PS0, 9000), (PS1, 500))):
        b.add(k * 10, 5, "RecvTensor", "RecvTensor", Device("cpu", 0, task), "ops", Kind.COMMUNICATION, step=1,
              nbytes=size)
    findings = ps_balance.check(AuditInput(events=b.build()))
    assert [f.evidence["measure"] for f in findings] == ["traffic received (bytes)"]
    assert findings[0].devices == (PS0,)


def test_pa008_does_not_judge_traffic_when_a_task_holding_variables_has_no_transfer_in_the_trace():
    """A greedy split (bytes balanced) whose ps task 1 capture was cut short: the trace holds task 0's
    transfers only. 100% of the recorded traffic on task 0 says nothing about the split."""
    graph = _ps_graph({"emb": (PS0, 4000), "w": (PS1, 3000), "b": (PS1, 1000)})
    b = EventTableBuilder("test")
    for k in range(3):
        b.add(k * 10, 5, "RecvTensor", "RecvTensor", Device("cpu", 0, PS0), "ops", Kind.COMMUNICATION, step=1,
              nbytes=4000)
    events = b.build()
    assert ps_balance.check(AuditInput(graph=graph, events=events, manifest=_ps_tasks(2))) == []
    b.add(40, 5, "RecvTensor", "RecvTensor", Device("cpu", 0, PS1), "ops", Kind.COMMUNICATION, step=1, nbytes=100)
    complete = ps_balance.check(AuditInput(graph=graph, events=b.build(), manifest=_ps_tasks(2)))
    assert [f.evidence["measure"] for f in complete] == ["traffic received (bytes)"]  # both tasks recorded


# -- scale's table with workers ----------------------------------------------------------------------

def test_scale_prints_a_table_per_mode_with_a_workers_column_and_speedup_over_the_fewest_workers():
    from rich.console import Console

    from rnnprof.analyzers.scale import ScalePoint, speedup_table
    from rnnprof.analyzers.throughput import summarize
    from rnnprof.training.measure import StepResult
    from rnnprof.reports.scale import render_table, to_document

    def point(mode, workers, seconds):
        timed = summarize([StepResult(seconds=seconds, words=1000 * workers, loss=1.0)] * 2)
        return ScalePoint(variable_update=mode, all_reduce="ring" if mode == "replicated" else None, devices=1,
                          per_device_batch=4, total_batch=4 * workers, timed=timed, workers=workers,
                          processes=tuple({"job": "worker", "task": k, "pid": 100 + k} for k in range(workers)))

    result = speedup_table([point("parameter_server", 2, 1.0), point("parameter_server", 1, 1.0),
                            point("replicated", 1, 1.0), point("replicated", 2, 4.0)])
    console = Console(width=100, record=True)
    render_table(result, model="nmt", words_definition="w", warmup=1, batches=2, include_warmup=False, notes=[],
                 console=console, parameter_device="1 ps task(s)")
    text = console.export_text()
    assert "parameter_server, variables on 1 ps task(s)" in text and "replicated, ring all-reduce" in text
    assert "workers" in text and "per worker" in text
    speedups = {(r.point.variable_update, r.point.workers): round(r.speedup, 2) for r in result.rows}
    assert speedups == {("parameter_server", 1): 1.0, ("parameter_server", 2): 2.0, ("replicated", 1): 1.0,
                        ("replicated", 2): 0.5}
    rows = to_document(result, config={}, words_definition="w", device_kind="logical-cpu", notes=[],
                       step_definition="s")["rows"]
    assert [len(r["processes"]) for r in rows] == [1, 2, 1, 2] and rows[1]["baseline_workers"] == 1
