"""rnnprof count-ops: JSON structure, kernel counts against counts derived from the raw traces, --vs ratios."""

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console

from rnnprof.cli import main
from test_graphs import partitions, user_graph
from test_loaders import (KINETO_NCCL, TF1_CPU_LOOP, TF1_GPU_LOOP, TF1_GPU_MATMUL, _write_rnnprof_run,
                          raw_events, tf1_expected)



def run_json(args):
    console = Console(record=True, width=10_000)
    with console.capture() as capture:
        assert main(["count-ops", "--json", *map(str, args)], console=console) == 0
    return json.loads(capture.get())


def test_json_structure_and_tf1_kernel_split():
    doc = run_json([TF1_GPU_LOOP])
    assert set(doc) >= {"source", "source_format", "user_graph", "runtime_graph", "kernels", "definitions"}
    assert doc["user_graph"]["available"] is False and "no TensorFlow graph" in doc["user_graph"]["reason"]
    expected = tf1_expected(TF1_GPU_LOOP)
    devices = {d["device"]: d for d in doc["kernels"]["devices"]}
    assert devices["gpu:0"]["gpu_kernels"] == expected[("gpu:0", "KERNEL")]
    assert devices["gpu:0"]["cpu_kernels"] == 0
    assert devices["gpu:0"]["gpu_launches"] == expected[("gpu:0", "HOST_OP")]  # launches, not kernels
    assert devices["gpu:0"]["copies"] == expected[("gpu:0", "MEMCPY")]
    assert devices["cpu:0"]["cpu_kernels"] == expected[("cpu:0", "HOST_OP")]
    assert doc["kernels"]["steps"] == [-1]
    assert {"CPU kernels", "GPU kernels", "GPU launches"} <= set(doc["definitions"])


def test_kineto_kernels_per_step_match_raw_json():
    raw = raw_events(KINETO_NCCL)
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in raw if e.get("name", "").startswith("ProfilerStep#")]
    in_step = lambda e: any(a <= e["ts"] < b for a, b in spans)  # noqa: E731
    cpu = sum(1 for e in raw if e.get("cat") == "cpu_op" and in_step(e))
    launched = {e["args"]["correlation"] for e in raw if e.get("cat") == "cuda_runtime" and in_step(e)}
    gpu = sum(1 for e in raw if e.get("cat") == "kernel" and e["args"]["correlation"] in launched)
    doc = run_json([KINETO_NCCL])
    assert doc["kernels"]["per_step"]["cpu_kernels"] == pytest.approx(cpu / len(spans))
    assert doc["kernels"]["per_step"]["gpu_kernels"] == pytest.approx(gpu / len(spans))
    kernels = Counter(e["args"]["correlation"] for e in raw if e.get("cat") == "kernel")
    runtime_launching = sum(1 for e in raw if e.get("cat") == "cuda_runtime" and e["args"]["correlation"] in kernels)
    assert doc["kernels"]["devices"][0]["device"] == "rank0/gpu:0"
    assert doc["kernels"]["devices"][0]["gpu_launches"] == runtime_launching


def test_vs_ratios_on_two_traces():
    doc = run_json([TF1_GPU_LOOP, "--vs", TF1_GPU_MATMUL])
    ratios = {r["metric"]: r for r in doc["ratios"]}
    left, right = tf1_expected(TF1_GPU_LOOP), tf1_expected(TF1_GPU_MATMUL)
    gpu = ratios["GPU kernels per step"]
    assert gpu["ratio"] == pytest.approx(left[("gpu:0", "KERNEL")] / right[("gpu:0", "KERNEL")])
    assert ratios["user graph ops (all)"]["ratio"] is None  # neither trace holds a graph
    total = ratios["kernel launches per step (CPU + GPU kernels)"]
    assert total["left"] == left[("gpu:0", "KERNEL")] + left[("cpu:0", "HOST_OP")]


def test_vs_cpu_only_traces():
    doc = run_json([TF1_CPU_LOOP, "--vs", TF1_GPU_LOOP])
    ratios = {r["metric"]: r for r in doc["ratios"]}
    assert ratios["CPU kernels per step"]["ratio"] == pytest.approx(
        tf1_expected(TF1_CPU_LOOP)[("cpu:0", "HOST_OP")] / tf1_expected(TF1_GPU_LOOP)[("cpu:0", "HOST_OP")])
    assert ratios["GPU kernels per step"]["ratio"] == 0  # 0 GPU kernels over 38: a real 0
    reverse = {r["metric"]: r for r in run_json([TF1_GPU_LOOP, "--vs", TF1_CPU_LOOP])["ratios"]}
    assert reverse["GPU kernels per step"]["ratio"] is None  # divisor 0


def _run_with_graphs(tmp_path):
    run = _write_rnnprof_run(tmp_path / "run", [0, 1])
    (run / "graphs" / "partitions").mkdir(parents=True)
    (run / "graphs" / "graph.pb").write_bytes(user_graph().SerializeToString())
    for k, p in enumerate(partitions()):
        (run / "graphs" / "partitions" / f"{k}_CPU_{k}.pb").write_bytes(p.SerializeToString())
    return run


def test_run_directory_graph_and_kernel_counts(tmp_path):
    doc = run_json([_run_with_graphs(tmp_path)])
    user, runtime = doc["user_graph"], doc["runtime_graph"]
    assert user["available"] and runtime["available"]
    assert (user["total"], user["top_level"], user["in_functions"]) == (9, 5, 4)
    assert user["functions"] == {"loop_body_7": 3, "loop_cond_7": 1}
    assert runtime["by_device"] == {"cpu:0": 5, "cpu:1": 5}
    # the partition's _MklMatMul (oneDNN's kernel) counts as the MatMul the user built, its name kept beside it
    assert runtime["by_device_type"]["cpu:1"]["MatMul"] == 1 and "_MklMatMul" not in runtime["by_type"]
    assert runtime["ran_as"] == {"MatMul": {"_MklMatMul": 1}}
    devices = {d["device"]: d for d in doc["kernels"]["devices"]}
    assert devices["cpu:0"]["per_step"] == {"0": {"cpu_kernels": 5, "gpu_kernels": 0},
                                            "1": {"cpu_kernels": 5, "gpu_kernels": 0}}
    assert devices["cpu:1"]["cpu_kernels"] == 2 * 5


def test_graph_file_alone_has_no_kernel_section(tmp_path):
    path = tmp_path / "graph.pb"
    path.write_bytes(user_graph().SerializeToString())
    doc = run_json([path])
    assert doc["user_graph"]["total"] == 9
    assert doc["runtime_graph"]["available"] is False
    assert doc["kernels"]["available"] is False and doc["kernels"]["reason"]


def test_tables_say_not_available_instead_of_empty(capsys):
    console = Console(record=True, width=200)
    assert main(["count-ops", str(TF1_CPU_LOOP), "--by", "type"], console=console) == 0
    text = console.export_text()
    assert "User graph" in text and "not available" in text
    assert "MatMul" in text and "Definitions" in text


def test_truncated_run_timeline_exit_2(tmp_path, capsys):
    run = _write_rnnprof_run(tmp_path / "run", [0])
    timeline = run / "timelines" / "step-0.trace.json.gz"
    timeline.write_bytes(timeline.read_bytes()[:40])
    assert main(["count-ops", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "step-0.trace.json.gz" in err


def test_json_document_is_valid_for_gzip_run_timelines(tmp_path):
    run = _write_rnnprof_run(tmp_path / "run", [2])
    with gzip.open(run / "timelines" / "step-2.trace.json.gz", "rt") as f:
        ops = sum(1 for e in json.load(f)["traceEvents"] if e.get("ph") == "X")
    doc = run_json([run])
    assert sum(d["cpu_kernels"] for d in doc["kernels"]["devices"]) == ops
    assert Path(doc["source"]) == run


def test_kernels_by_op_type_and_device_match_raw_json():
    raw = raw_events(TF1_GPU_LOOP)
    process = {e["pid"]: e["args"]["name"] for e in raw if e.get("ph") == "M" and e.get("name") == "process_name"}
    # GPU kernels: per-stream lanes of gpu:0, minus the copies that the memcpy lane repeats.
    copies = {(e["name"], e["ts"], e["dur"]) for e in raw
              if e.get("ph") == "X" and process[e["pid"]].endswith("/memcpy Compute")}
    gpu = Counter(e["args"].get("op") or e["name"] for e in raw
                  if e.get("ph") == "X" and "/stream:" in process[e["pid"]]
                  and "/stream:all" not in process[e["pid"]] and (e["name"], e["ts"], e["dur"]) not in copies)
    cpu = Counter(e["args"].get("op") or e["name"] for e in raw
                  if e.get("ph") == "X" and process[e["pid"]] == "/job:localhost/replica:0/task:0/cpu:0 Compute")
    doc = run_json([TF1_GPU_LOOP])
    by_device_type = doc["kernels"]["by_device_type"]
    assert by_device_type["gpu:0"] == dict(gpu)
    assert by_device_type.get("cpu:0", {}) == dict(cpu)
    assert {op: v["gpu_kernels"] for op, v in doc["kernels"]["by_type"].items() if v["gpu_kernels"]} == dict(gpu)


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("by", ["device", "type"])
def test_tables_fit_the_terminal_and_never_cut_a_number(tmp_path, width, by):
    run = _run_with_graphs(tmp_path)
    for args in ([run, "--by", by], [KINETO_NCCL, "--by", by], [run, "--vs", TF1_CPU_LOOP, "--by", by]):
        console = Console(record=True, width=width, color_system=None)
        assert main(["count-ops", *map(str, args)], console=console) == 0
        text = console.export_text()
        assert max(len(line.rstrip()) for line in text.splitlines()) <= width
        for line in text.splitlines():
            assert not re.search(r"\d…|…\d", line), line  # a number cut short
    # --by type: graph ops per op type with a column per device, for both graphs.
    console = Console(record=True, width=80, color_system=None)
    main(["count-ops", str(run), "--by", "type"], console=console)
    text = console.export_text()
    assert text.count("ops per op type and device") == 2
    header = next(line for line in text.splitlines() if line.lstrip().startswith("op type") and "all" in line)
    assert header.split()[-2:] == ["cpu:0", "cpu:1"]
    runtime = run_json([run])["runtime_graph"]["by_device_type"]
    expected = [runtime[d].get("MatMul", 0) for d in ("cpu:0", "cpu:1")]
    runtime_text = text[text.index("Runtime graph"):].splitlines()
    mkl = next(line for line in runtime_text if line.lstrip().startswith("MatMul"))
    assert mkl.split()[1:] == [str(sum(expected)), *map(str, expected)]  # all, cpu:0, cpu:1 (runtime graph)


def test_input_that_is_neither_trace_nor_graph_names_both_format_families(tmp_path, capsys):
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    assert main(["count-ops", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "notes.txt" in err
    assert "Kineto" in err and ".xplane.pb" in err and "GraphDef" in err
