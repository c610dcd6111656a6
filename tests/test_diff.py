"""rnnprof diff: no change against itself, figures equal to count-ops' and comm's, normalized kernel names,
bad input; a planted RNNLM against the unplanted one, and loop against fused NMT (slow)."""

import gzip
import json
import re
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from rich.console import Console

from rnnprof.analyzers.diff import normalize_name
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
    assert changes["distributed.ranks"] == tuple(str(i["rank"]) for i in infos)
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

RNNLM = ["--model", "rnnlm", "--preset", "small", "--devices", "2", "--warmup", "1", "--batches", "1",
         "--trace-steps", "2"]


def _rnnprof(*args):
    return subprocess.run([sys.executable, "-m", "rnnprof", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("diff")
    from processes import run_together

    sides = (("plain", []), ("planted", ["--plant", "softmax-on-device0"]))
    for done in run_together([[sys.executable, "-m", "rnnprof", "trace", *RNNLM, *extra, "--out", str(root / name)]
                              for name, extra in sides]):
        assert done.returncode == 0, done.stderr
    return root


def _partition_nodes(path):
    return set(re.findall(r'^node \{\n  name: "([^"]+)"', path.read_text(), flags=re.MULTILINE))


@pytest.mark.slow
def test_planted_softmax_is_listed_as_moved_to_device_0_with_the_step_time_difference(planted):
    done = _rnnprof("diff", "--json", "--top", "0", str(planted / "plain"), str(planted / "planted"))
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    moved = {m["name"]: m for m in doc["graphs"]["moved"]}
    # what the partition graphs say: tower 1's softmax/projection nodes on CPU:1 before, on CPU:0 with the plant
    parts = "graphs/partitions"
    went = ((_partition_nodes(planted / "plain" / parts / "1_CPU_1.pbtxt")
             & _partition_nodes(planted / "planted" / parts / "0_CPU_0.pbtxt")))
    expected = {n for n in went if re.match(r"tower_1/(softmax|projection)/", n)}
    assert len(expected) >= 5
    listed = {n for n, m in moved.items() if re.match(r"tower_1/(softmax|projection)/", n) and m["basis"] == "assigned"}
    assert listed == expected
    # the rest were optimized away on both sides: moved as requested, the same way
    assert all((m["device_a"], m["device_b"], m["tower"]) == ("cpu:1", "cpu:0", 1) for m in moved.values())
    scopes = {(g["scope"], g["device_a"], g["device_b"]) for g in doc["graphs"]["moved_by_scope"]}
    assert {("tower_1/softmax", "cpu:1", "cpu:0"), ("tower_1/projection", "cpu:1", "cpu:0")} <= scopes

    step = next(r for r in doc["time"]["rows"] if (r["device"], r["metric"]) == ("all devices", "step"))
    assert step["a_us_per_step"] > 0 and step["b_us_per_step"] > 0
    assert step["delta_us_per_step"] == pytest.approx(step["b_us_per_step"] - step["a_us_per_step"])
    timed = next(r for r in doc["time"]["rows"] if r["device"] == "run")
    manifests = [json.loads((planted / s / "manifest.json").read_text()) for s in ("plain", "planted")]
    assert (timed["a_us_per_step"], timed["b_us_per_step"]) == pytest.approx(
        [m["throughput"]["median_step_seconds"] * 1e6 for m in manifests])
    assert [(c["key"], c["a"], c["b"]) for c in doc["config"]["changes"]] == [
        ("config.plant", "None", "softmax-on-device0")]

    table = _rnnprof("diff", str(planted / "plain"), str(planted / "planted"))
    assert table.returncode == 0, table.stderr
    assert re.search(r"tower_1/softmax\s+cpu:1\s+cpu:0", table.stdout)
    assert "all devices" in table.stdout


@pytest.mark.slow
def test_loop_vs_fused_nmt_shows_count_ops_ratios(nmt_loop_fused):
    loop, fused = str(nmt_loop_fused / "loop"), str(nmt_loop_fused / "fused")
    done = _rnnprof("diff", "--json", loop, fused)
    assert done.returncode == 0, done.stderr
    ours = {f["metric"]: f for f in json.loads(done.stdout)["ops"]["counts"]}
    counted = _rnnprof("count-ops", "--json", fused, "--vs", loop)
    assert counted.returncode == 0, counted.stderr
    theirs = {r["metric"]: r for r in json.loads(counted.stdout)["ratios"]}
    assert {m: (f["a"], f["b"], f["ratio"]) for m, f in ours.items()} == {
        m: (r["right"], r["left"], r["ratio"]) for m, r in theirs.items()}
    # the fused encoder runs far fewer graph ops and kernels than the loop
    assert ours["runtime graph ops (all)"]["ratio"] <= 0.2
    assert ours["kernel launches per step (CPU + GPU kernels)"]["ratio"] <= 0.1


def test_names_from_the_input_are_printed_verbatim(tmp_path):
    from test_report_markup import FILE_TOKEN, TOKEN, hostile_kineto, hostile_tf1, printed

    trace = hostile_tf1(tmp_path, f"trace{FILE_TOKEN}.json")
    text = printed(["diff", str(TF1_GPU_LOOP), str(trace), "--top", "0"])
    assert f"B: {trace}" in text
    assert f"MatMul{TOKEN}" in text  # an op type that appeared
    assert f"gradients/Mean_grad{TOKEN}/Prod" in text  # a name that appeared
    ranks = [str(hostile_kineto(tmp_path, r)) for r in (0, 1)]
    text = printed(["diff", "--a", str(KINETO_R0), str(KINETO_R1), "--b", *ranks, "--top", "0"])
    assert f"rank1{TOKEN}/gpu:1" in text  # a device label, and a configuration value
    assert f"0{TOKEN}, 1{TOKEN}" in text


def test_manifest_and_kineto_header_of_unexpected_shape_are_not_recorded(run_dir, tmp_path):
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest.update(throughput=[1, 2], config="fast", devices=[{"name": "/device:CPU:0"}, "cpu:1"])
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    doc = diff_json([run_dir, run_dir])
    assert doc["identical"] is True
    assert not any(r["device"] == "run" for r in doc["time"]["rows"])  # no median step to read
    with gzip.open(KINETO_R0, "rt") as f:
        trace = json.load(f)
    trace["deviceProperties"] = 5
    trace["distributedInfo"]["rank"] = [0]
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps(trace))
    changes = {c["key"]: (c["a"], c["b"]) for c in diff_json([KINETO_R0, odd])["config"]["changes"]}
    assert changes["distributed.ranks"] == ("0", "[0]") and "gpu model" not in changes
