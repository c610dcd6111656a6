"""rnnprof roofline on CPU runs: the CPU's peaks measured on this machine (and overridden by the flags), a
PyTorch CPU trace's operators timed by their own durations, and a TensorFlow run directory's FLOPs from its
step stats, against products computed here from the model's configured sizes."""

import gzip
import json
import os
import socket

import pytest

from fixtures import FIXTURES
from rnnprof.cli import main
from rnnprof.traces import run_metadata
from rnnprof.traces.tf_shapes import _parse_label
from rnnprof.training.cpu_peaks import measure_cpu_peaks

GLOO = FIXTURES / "torch-gloo-rank0.json.gz"


def run_cli(capsys, *argv):
    code = main(["roofline", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_measured_cpu_peak_is_positive_and_below_what_the_cores_could_do():
    peaks = measure_cpu_peaks()
    # 64 FP32 FLOPs per cycle per core (two 16-lane FMA units) at 6 GHz bounds any CPU this runs on
    bound = (os.cpu_count() or 1) * 6e9 * 64 / 1e12
    assert 0 < peaks.vector_tflops < bound
    assert peaks.tflops("fp32", True) == peaks.vector_tflops
    assert 0 < peaks.tbps < 10  # no CPU memory system moves 10 TB/s
    assert peaks.source == "measured"


def _here(tmp_path, host):
    """The gloo rank's trace, its recorded host set to ``host``."""
    with gzip.open(GLOO, "rt") as f:
        doc = json.load(f)
    doc["host_name"] = host
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(doc))
    return path


def test_cpu_trace_from_this_machine_gets_measured_peaks_and_flags_override(tmp_path, capsys):
    path = _here(tmp_path, socket.gethostname())
    code, out, err = run_cli(capsys, path, "--json")
    assert code == 0, err
    assert "measured now" in err
    (rank,) = json.loads(out)["ranks"]
    measured = rank["peaks"]
    assert measured["source"] == "measured" and measured["vector_tflops"] > 0 and measured["tbps"] > 0
    # MFU = matrix FLOPs / step wall time / the measured FP32 peak
    for step in rank["steps"]:
        assert step["mfu"] == pytest.approx(step["matrix_flops"] / (step["wall_us"] * 1e-6)
                                            / (measured["vector_tflops"] * 1e12))
    code, out, err = run_cli(capsys, path, "--json", "--peak-tflops", "7")
    assert code == 0, err
    peaks = json.loads(out)["ranks"][0]["peaks"]
    assert peaks["source"] == "measured+flags" and peaks["vector_tflops"] == 7.0
    assert peaks["matrix_tflops"]["fp32"] == 7.0 and peaks["tbps"] == measured["tbps"]


def test_cpu_trace_from_another_machine_is_not_measured(tmp_path, capsys):
    path = _here(tmp_path, socket.gethostname() + "-elsewhere")
    code, out, err = run_cli(capsys, path, "--json")
    assert code == 0, err
    assert "not this machine" in err and "measured now" not in err
    assert json.loads(out)["ranks"][0]["peaks"] is None


def test_cpu_trace_operators_are_timed_by_their_own_duration(capsys):
    """The gloo rank's aten::linear calls ran no GPU work: each is timed by its own cpu_op duration, read here
    from the raw JSON (every aten::linear is outermost: none runs inside another modeled operator)."""
    with gzip.open(GLOO) as f:
        events = json.load(f)["traceEvents"]
    linears = [e for e in events if e.get("cat") == "cpu_op" and e.get("name") == "aten::linear"]
    assert linears
    code, out, err = run_cli(capsys, GLOO, "--json", "--peak-tflops", "1", "--peak-tbps", "1")
    assert code == 0, err
    (rank,) = json.loads(out)["ranks"]
    assert rank["counts"]["time_basis"] == "operator"
    mine = [o for o in rank["ops"] if o["name"] == "aten::linear"]
    assert sum(o["count"] for o in mine) == len(linears)
    assert sum(o["kernel_us"] for o in mine) == pytest.approx(sum(e["dur"] for e in linears))
    for o in mine:  # x [B, T, H] @ W[V, H]^T + b: 2*B*T*H*V + B*T*V
        x, w = (list(map(int, s.split("x"))) for s in o["shapes"].split(",")[:2])
        rows = x[0] * x[1]
        assert o["flops"] == o["count"] * (2 * rows * x[2] * w[0] + rows * w[0])


# Sizes at which the projection's forward and weight-gradient matmuls and the LSTM's kernels each allocate over
# 0.1 MB, so that TensorFlow labels them "[mklcpu 0.3MB 0.3MB] node = Op(...)" (the input gradient stays below)
RNNLM = {"batch": 4, "steps": 10, "units": 128, "vocab": 2000}
GEMM_KERNELS = {"MatMul", "_MklMatMul", "_FusedMatMul", "_MklNativeFusedMatMul", "BlockLSTM", "BlockLSTMGrad"}


@pytest.fixture(scope="module")
def rnnlm_run(tmp_path_factory):
    """A built-in 1-layer RNNLM traced on CPU (one traced step), RNNLM's sizes."""
    out = tmp_path_factory.mktemp("tf") / "rnnlm"
    assert main(["trace", "--model", "rnnlm", "--preset", "small", "--devices", "1", "--layers", "1",
                 "--units", str(RNNLM["units"]), "--vocab-size", str(RNNLM["vocab"]),
                 "--batch-size", str(RNNLM["batch"]), "--src-max-len", str(RNNLM["steps"]),
                 "--warmup", "1", "--batches", "1", "--trace-steps", "1", "--out", str(out)]) == 0
    return out


def _roofline_rank(capsys, run):
    capsys.readouterr()
    code, text, err = run_cli(capsys, run, "--json", "--peak-tflops", "1", "--peak-tbps", "1")
    assert code == 0, err
    (rank,) = json.loads(text)["ranks"]
    return rank


@pytest.mark.slow
def test_tensorflow_run_directory_gets_flops_from_its_step_stats(rnnlm_run, capsys):
    """The RNNLM's three projection matmuls (forward, grad of the input, grad of the weights) each do 2*B*T*H*V
    FLOPs, the forward's fused bias B*T*V more."""
    b, t, h, v = RNNLM["batch"], RNNLM["steps"], RNNLM["units"], RNNLM["vocab"]
    rank = _roofline_rank(capsys, rnnlm_run)
    assert rank["has_shapes"] and rank["counts"]["time_basis"] == "operator"
    product = 2 * b * t * h * v
    projections = [o for o in rank["ops"] if o["family"] == "GEMM" and "BlockLSTM" not in o["name"]]
    flops = sorted(o["flops"] / o["count"] for o in projections)
    bias = b * t * v
    assert flops in ([product, product, product + bias], [product, product, product]), (
        flops, [(o["name"], o["count"], o["flops"]) for o in projections], rank["counts"])
    step, = rank["steps"]
    assert step["matrix_flops"] >= 3 * product and step["mfu"] is not None


def _gemm_labels(run) -> dict[str, str]:
    """node -> timeline_label of the run's matmul and LSTM kernels, from its step stats."""
    labels = {}
    for path in sorted((run / "run_metadata").glob("step-*.pb")):
        for dev in run_metadata.parse(path).step_stats.dev_stats:
            for ns in dev.node_stats:
                op = ns.timeline_label.partition(" = ")[2].partition("(")[0]
                if op in GEMM_KERNELS:
                    labels[ns.node_name] = ns.timeline_label
    return labels


def _dims(shapes: str) -> list[list[int]]:
    return [[int(d) for d in s.split("x")] if s else [] for s in shapes.split(",")]


@pytest.mark.slow
def test_tensorflow_runs_matmuls_and_lstms_that_allocate_memory_are_modeled(rnnlm_run, capsys):
    """Every matmul and LSTM kernel of the run is modeled, those whose label opens with their allocations
    ("[mklcpu 0.3MB 0.3MB] ") too: a matmul does 2*M*N*K FLOPs from its shapes (out [M, N], K = A's elements / M;
    M*N more for a fused bias), an LSTM T*2*B*(I+H)*4H (x [T, B, I], w [I+H, 4H]), its gradient twice that."""
    labels = _gemm_labels(rnnlm_run)
    allocating = {label.partition(" = ")[2].partition("(")[0] for label in labels.values() if label.startswith("[")}
    assert {"_MklNativeFusedMatMul", "BlockLSTM", "BlockLSTMGrad"} <= allocating, labels  # RNNLM's sizes do
    rank = _roofline_rank(capsys, rnnlm_run)
    gemms = [o for o in rank["ops"] if o["family"] == "GEMM"]
    assert sum(o["count"] for o in gemms) == len(labels), (labels, gemms)
    for o in gemms:
        dims = _dims(o["shapes"])
        if "LSTM" in o["name"]:
            (t, b, i), (ih, h4) = dims[0], dims[3]
            expected = t * 2 * b * ih * h4 * (2 if o["name"].endswith("Grad") else 1)
            assert ih == i + h4 // 4, o
        else:
            a, out = dims[0], dims[-1]
            m, n = out
            expected = 2 * m * n * (a[0] * a[1] // m) + (m * n if len(dims) == 4 else 0)
        assert o["flops"] == o["count"] * expected, o


def test_step_stats_labels_with_allocations_are_parsed():
    """Labels copied from a 2-device RNNLM run's step stats (``timeline_label``): a node that allocated memory
    opens with "[<allocator> <total>MB <peak>MB] "; on a GPU one per allocator, without the peak where it is 0
    (the form TensorFlow's SetTimelineLabel prints, no GPU run at hand)."""
    assert _parse_label("[mklcpu 4.9MB 4.9MB] tower_0/projection/BiasAdd = _MklNativeFusedMatMul("
                        "tower_0/projection/Reshape, tower_0/projection/MatMul/ReadVariableOp, "
                        "tower_0/projection/BiasAdd/ReadVariableOp)") == (
        "tower_0/projection/BiasAdd", "_MklNativeFusedMatMul",
        [("tower_0/projection/Reshape", 0), ("tower_0/projection/MatMul/ReadVariableOp", 0),
         ("tower_0/projection/BiasAdd/ReadVariableOp", 0)])
    assert _parse_label("[mklcpu 0.3MB 0.3MB] tower_1/gradients/gradients/zeros_like_8 = ZerosLike("
                        "tower_1/rnn/layer_0/BlockLSTM:1)") == (
        "tower_1/gradients/gradients/zeros_like_8", "ZerosLike", [("tower_1/rnn/layer_0/BlockLSTM", 1)])
    assert _parse_label("tower_0/projection/MatMul/ReadVariableOp = ReadVariableOp(tower_0/projection/kernel)") == (
        "tower_0/projection/MatMul/ReadVariableOp", "ReadVariableOp", [("tower_0/projection/kernel", 0)])
    assert _parse_label("[GPU_0_bfc 12.0MB 12.0MB] [cuda_host_bfc 0.1MB] [gpu_host_bfc 1.5MB 0.5MB] "
                        "tower_0/MatMul = MatMul(tower_0/a, tower_0/b:2, ^tower_0/c)") == (
        "tower_0/MatMul", "MatMul", [("tower_0/a", 0), ("tower_0/b", 2), ("tower_0/c", 0)])
    assert _parse_label("[4000B] [30.0Mb/s] edge_39_foo from /job:w/device:CPU:1 to /job:c/device:CPU:0") is None


def test_cpu_trace_step_selection_keeps_the_selected_steps_operators(capsys):
    """--steps 3:3 on the gloo rank: only the aten::linear calls inside ProfilerStep#3's range (raw JSON) count."""
    with gzip.open(GLOO) as f:
        events = json.load(f)["traceEvents"]
    (step,) = [e for e in events if e.get("name") == "ProfilerStep#3" and e.get("ph") == "X"
               and e.get("cat") in ("user_annotation", "cpu_op")]
    inside = [e for e in events if e.get("cat") == "cpu_op" and e.get("name") == "aten::linear"
              and step["ts"] <= e["ts"] < step["ts"] + step["dur"]]
    code, out, err = run_cli(capsys, GLOO, "--json", "--steps", "3:3", "--peak-tflops", "1", "--peak-tbps", "1")
    assert code == 0, err
    (rank,) = json.loads(out)["ranks"]
    mine = [o for o in rank["ops"] if o["name"] == "aten::linear"]
    assert sum(o["count"] for o in mine) == len(inside) >= 1
    assert [s["step"] for s in rank["steps"]] == [3]
    assert rank["counts"]["operators_modeled_outside_selected_steps"] > 0


def test_a_tensorflow_runs_kernels_overlapping_on_one_device_lane_are_each_counted():
    """TensorFlow kernels never contain one another; on a device's lane two run at once when the inter-op pool
    gives them two threads. Both are counted, where a PyTorch operator inside another is not."""
    import numpy as np

    from rnnprof.analyzers.roofline import _operators
    from rnnprof.traces.shapes import OpShapes, Signature

    def shapes(own_time):
        s = OpShapes(own_time=own_time)
        s.signatures.append(Signature("MatMul", [[21, 24], [24, 50], [21, 50]], ["float", "float", "float"], None))
        s.sig = [0, 0]
        s.lane = np.array([3, 3])
        s.ts, s.dur = np.array([0.0, 10.0]), np.array([100.0, 50.0])  # the second starts inside the first
        return s

    assert sorted(_operators(shapes(True)).outermost_rows.tolist()) == [0, 1]
    assert _operators(shapes(False)).outermost_rows.tolist() == [0]
