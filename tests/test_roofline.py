"""rnnprof roofline: attribution of kernels to operators (against TraceLens's kernel times), peaks, MFU per step
and collectives' bus bandwidth (against figures computed here from the raw JSON), and the command's edges."""

import csv
import gzip
import json

import pytest

from fixtures import FIXTURES
from rnnprof.analyzers.peaks import lookup, override
from rnnprof.analyzers.roofline import analyze_roofline, bus_factor
from rnnprof.cli import main
from rnnprof.traces import load_events
from rnnprof.traces.shapes import load_shapes

REPORTS = FIXTURES / "tracelens"
H100_BF16 = 989.4


def analyse(name, peaks=None):
    path = FIXTURES / name
    table = load_events(str(path))
    return analyze_roofline(table, load_shapes(path, table), peaks)


def raw(name):
    with gzip.open(FIXTURES / name) as f:
        return json.load(f)["traceEvents"]


def tracelens_totals(folder, family):
    with open(REPORTS / folder / f"{family}.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    count = sum(int(r["name_count"]) for r in rows)
    flops = sum(round(float(r["GFLOPS_first"]) * 1e9) * int(r["name_count"]) for r in rows)
    kernel_us = sum(float(r["Kernel Time (µs)_sum"]) for r in rows)
    return count, flops, kernel_us


@pytest.mark.parametrize("name, folder, families", [
    ("kineto-h100-bert-small-shapes.json.gz", "h100-bert-small", ("GEMM", "SDPA_fwd")),
    ("kineto-h100-vit-shapes.json.gz", "h100-vit", ("GEMM", "SDPA_fwd")),
    ("kineto-mi300x-8rank-ddp-rank0.json.gz", "mi300x-resnet", ("GEMM",)),
])
def test_kernels_attributed_to_their_operators_as_tracelens_does(name, folder, families):
    """Every GEMM and attention operator gets the kernels TraceLens gives it: same count, FLOPs and kernel time
    (GEMMs are found under ``aten::linear`` here, one operator up from TraceLens's ``aten::addmm``)."""
    report = analyse(name)
    for family in families:
        count, flops, kernel_us = tracelens_totals(folder, family)
        mine = report.families[family]
        assert mine.count == count
        assert mine.rates.flops == flops
        assert mine.rates.kernel_us == pytest.approx(kernel_us, rel=1e-5)  # TraceLens sums float32 times
        assert mine.rates.tflops_per_s == pytest.approx(flops / kernel_us / 1e6, rel=1e-5)


def test_step_mfu_from_the_raw_trace():
    """bert-small's one profiled step: matrix FLOPs (TraceLens's GEMM + attention) / the host ProfilerStep's
    duration / the H100's bf16 peak."""
    events = raw("kineto-h100-bert-small-shapes.json.gz")
    steps = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
             or e.get("cat") == "cpu_op" and e["name"].startswith("ProfilerStep#")]
    assert steps
    report = analyse("kineto-h100-bert-small-shapes.json.gz", lookup("NVIDIA H100 80GB HBM3"))
    by_step = {s.step: s for s in report.steps}
    matrix = sum(tracelens_totals("h100-bert-small", f)[1] for f in ("GEMM", "SDPA_fwd"))
    with_work = [s for s in by_step.values() if s.matrix_flops]
    assert len(with_work) == 1
    step = with_work[0]
    span = next(e for e in steps if e["name"] == f"ProfilerStep#{step.step}")
    assert step.wall_us == pytest.approx(span["dur"])
    assert step.matrix_flops == matrix
    assert step.mfu == pytest.approx(matrix / (span["dur"] * 1e-6) / (H100_BF16 * 1e12))


def test_bound_follows_the_ridge_point():
    peaks = lookup("NVIDIA H100 80GB HBM3")
    report = analyse("kineto-h100-vit-shapes.json.gz", peaks)
    ridge = H100_BF16 / 3.35
    judged = 0
    for row in report.ops:
        if row.dtype == "bf16" and row.matrix:
            assert row.bound == ("memory" if row.rates.intensity < ridge else "compute")
            roof = min(H100_BF16, row.rates.intensity * 3.35)
            assert row.of_roofline == pytest.approx(row.rates.tflops_per_s / roof)
            judged += 1
    assert judged >= 5
    assert {r.bound for r in report.ops} == {"memory", "compute"}


@pytest.mark.parametrize("device, expected", [
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"), ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
    ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 SXM 80GB"), ("NVIDIA A100-PG509-200", "NVIDIA A100 40GB"),
    ("Tesla V100-SXM2-32GB", "NVIDIA V100 SXM2"), ("NVIDIA L4", "NVIDIA L4"), ("NVIDIA B200", "NVIDIA B200"),
    ("AMD Instinct MI300X", "AMD Instinct MI300X"), ("AMD Instinct MI250X", "AMD Instinct MI250X"),
    ("NVIDIA H200", "NVIDIA H200 SXM"),
])
def test_peaks_by_device_name(device, expected):
    assert lookup(device).device == expected


def test_unknown_device_has_no_peaks_and_flags_override():
    assert lookup("AMD Radeon Graphics") is None
    given = override(None, 100.0, 2.0)
    assert given.tflops("bf16", True) == 100.0 and given.tflops("fp32", False) == 100.0 and given.tbps == 2.0
    h100 = override(lookup("NVIDIA H100 80GB HBM3"), None, 1.0)
    assert h100.tbps == 1.0 and h100.tflops("bf16", True) == H100_BF16 and h100.source == "table+flags"


def test_collective_bus_bandwidth_from_the_kernels_recorded_message():
    """B200 rank 0: its one all-gather kernel carries its message; NCCL's busbw = out bytes / time x (n-1)/n."""
    events = raw("kineto-b200-8rank-rank0.json.gz")
    kernels = [e for e in events if e.get("cat") == "kernel" and "In msg nelems" in e.get("args", {})]
    assert len(kernels) == 1
    k = kernels[0]
    size = k["args"]["Out msg nelems"] * 2  # BFloat16
    n = k["args"]["Group size"]
    report = analyse("kineto-b200-8rank-rank0.json.gz")
    (row,) = report.collectives
    assert (row.collective, row.group_size, row.count, row.bytes) == ("all-gather", n, 1, size)
    assert row.algbw_gbps == pytest.approx(size / (k["dur"] * 1e-6) / 1e9)
    assert row.busbw_gbps == pytest.approx(row.algbw_gbps * (n - 1) / n)
    assert report.counts["collectives_without_message"] == report.counts["collectives"] - 1


def test_collective_message_from_the_launching_record_param_comms():
    """MI300X DDP: RCCL kernels carry no message; the record_param_comms operator around their launch does."""
    events = raw("kineto-mi300x-8rank-ddp-rank0.json.gz")
    comms = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "record_param_comms"
             and e["args"].get("Collective name") == "allreduce"]
    report = analyse("kineto-mi300x-8rank-ddp-rank0.json.gz")
    (row,) = [r for r in report.collectives if r.collective == "all-reduce"]
    bpe = {"BFloat16": 2, "Float": 4}
    assert row.count == len(comms)
    assert row.bytes == sum(e["args"]["In msg nelems"] * bpe[e["args"]["dtype"]] for e in comms)
    assert row.busbw_gbps == pytest.approx(row.algbw_gbps * 2 * 7 / 8)


def test_bus_factors():
    assert bus_factor("all-reduce", 8) == 2 * 7 / 8
    assert bus_factor("reduce-scatter", 4) == 3 / 4
    assert bus_factor("broadcast", 8) == 1.0


# --- the command ----------------------------------------------------------------------------------


def run_cli(capsys, *argv):
    code = main(["roofline", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_json_document(capsys):
    code, out, err = run_cli(capsys, FIXTURES / "kineto-h100-vit-shapes.json.gz", "--json", "--peak-tflops", "500",
                             "--peak-tbps", "2")
    assert code == 0, err
    doc = json.loads(out)
    (rank,) = doc["ranks"]
    assert rank["peaks"]["source"] == "table+flags" and rank["has_shapes"]
    assert rank["peaks"]["device"] == "NVIDIA H100 SXM" and rank["peaks"]["tbps"] == 2.0
    gemm = rank["families"]["GEMM"]
    count, flops, kernel_us = tracelens_totals("h100-vit", "GEMM")
    assert gemm["flops"] == flops and gemm["count"] == count
    assert {"ops", "steps", "collectives", "counts"} <= set(rank) and "left_out" in doc
    # the MI250 trace names its device "AMD Radeon Graphics": without flags the note says so, no bound is judged
    code, out, err = run_cli(capsys, FIXTURES / "kineto-mi250-rocm.json.gz", "--json")
    assert code == 0 and "no peaks" in err and "--peak-tflops" in err
    assert all(o["bound"] == "" for o in json.loads(out)["ranks"][0]["ops"])


def test_a_bf16_products_achieved_rate_agrees_with_cuda_events_on_an_h200(capsys):
    """rnnprof's H200 capture of benchmarks/gpu_checks.py: five bf16 8192x8192 products a step, timed together by
    the script's CUDA events (2 n^3 flops each; h200-gpu-checks-clock.json). The events also hold the launch gaps
    between the products, so rnnprof's rate over the kernels alone may be a little higher, never lower."""
    clock = json.loads((FIXTURES / "h200-gpu-checks-clock.json").read_text())
    rows = [r for r in clock["steps"] if 3 <= r["step"] <= 6]
    events_tflops = sum(r["matmul_flop"] for r in rows) / sum(r["matmul_ms"] for r in rows) / 1e9
    code, out, err = run_cli(capsys, FIXTURES / "kineto-h200-gpu-checks.json.gz", "--json")
    assert code == 0, err
    (rank,) = json.loads(out)["ranks"]
    assert rank["peaks"]["device"] == "NVIDIA H200 SXM" and clock["device"] == "NVIDIA H200"
    (products,) = [o for o in rank["ops"] if o["name"] == "aten::matmul" and o["shapes"] == "8192x8192,8192x8192"]
    assert products["count"] == 5 * len(rows) and products["flops"] == sum(r["matmul_flop"] for r in rows)
    assert events_tflops <= products["tflops_per_s"] <= 1.05 * events_tflops, (products, events_tflops)


def test_cli_trace_without_shapes_says_what_is_missing(capsys):
    code, out, err = run_cli(capsys, FIXTURES / "kineto-1gpu-v100.json.gz")
    assert code == 0
    assert "record_shapes=True" in err and "still given" in err
    assert "per step" in out  # the steps' GPU time is still reported


def test_cli_tensorflow_input_is_not_available(capsys):
    code, out, err = run_cli(capsys, FIXTURES / "tf1-timeline-gpu-matmul.json", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["available"] is False and "TensorFlow" in doc["reason"]


@pytest.mark.parametrize("argv", [["{missing}"], ["{garbage}"], ["{trace}", "--peak-tflops", "-1"],
                                  ["{trace}", "--peak-tbps", "nan"], ["{trace}", "--steps", "900:901"]])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys, argv):
    garbage = tmp_path / "bad.json"
    garbage.write_text("{ not json")
    paths = {"missing": tmp_path / "nope.json", "garbage": garbage,
             "trace": FIXTURES / "kineto-h100-bert-small-shapes.json.gz"}
    code, out, err = run_cli(capsys, *[a.format(**paths) for a in argv])
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_cli_rank_files_and_chart(tmp_path, capsys):
    plot = tmp_path / "roofline.svg"
    code, out, err = run_cli(capsys, FIXTURES / "kineto-mi300x-8rank-ddp-rank0.json.gz",
                             FIXTURES / "kineto-8rank-rank3-a100.json.gz", "--plot", plot)
    assert code == 0, err
    assert "AMD Instinct MI300X" in out and "NVIDIA A100" in out
    assert plot.stat().st_size > 1000 and b"<svg" in plot.read_bytes()[:400]


def test_an_operator_owns_every_kernel_launched_inside_it():
    """ViT's patch-embedding convolution launches 7 GPU activities through nested operators (memsets of
    ``aten::zeros``, cuDNN's layout transposes, the bias ``aten::add_``, each itself modeled or not): all belong to
    the outermost modeled operator, as in TraceLens's CONV_fwd kernel list and time."""
    with open(REPORTS / "h100-vit" / "CONV_fwd.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    report = analyse("kineto-h100-vit-shapes.json.gz")
    conv = report.families["CONV_fwd"]
    assert conv.kernels == row["kernel_details__summarize_kernel_stats"].count("'name'") == 7
    assert conv.rates.kernel_us == pytest.approx(float(row["Kernel Time (µs)_sum"]), rel=1e-5)


def test_report_page_has_the_roofline_and_the_steps_mfu(tmp_path, capsys):
    """``rnnprof report`` on bert-small: its Roofline section gives the step's MFU as computed here from the raw
    JSON (TraceLens's GEMM + attention FLOPs / the ProfilerStep's duration / the H100's bf16 peak), and a chart."""
    import re

    events = raw("kineto-h100-bert-small-shapes.json.gz")
    matrix = sum(tracelens_totals("h100-bert-small", f)[1] for f in ("GEMM", "SDPA_fwd"))
    out = tmp_path / "bert.html"
    assert main(["report", str(FIXTURES / "kineto-h100-bert-small-shapes.json.gz"), "-o", str(out)]) == 0
    capsys.readouterr()
    page = out.read_text()
    section = page[page.index("<h2>Roofline and MFU</h2>"):]
    assert 'data-chart="roofline"' in section
    rows = re.findall(r"<tr><td>(\d+)</td><td>bf16</td>(.*?)</tr>", section)
    assert rows
    spans = {int(e["name"].split("#")[1]): e["dur"] for e in events
             if e.get("cat") in ("user_annotation", "cpu_op") and e["name"].startswith("ProfilerStep#")}
    shown = {int(step): re.findall(r">([^<]*)</td>", cells) for step, cells in rows}
    (step, cells), = [(s, c) for s, c in shown.items() if c[2] != "0.000"]
    assert float(cells[-1]) == pytest.approx(100 * matrix / (spans[step] * 1e-6) / (H100_BF16 * 1e12), abs=0.006)


def test_diff_compares_achieved_rates_per_family(capsys):
    """``rnnprof diff`` bert-small (A) against ViT (B): each family's TFLOP/s on each side is TraceLens's FLOPs
    over its kernel time for that trace, and the ratio B ÷ A."""
    assert main(["diff", str(FIXTURES / "kineto-h100-bert-small-shapes.json.gz"),
                 str(FIXTURES / "kineto-h100-vit-shapes.json.gz"), "--json"]) == 0
    rates = json.loads(capsys.readouterr().out)["rates"]
    assert rates["available"]
    rows = {r["family"]: r for r in rates["families"]}
    for family in ("GEMM", "SDPA_fwd"):
        _, flops_a, us_a = tracelens_totals("h100-bert-small", family)
        _, flops_b, us_b = tracelens_totals("h100-vit", family)
        row = rows[family]
        assert row["tflops_a"] == pytest.approx(flops_a / us_a / 1e6, rel=1e-5)
        assert row["tflops_b"] == pytest.approx(flops_b / us_b / 1e6, rel=1e-5)
        assert row["ratio"] == pytest.approx(row["tflops_b"] / row["tflops_a"])
    assert rows["CONV_fwd"]["tflops_a"] is None and rows["CONV_fwd"]["tflops_b"] > 0  # ViT's alone


def test_diff_without_shapes_says_why_no_rates(capsys):
    assert main(["diff", str(FIXTURES / "kineto-1gpu-v100.json.gz"),
                 str(FIXTURES / "kineto-h100-vit-shapes.json.gz"), "--json"]) == 0
    rates = json.loads(capsys.readouterr().out)["rates"]
    assert not rates["available"] and "record_shapes" in rates["reason"]


def test_a_trace_judged_shapeless_from_its_first_mb_has_no_shapes_anywhere():
    """The report and diff skip streaming a trace for shapes when its first MB says it recorded none: checked on
    every real Kineto trace against all of its operators, read from the raw JSON."""
    from fixtures import KINETO
    from rnnprof.traces.shapes import recorded_without_shapes

    judged = 0
    for name in KINETO:
        path = FIXTURES / name
        with gzip.open(path) if str(path).endswith(".gz") else open(path, "rb") as f:
            events = json.load(f)["traceEvents"]
        with_dims = sum("Input Dims" in (e.get("args") or {}) for e in events if e.get("cat") == "cpu_op")
        if recorded_without_shapes(path):
            assert with_dims == 0, path
            judged += 1
        elif with_dims == 0:  # few operators: streamed, and found empty
            assert sum(e.get("cat") == "cpu_op" for e in events) < 500, path
    assert judged >= 3


def test_the_json_is_the_same_whatever_the_hash_seed():
    """The peak table given by --peak-tflops covers a set of dtypes: its order must not follow string hashing."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    trace = FIXTURES / "kineto-1gpu-v100.json.gz"
    outputs = set()
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
        done = subprocess.run([sys.executable, "-m", "rnnprof", "roofline", str(trace), "--json", "--peak-tflops", "1",
                               "--peak-tbps", "1"], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        outputs.add(done.stdout)
    assert len(outputs) == 1
