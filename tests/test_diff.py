"""rnnprof diff: no change against itself, figures equal to count-ops' and comm's, normalized kernel names,
bad input; a planted RNNLM against the unplanted one (slow), and loop against fused NMT (a stored pair)."""

import functools
import gzip
import json
import re
from collections import Counter

import numpy as np
import pytest
from rich.console import Console

from rnnprof.events.names import normalize_name
from rnnprof.cli import main
from test_count_ops import _run_with_graphs, run_json as count_ops_json
from test_graphs import user_graph
from test_loaders import KINETO_NCCL, KINETO_R0, KINETO_R1, TF1_CPU_LOOP, TF1_GPU_LOOP, TF1_GPU_MATMUL, raw_events


def run_diff(args, width=10_000):
    console = Console(record=True, width=width)
    with console.capture() as capture:
        code = main(["diff", *map(str, args)], console=console)
    return code, capture.get()


def diff_json(args):
    code, out = run_diff(["--json", "--top", "0", *args])
    assert code == 0
    return json.loads(out)


def comm_json(args):
    console = Console(record=True, width=10_000)
    with console.capture() as capture:
        assert main(["comm", "--json", "--per-step", *map(str, args)], console=console) == 0
    return json.loads(capture.get())


@pytest.fixture
def run_dir(tmp_path):
    return _run_with_graphs(tmp_path)


def _assert_no_change(doc):
    assert doc["identical"] is True
    assert all(r["a_us_per_step"] == r["b_us_per_step"] for r in doc["time"]["rows"])
    assert all(f["a"] == f["b"] for f in doc["ops"]["counts"])
    for key in ("gainers", "losers", "appeared", "vanished", "by_type"):
        assert doc["ops"][key] == [] and doc["ops"][f"{key}_total"] == 0
    assert doc["graphs"]["counts"] == [] and doc["graphs"]["moved"] == []
    assert doc["config"]["changes"] == []


@pytest.mark.parametrize("which", ["run directory", "Kineto file", "TF1 timeline"])
def test_an_input_against_itself_has_no_difference_and_says_so(which, run_dir):
    path = {"run directory": run_dir, "Kineto file": KINETO_R0, "TF1 timeline": TF1_GPU_LOOP}[which]
    doc = diff_json([path, path])
    _assert_no_change(doc)
    assert doc["time"]["available"] and doc["time"]["rows"]  # compared, not skipped
    assert doc["ops"]["available"]
    code, text = run_diff([path, path])
    assert code == 0 and "No differences" in text


def test_several_rank_files_per_side_against_themselves():
    doc = diff_json(["--a", KINETO_R0, KINETO_R1, "--b", KINETO_R0, KINETO_R1])
    _assert_no_change(doc)
    devices = {r["device"] for r in doc["time"]["rows"]}
    assert {"rank0/gpu:0", "rank1/gpu:1"} <= devices


def test_ranks_and_their_distributed_info_are_configuration():
    doc = diff_json(["--a", KINETO_R0, "--b", KINETO_R1])
    changes = {c["key"]: (c["a"], c["b"]) for c in doc["config"]["changes"]}
    infos = [json.loads(gzip.decompress(p.read_bytes()))["distributedInfo"] for p in (KINETO_R0, KINETO_R1)]
    assert changes["distributed.rank"] == tuple(str(i["rank"]) for i in infos)
    assert "distributed.world_size" not in changes and "distributed.backend" not in changes
    # PyTorch operators are not graph nodes: the same aten::mm on two ranks has not "moved"
    assert doc["graphs"]["placement_available"] is False and doc["graphs"]["moved"] == []
    assert "not graph nodes" in doc["graphs"]["placement_reason"]


def test_tf_traces_alone_compare_where_ops_ran(tmp_path):
    doc = json.loads(TF1_CPU_LOOP.read_text())
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("ph") == "M"
             and e["name"] == "process_name"}
    ran_on = {}
    for event in doc["traceEvents"]:
        if event.get("ph") == "X":
            ran_on.setdefault(event["args"]["name"], set()).add(names[event["pid"]])
    cpu0 = "/job:localhost/replica:0/task:0/cpu:0 Compute"
    moved_op = next(n for n, lanes in ran_on.items() if lanes == {cpu0})  # one CPU op moves to another CPU
    cpu1 = max(names) + 1
    doc["traceEvents"].append({"ph": "M", "name": "process_name", "pid": cpu1,
                               "args": {"name": cpu0.replace("cpu:0", "cpu:1")}})
    for event in doc["traceEvents"]:
        if event.get("ph") == "X" and event["args"].get("name") == moved_op:
            event["pid"] = cpu1
    changed = tmp_path / "moved.json"
    changed.write_text(json.dumps(doc))
    result = diff_json([TF1_CPU_LOOP, changed])
    assert [(m["name"], m["device_a"], m["device_b"]) for m in result["graphs"]["moved"]] == [
        (moved_op, "cpu:0", "cpu:1")]


def test_a_change_is_not_reported_as_no_change():
    doc = diff_json([TF1_GPU_LOOP, TF1_GPU_MATMUL])
    assert doc["identical"] is False
    code, text = run_diff([TF1_GPU_LOOP, TF1_GPU_MATMUL])
    assert code == 0 and "No differences" not in text


def test_counts_are_count_ops_figures_b_over_a():
    doc = diff_json([TF1_GPU_LOOP, TF1_GPU_MATMUL])
    ours = {f["metric"]: f for f in doc["ops"]["counts"]}
    theirs = {r["metric"]: r for r in count_ops_json([TF1_GPU_MATMUL, "--vs", TF1_GPU_LOOP])["ratios"]}
    assert set(ours) == set(theirs)
    for metric, r in theirs.items():
        assert (ours[metric]["a"], ours[metric]["b"], ours[metric]["ratio"]) == (r["right"], r["left"], r["ratio"])


def test_kernels_by_op_type_sum_to_count_ops_per_type():
    doc = diff_json([TF1_GPU_MATMUL, TF1_GPU_LOOP])
    for side, path in (("a", TF1_GPU_MATMUL), ("b", TF1_GPU_LOOP)):
        kernels = count_ops_json([path])["kernels"]
        n_steps = len(kernels["steps"])
        expected = {op: (c["cpu_kernels"] + c["gpu_kernels"]) / n_steps for op, c in kernels["by_type"].items()}
        # by_type lists what changed; types on one side only are all there (appeared / vanished)
        got = {r["key"]: r[f"count_{side}_per_step"] for r in doc["ops"]["by_type"] if r[f"count_{side}_per_step"]}
        assert got.items() <= expected.items()
    appeared = {r["key"] for r in doc["ops"]["appeared"]}
    assert appeared  # the loop runs op types the single MatMul graph does not
    only_b = set(count_ops_json([TF1_GPU_LOOP])["kernels"]["by_type"]) - set(
        count_ops_json([TF1_GPU_MATMUL])["kernels"]["by_type"])
    assert {r["key"] for r in doc["ops"]["by_type"] if r["status"] == "appeared"} == only_b


def test_device_time_is_comm_per_step_mean():
    doc = diff_json([TF1_GPU_LOOP, TF1_GPU_MATMUL])
    rows = {(r["device"], r["metric"]): r for r in doc["time"]["rows"]}
    for side, path in (("a", TF1_GPU_LOOP), ("b", TF1_GPU_MATMUL)):
        for device in comm_json([path])["devices"]:
            parts = list(device["steps"].values()) or [device["total"]]
            for metric, key in (("step", "span_us"), ("compute", "compute_us"), ("idle", "idle_us"),
                                ("communication", "communication_us"), ("copies", "memcpy_us")):
                expected = np.mean([p[key] for p in parts])
                assert rows[(device["device"], metric)][f"{side}_us_per_step"] == pytest.approx(expected)


def test_templated_kernel_variants_group_under_one_name():
    events = [e for e in raw_events(KINETO_NCCL) if e.get("ph") == "X" and e.get("cat") == "kernel"]
    templated = Counter(e["name"] for e in events if "<" in e["name"])
    assert len(templated) >= 2
    doc = diff_json([KINETO_R0, KINETO_NCCL])
    rows = {r["key"]: r for r in doc["ops"]["appeared"] + doc["ops"]["vanished"] + doc["ops"]["gainers"]
            + doc["ops"]["losers"]}
    # every templated name of the trace is counted under its base name, variants together
    by_base = Counter()
    for name, n in templated.items():
        by_base[name.removeprefix("void ").split("<", 1)[0] + "<…>"] += n
    for base, n in by_base.items():
        assert base in rows
        assert not any(key != base and key.startswith(base[:-3] + "<") for key in rows)
    assert all("(" not in key.split("<", 1)[0] or "anonymous" in key for key in rows)


def test_normalize_name():
    assert normalize_name("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, "
                          "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<int>)") == \
        "at::native::vectorized_elementwise_kernel<…>"
    assert normalize_name("void at::native::(anonymous namespace)::CatArrayBatchedCopy<int, 1>(int*, int)") == \
        "at::native::(anonymous namespace)::CatArrayBatchedCopy<…>"
    assert normalize_name("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)") == \
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    for kept in ("aten::mm", "tower_1/softmax/MatMul_2", "a<b", "(x)"):
        assert normalize_name(kept) == kept


def test_graphs_alone_compare_op_counts_and_requested_devices(tmp_path):
    a, b = tmp_path / "a.pb", tmp_path / "b.pb"
    graph = user_graph()
    a.write_bytes(graph.SerializeToString())
    node = next(n for n in graph.node if n.name == "w")
    node.device = "/device:CPU:0"
    b.write_bytes(graph.SerializeToString())
    doc = diff_json([a, b])
    assert [(m["name"], m["device_a"], m["device_b"]) for m in doc["graphs"]["moved"]] == [("w", "cpu:1", "cpu:0")]
    counts = {(c["device"], c["op_type"]): c["delta"] for c in doc["graphs"]["counts"]}
    assert counts[("cpu:0", "VarHandleOp")] == 1 and counts[("cpu:1", "VarHandleOp")] == -1
    assert doc["time"]["available"] is False and "graph" in doc["time"]["reason"]


@pytest.mark.parametrize("args, says", [
    (["only-one"], "1 input(s) given"),
    (["a", "b", "c"], "3 input(s) given"),
    (["x", "--a", "y", "--b", "z"], "cannot be combined"),
    (["--a", "y"], "--b is missing"),
    (["--top", "-1", "x", "y"], "--top"),
    (["MISSING_A", "MISSING_B"], "MISSING_A"),
    ("graph-vs-trace", "share neither trace events nor a graph"),
])
def test_bad_input_is_one_line_exit_2(args, says, tmp_path, capsys):
    if args == "graph-vs-trace":
        graph = tmp_path / "graph.pb"
        graph.write_bytes(user_graph().SerializeToString())
        args = [TF1_GPU_LOOP, graph]
    args = [str(tmp_path / a) if str(a).startswith("MISSING") else str(a) for a in args]
    code = main(["diff", *args])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and says in err and "Traceback" not in err


# -- captured runs (TensorFlow) -------------------------------------------------------------------------------

from fixtures import FIXTURES  # noqa: E402

# conftest's NMT_LOOP_FUSED with each encoder, captured by `rnnprof trace` and kept (manifests, timelines, graphs;
# tests/data/README.md): diff reads what a capture wrote; the capture itself is test_count_ops_nmt's
LOOP_FUSED = FIXTURES / "tf-run-nmt-loop-fused"


def _partition_nodes(path):
    """The node names of a partition graph, read with TensorFlow's own GraphDef message."""
    from tensorboard.compat.proto import graph_pb2

    return {node.name for node in graph_pb2.GraphDef.FromString(path.read_bytes()).node}


@pytest.mark.slow
def test_planted_softmax_is_listed_as_moved_to_device_0_with_the_step_time_difference(rnnlm_planted):
    """The small RNNLM on 2 devices with and without the softmax-on-device0 plant (conftest's capture, once for the
    session: test_critical_path and test_placement_tf read it too)."""
    doc = diff_json([rnnlm_planted / "plain", rnnlm_planted / "planted"])
    moved = {m["name"]: m for m in doc["graphs"]["moved"]}
    # what the partition graphs say: tower 1's softmax/projection nodes on CPU:1 before, on CPU:0 with the plant
    parts = "graphs/partitions"
    went = ((_partition_nodes(rnnlm_planted / "plain" / parts / "1_CPU_1.pb")
             & _partition_nodes(rnnlm_planted / "planted" / parts / "0_CPU_0.pb")))
    expected = {n for n in went if re.match(r"tower_1/(softmax|projection)/", n)}
    assert len(expected) >= 5
    listed = {n for n, m in moved.items() if re.match(r"tower_1/(softmax|projection)/", n) and m["basis"] == "assigned"}
    assert listed == expected
    # the rest were optimized away on both sides: moved as requested, the same way
    assert all((m["device_a"], m["device_b"], m["tower"]) == ("cpu:1", "cpu:0", 1) for m in moved.values())
    scopes = {(g["scope"], g["device_a"], g["device_b"]) for g in doc["graphs"]["moved_by_scope"]}
    assert {("tower_1/softmax", "cpu:1", "cpu:0"), ("tower_1/projection", "cpu:1", "cpu:0")} <= scopes

    step = next(r for r in doc["time"]["rows"] if (r["device"], r["metric"]) == ("all devices", "activity span"))
    assert step["a_us_per_step"] > 0 and step["b_us_per_step"] > 0
    assert step["delta_us_per_step"] == pytest.approx(step["b_us_per_step"] - step["a_us_per_step"])
    timed = next(r for r in doc["time"]["rows"] if r["device"] == "run")
    manifests = [json.loads((rnnlm_planted / s / "manifest.json").read_text()) for s in ("plain", "planted")]
    assert (timed["a_us_per_step"], timed["b_us_per_step"]) == pytest.approx(
        [m["throughput"]["median_step_seconds"] * 1e6 for m in manifests])
    assert [(c["key"], c["a"], c["b"]) for c in doc["config"]["changes"]] == [
        ("config.plant", "None", "softmax-on-device0")]

    code, table = run_diff([rnnlm_planted / "plain", rnnlm_planted / "planted"], width=80)  # a terminal's width
    assert code == 0
    assert re.search(r"tower_1/softmax\s+cpu:1\s+cpu:0", table)
    assert "all devices" in table


def test_loop_vs_fused_nmt_shows_count_ops_ratios():
    loop, fused = LOOP_FUSED / "loop", LOOP_FUSED / "fused"
    ours = {f["metric"]: f for f in diff_json([loop, fused])["ops"]["counts"]}
    theirs = {r["metric"]: r for r in count_ops_json([fused, "--vs", loop])["ratios"]}
    assert {m: (f["a"], f["b"], f["ratio"]) for m, f in ours.items()} == {
        m: (r["right"], r["left"], r["ratio"]) for m, r in theirs.items()}
    # the fused encoder runs far fewer graph ops and kernels than the loop
    assert ours["runtime graph ops (all)"]["ratio"] <= 0.2
    assert ours["kernel launches per step (CPU + GPU kernels)"]["ratio"] <= 0.1


def test_names_from_the_input_are_printed_verbatim(tmp_path):
    from test_report_markup import FILE_TOKEN, TOKEN, hostile_kineto, hostile_tf1, printed

    trace = hostile_tf1(tmp_path, f"trace{FILE_TOKEN}.json")
    text = printed(["diff", str(TF1_GPU_LOOP), str(trace), "--top", "0", "--all"])
    assert f"B: {trace}" in text
    assert f"MatMul{TOKEN}" in text  # an op type that appeared
    assert f"gradients/Mean_grad{TOKEN}/Prod" in text  # a name that appeared
    ranks = [str(hostile_kineto(tmp_path, r)) for r in (0, 1)]
    text = printed(["diff", "--a", str(KINETO_R0), str(KINETO_R1), "--b", *ranks, "--top", "0", "--all"])
    assert f"rank1{TOKEN}/gpu:1" in text  # a device label, and a configuration value
    assert f"0{TOKEN}, 1{TOKEN}" in text


def test_manifest_of_unexpected_shape_is_an_input_error_and_kineto_header_is_not_recorded(run_dir, tmp_path,
                                                                                          capsys):
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest.update(throughput=[1, 2])
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    assert run_diff(["--json", "--top", "0", run_dir, run_dir])[0] == 2
    (error,) = capsys.readouterr().err.strip().splitlines()
    assert "malformed manifest" in error and "$.throughput" in error
    with gzip.open(KINETO_R0, "rt") as f:
        trace = json.load(f)
    trace["deviceProperties"] = 5
    trace["distributedInfo"]["rank"] = [0]
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps(trace))
    changes = {c["key"]: (c["a"], c["b"]) for c in diff_json([KINETO_R0, odd])["config"]["changes"]}
    assert changes["distributed.rank"] == ("0", "[0]") and "gpu model" not in changes


# -- a real pair from different ranks: rank 3 of 8 (A100) against rank 1 of 2 (V100, CUDA graphs) ----------------

PAIR_A = FIXTURES / "kineto-8rank-rank3-a100.json.gz"
PAIR_B = FIXTURES / "kineto-2rank-rank1-v100-cudagraph.json.gz"


@functools.lru_cache(maxsize=2)  # the pair's two files, read by most tests below (100k events each)
def _document(path):
    with (gzip.open if path.suffix == ".gz" else open)(path, "rt") as f:
        return json.load(f)


def _raw_events(path):
    return _document(path)["traceEvents"]


@functools.lru_cache(maxsize=None)
def _pair_json(*args):
    """diff's --json document of the pair (with ``args`` before it), computed once for the module's tests, which
    only read it."""
    return diff_json([*args, PAIR_A, PAIR_B])


@functools.lru_cache(maxsize=None)
def _pair_text(*args):
    """What diff prints for the pair (with ``args``), once for the module: (exit code, text)."""
    return run_diff([*args, PAIR_A, PAIR_B])


def _markers(path):
    """ProfilerStep#N -> (start, duration), from the raw JSON."""
    return {int(e["name"].split("#")[1]): (e["ts"], e["dur"]) for e in _raw_events(path)
            if e.get("ph") == "X" and re.fullmatch(r"ProfilerStep#\d+", e.get("name", ""))}


@pytest.mark.parametrize("selection", [[], ["--steps", "1010:1012"], ["--drop-last"]])
def test_headline_step_time_is_the_ratio_of_the_profiler_step_periods(selection):
    marks_a, marks_b = _markers(PAIR_A), _markers(PAIR_B)
    steps_a, steps_b = sorted(marks_a), sorted(marks_b)
    if selection == ["--steps", "1010:1012"]:
        steps_a = steps_b = [1010, 1011, 1012]
    elif selection == ["--drop-last"]:
        steps_a, steps_b = steps_a[:-1], steps_b[:-1]
    period_a = np.mean([marks_a[s][1] for s in steps_a])
    period_b = np.mean([marks_b[s][1] for s in steps_b])
    doc = _pair_json(*selection)
    top = doc["step_time"]
    assert top["a"]["basis"] == top["b"]["basis"] == "step markers"
    assert (top["a"]["us_per_step"], top["b"]["us_per_step"]) == pytest.approx((period_a, period_b))
    assert top["ratio"] == pytest.approx(period_b / period_a)
    if not selection:
        assert round(top["ratio"], 2) == 1.60  # not the 2.04x of the mean per-step activity span
    code, text = _pair_text(*selection)
    assert code == 0
    assert f"Step time: A {period_a / 1000:,.3f} ms, B {period_b / 1000:,.3f} ms ({period_b / period_a:,.2f}x" in text


def _rank_and_gpu(path):
    events = _raw_events(path)
    rank = _document(path)["distributedInfo"]["rank"]
    gpus = {e["args"]["device"] for e in events if e.get("cat") == "kernel"}
    assert len(gpus) == 1
    return f"rank{rank}", gpus.pop()


def test_devices_of_different_ranks_are_paired_by_role():
    (rank_a, gpu_a), (rank_b, gpu_b) = _rank_and_gpu(PAIR_A), _rank_and_gpu(PAIR_B)
    assert (rank_a, rank_b) != (None, None) and f"{rank_a}/gpu:{gpu_a}" != f"{rank_b}/gpu:{gpu_b}"
    label_a, label_b = f"{rank_a}/gpu:{gpu_a}", f"{rank_b}/gpu:{gpu_b}"
    doc = _pair_json()
    assert doc["time"]["paired_by_role"] == [{"a": label_a, "b": label_b}]
    rows = {r["metric"]: r for r in doc["time"]["rows"] if (r["device_a"], r["device_b"]) == (label_a, label_b)}
    assert set(rows) >= {"step", "busy", "compute", "communication", "copies", "idle"}
    # each side's figure is comm's for its own device, mean per step
    for side, path, label in (("a", PAIR_A, label_a), ("b", PAIR_B, label_b)):
        device = next(d for d in comm_json([path])["devices"] if d["device"] == label)
        for metric, key in (("busy", "busy_us"), ("copies", "memcpy_us"), ("idle", "idle_us")):
            assert rows[metric][f"{side}_us_per_step"] == pytest.approx(
                np.mean([p[key] for p in device["steps"].values()]))
    code, text = _pair_text()
    assert f"paired by role: {label_a} ~ {label_b}" in text
    assert f"{label_a} ~ {label_b}" in text and " n/a " not in text.split("Time per device")[1].split("Copies by kind")[0]


def _self_time_per_step(path, op):
    """Summed self time of ``op`` per step, from the raw JSON: each execution's duration less that of the cpu_ops
    directly nested in it on the same thread (cut to its end), over the executions starting inside a
    ProfilerStep range. Of two ops with one start and one duration the first in the file is the outer one (as
    Kineto writes them: aten::to before its aten::_to_copy).

    A thread's ops in (start, longest first, file order): those nested in an execution follow it while they start
    before its end, and one of them is directly nested when it ends after every one before it in that run."""
    events = _raw_events(path)
    marks = _markers(path)
    by_thread = {}
    for i, e in enumerate(events):
        if e.get("ph") == "X" and e.get("cat") == "cpu_op":
            by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], -e["dur"], i, e))
    total = 0.0
    for ops in by_thread.values():
        ops.sort(key=lambda o: o[:3])
        for k, (start, minus_dur, _, e) in enumerate(ops):
            if e["name"] != op or not any(s <= start < s + d for s, d in marks.values()):
                continue
            end, reach, nested = start - minus_dur, float("-inf"), 0.0
            for c_start, c_minus_dur, _, _ in ops[k + 1:]:
                if c_start >= end:
                    break
                c_end = c_start - c_minus_dur
                if c_end > reach:  # no op before it in the run reaches as far: directly nested
                    nested += min(c_end, end) - c_start
                reach = max(reach, c_end)
            total += e["dur"] - nested
    return total / len(marks)


def test_host_ops_are_compared_by_self_time():
    doc = _pair_json()
    rows = {r["key"]: r for r in doc["ops"]["gainers"] + doc["ops"]["losers"]}
    for op in ("aten::item", "aten::_local_scalar_dense"):
        expected_a, expected_b = _self_time_per_step(PAIR_A, op), _self_time_per_step(PAIR_B, op)
        row = rows.get(op)
        if row is None:  # unchanged within rounding: not listed
            assert expected_a == pytest.approx(expected_b)
            continue
        assert (row["time_a_us_per_step"], row["time_b_us_per_step"]) == pytest.approx((expected_a, expected_b))
    # aten::item is a thin wrapper: its +28 ms is aten::_local_scalar_dense's, counted once
    item_delta = _self_time_per_step(PAIR_B, "aten::item") - _self_time_per_step(PAIR_A, "aten::item")
    dense = rows["aten::_local_scalar_dense"]
    assert abs(item_delta) < 0.05 * dense["time_delta_us_per_step"]


def test_tf_run_directories_headline_the_step_time_the_run_recorded(tmp_path):
    from test_loaders import _write_rnnprof_run

    runs = []
    for name, seconds in (("a", 0.1), ("b", 0.25)):
        run = _write_rnnprof_run(tmp_path / name, [0, 1])
        manifest = json.loads((run / "manifest.json").read_text())
        manifest["throughput"] = {"median_step_seconds": seconds}
        (run / "manifest.json").write_text(json.dumps(manifest))
        runs.append(run)
    top = diff_json(runs)["step_time"]
    assert (top["a"]["basis"], top["b"]["basis"]) == ("run record", "run record")
    assert (top["a"]["us_per_step"], top["b"]["us_per_step"], top["ratio"]) == pytest.approx((1e5, 2.5e5, 2.5))
    # one side without a record: both fall back to the basis they share, the activity span per step
    (runs[1] / "manifest.json").write_text(json.dumps({**manifest, "throughput": {}}))
    top = diff_json(runs)["step_time"]
    assert (top["a"]["basis"], top["b"]["basis"]) == ("activity span", "activity span")
    spans = {r["device"]: r for r in diff_json(runs)["time"]["rows"] if r["metric"] == "activity span"}
    assert (top["a"]["us_per_step"], top["b"]["us_per_step"]) == pytest.approx(
        (spans["all devices"]["a_us_per_step"], spans["all devices"]["b_us_per_step"]))


def test_pair_devices_same_label_first_then_by_role_in_rank_order():
    from rnnprof.analyzers.diff import pair_devices
    from rnnprof.events import Device

    a = [Device("gpu", 0, "rank10"), Device("gpu", 1, "rank2"), Device("host", 0, "rank2"), Device("gpu", 7, "rank9")]
    b = [Device("gpu", 3, "rank1"), Device("gpu", 7, "rank9"), Device("gpu", 0, "rank0"), Device("host", 0, "rank0")]
    pairs = {(x.label if x else None, y.label if y else None) for x, y in pair_devices(a, b)}
    assert pairs == {("rank9/gpu:7", "rank9/gpu:7"),  # the same label
                     ("rank2/gpu:1", "rank0/gpu:0"), ("rank10/gpu:0", "rank1/gpu:3"),  # rank order, not text order
                     ("rank2/host", "rank0/host")}
    assert (None, "rank5/gpu:0") in {(x, y.label) for x, y in pair_devices([], [Device("gpu", 0, "rank5")])}


def test_the_step_time_is_the_hosts_profilersteps_not_the_gpus_annotation(capsys):
    """rnnprof's H200 captures (benchmarks/gpu_checks.py): Kineto gives the window's first ProfilerStep#N a GPU
    annotation too (``gpu_user_annotation``) that spans the whole window, 41 ms for steps of 10. The headline's
    step time is the mean of the host's markers (``user_annotation``), read here from each file's JSON."""
    def host_marks_ms(name):
        with gzip.open(FIXTURES / name, "rt") as f:
            events = json.load(f)["traceEvents"]
        marks = [e["dur"] for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"
                 and str(e.get("name", "")).startswith("ProfilerStep#")]
        gpu = [e["dur"] for e in events if e.get("cat") == "gpu_user_annotation"
               and str(e.get("name", "")).startswith("ProfilerStep#")]
        assert gpu and max(gpu) > 3 * max(marks)  # the GPU's one spans the window
        return float(np.mean(marks)) / 1000

    a, b = "kineto-h200-whatif-base.json.gz", "kineto-h200-whatif-no-copies.json.gz"
    assert main(["diff", str(FIXTURES / a), str(FIXTURES / b)]) == 0
    head = re.search(r"Step time: A ([\d.]+) ms, B ([\d.]+) ms", capsys.readouterr().out)
    assert head and float(head.group(1)) == pytest.approx(host_marks_ms(a), abs=0.001)
    assert float(head.group(2)) == pytest.approx(host_marks_ms(b), abs=0.001)


def test_rates_kernel_time_is_per_step_beside_the_step_time(capsys):
    """The rates table sits under 'figures per step (mean)': its kernel ms are the family's kernel time over the
    traced steps (the ProfilerStep ranges counted in the raw JSON) divided by their number, so no family shows
    more kernel time than a step lasts; and the rank a trace records is labelled as a rank id."""
    doc = diff_json([PAIR_B, PAIR_A])
    steps = {}
    for side, path in (("a", PAIR_B), ("b", PAIR_A)):
        steps[side] = sum(1 for e in _raw_events(path) if str(e.get("name", "")).startswith("ProfilerStep#")
                          and e.get("ph") == "X")
    for row in doc["rates"]["families"]:
        for side in "ab":
            assert row[f"steps_{side}"] == steps[side]
            assert row[f"kernel_us_per_step_{side}"] == pytest.approx(row[f"kernel_us_{side}"] / steps[side])
    elementwise = next(r for r in doc["rates"]["families"] if r["family"] == "Elementwise")
    assert elementwise["kernel_us_a"] > 124_000 and elementwise["kernel_us_per_step_a"] < 124_000
    console = Console(width=80, record=True, color_system=None)
    assert main(["diff", str(PAIR_B), str(PAIR_A)], console=console) == 0
    text = console.export_text()
    assert "ms/step" in text
    row = next(line for line in text.splitlines() if line.startswith("Elementwise"))
    assert row.split()[-2] == f"{elementwise['kernel_us_per_step_a'] / 1000:.3f}"
    assert "rank id (distributed.rank)" in text
