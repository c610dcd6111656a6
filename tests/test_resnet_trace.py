"""A traced ResNet run: the python image location prefetches (tf.data's work on the host overlaps the
device's compute), and count-ops, comm and placement-audit read the run directory: a fresh capture on one device
(what the trace does), a stored one on two devices with oneDNN and without (what the analyses read; tests/data,
see its README)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

from rnnprof.cli import main
from rnnprof.events import Kind

from fixtures import FIXTURES

pytestmark = pytest.mark.slow

TRACE = ["trace", "--model", "resnet18", "--preset", "small", "--fake-location", "python", "--batch-size", "4",
         "--warmup", "1", "--batches", "1", "--trace-steps", "2"]


def _trace(out: Path, devices: int) -> tuple[Path, str]:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main([*TRACE, "--devices", str(devices), "--out", str(out)]) == 0
    return out, printed.getvalue()


@pytest.fixture(scope="module")
def one_device_trace(tmp_path_factory):
    return _trace(tmp_path_factory.mktemp("resnet1") / "run", 1)


@pytest.fixture(scope="module")
def one_device_run(one_device_trace):
    return one_device_trace[0]


# TRACE on 2 devices, as TensorFlow runs it by default (oneDNN on this x86-64 machine) and with
# TF_ENABLE_ONEDNN_OPTS=0, stored: tests/data/tf-run-resnet18-onednn/{on,off}
ONEDNN_RUNS = FIXTURES / "tf-run-resnet18-onednn"


@pytest.fixture(scope="module")
def two_device_run():
    return ONEDNN_RUNS / "on"


def _profiler_table(run: Path):
    """The tf.profiler XSpace of the profiled steps (not the one rnnprof builds from step stats)."""
    from rnnprof.traces import xplane

    manifest = json.loads((run / "manifest.json").read_text())
    files = [run / rel for rel in manifest["captured"]["xplane"] if "_devices" not in Path(rel).parent.name]
    assert len(files) == 1, files
    return xplane.load(files[0]), manifest["profiled_steps"]


def _named(table, mask) -> list[str]:
    return [table.strings[i] for i in table.op_type[mask]]


def test_python_images_are_made_on_the_host_while_the_device_computes(one_device_run):
    """Once a step has taken its batch from the prefetch buffer, tf.data's generator starts making a later
    step's batch on a host thread inside the step's compute window (from taking the batch to the step's last
    op): input work overlaps compute. Without prefetch the generator would run inside IteratorGetNext, before
    the step has its batch. Every profiled step takes its batch from the buffer; the overlap is asserted in at
    least one of them, and only its start: on loaded cores the generator's thread may start after a step's
    last op (then in no step's window) or finish after it."""
    table, profiled = _profiler_table(one_device_run)
    assert len(profiled) == 2
    lane = np.array([table.strings[i] for i in table.lane])
    op = np.array([table.strings[i] for i in table.op_type])
    generator = (lane == "tf_data") & np.char.endswith(op.astype(str), "::Generator")
    taken = (lane == "tf_data") & (op == "IteratorGetNextOp::DoCompute")
    taken_from_buffer = (lane == "tf_data") & (op == "PrefetchConsume")
    compute = (table.kind == Kind.HOST_OP) & np.char.startswith(lane.astype(str), "tf_Compute")
    assert generator.any() and taken.any(), sorted(set(op[lane == "tf_data"]))
    overlapped = []
    for step in profiled:
        in_step = table.step == step
        assert (op[compute & in_step] == "Conv2D").sum() == 20, "ResNet-18's 20 convolutions run once per step"
        assert (taken & in_step).sum() == 1
        consumed = np.flatnonzero(taken_from_buffer & in_step)
        assert len(consumed) == 1, f"step {step}: its batch did not come from the prefetch buffer"
        made = np.flatnonzero(generator & in_step & (table.ts >= table.ts[consumed[0]]))
        assert len(made) <= 1, f"step {step}: more than one batch made after the step took its own"
        computed_until = table.end[compute & in_step].max()
        overlapped += [step for m in made if table.ts[m] < computed_until]
    assert overlapped, "in no profiled step was the next batch begun while the step computed"


def test_trace_reports_images_per_second(one_device_trace):
    _, printed = one_device_trace
    assert "resnet18 on 1 logical-cpu device(s):" in printed and " images/s over 1 timed steps" in printed
    assert "words" not in printed


def test_count_ops_counts_convolutions_per_device(two_device_run, capsys):
    assert main(["count-ops", str(two_device_run), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    built, ran = doc["user_graph"]["by_device_type"], doc["runtime_graph"]["by_device_type"]
    for device in ("cpu:0", "cpu:1"):
        assert built[device]["Conv2D"] == ran[device]["Conv2D"] == 20
        assert ran[device]["Conv2DBackpropFilter"] == 20
        # The stem's input gradient is built but pruned: the images need none.
        assert built[device]["Conv2DBackpropInput"] == 20 and ran[device]["Conv2DBackpropInput"] == 19
    assert ran["cpu:0"]["IteratorGetNext"] == 2, "both towers' python batches come from the host (cpu:0)"
    assert "IteratorGetNext" not in ran["cpu:1"]


def test_comm_and_placement_audit_explain_the_host_input(two_device_run, capsys):
    assert main(["comm", str(two_device_run), "--json"]) == 0
    comm = json.loads(capsys.readouterr().out)
    assert [d["device"] for d in comm["devices"]] == ["cpu:0", "cpu:1"]
    assert {o["op_type"] for o in comm["communication_ops"]} == {"CollectiveReduce"}  # the ring all-reduce
    code = main(["placement-audit", str(two_device_run), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1  # an error-level finding: tower 1's images are made on cpu:0, tower 0's device
    pinned = [f for f in doc["findings"] if f["rule"] == "PA002-replica-work-pinned"]
    assert len(pinned) == 1
    assert sorted(pinned[0]["evidence"]["op_types"]) == ["IteratorGetNext", "OneShotIterator"]
    assert all(o.startswith("tower_1/inputs/") for o in pinned[0]["ops"])


# Fusions grappler makes only when oneDNN runs the graph: FusedBatchNormV3 + Relu as one _FusedBatchNormEx.
_ONEDNN_ONLY_FUSIONS = {"_FusedBatchNormEx", "FusedBatchNormV3", "Relu"}


def test_a_run_with_onednn_and_one_without_hold_the_same_ops(two_device_run, capsys):
    """The same trace with oneDNN switched off (TF_ENABLE_ONEDNN_OPTS=0, in a process of its own: TensorFlow reads
    it when loaded): count-ops and diff see the same convolutions, pools and matmuls on both sides, none of them
    new, gone or moved; the oneDNN run names the kernels it ran as (on a CPU where oneDNN runs)."""
    off = ONEDNN_RUNS / "off"
    assert json.loads((off / "manifest.json").read_text())["config"] == json.loads(
        (two_device_run / "manifest.json").read_text())["config"]  # the same configuration
    assert main(["count-ops", str(off), "--json"]) == 0
    without = json.loads(capsys.readouterr().out)
    assert without["runtime_graph"]["ran_as"] == {} and without["kernels"]["ran_as"] == {}
    assert main(["count-ops", str(two_device_run), "--json"]) == 0
    with_ = json.loads(capsys.readouterr().out)
    # oneDNN ran (recorded on x86-64 with TF's default)
    assert with_["runtime_graph"]["ran_as"]["Conv2D"] == {"_MklNativeConv2D": 40}
    assert with_["kernels"]["ran_as"]["Conv2D"] == ["_MklNativeConv2D"]
    for op in ("Conv2D", "Conv2DBackpropFilter", "Conv2DBackpropInput", "MaxPool", "MaxPoolGrad", "MatMul",
               "FusedBatchNormGradV3"):
        for view in ("runtime_graph", "kernels"):
            assert with_[view]["by_type"][op] == without[view]["by_type"][op], (view, op)
    assert main(["diff", str(two_device_run), str(off), "--json", "--top", "0"]) == 0
    doc = json.loads(capsys.readouterr().out)
    new_or_gone = {r["key"] for r in doc["ops"]["by_type"] if r["status"] in ("appeared", "vanished")}
    assert new_or_gone <= _ONEDNN_ONLY_FUSIONS, new_or_gone
    assert not any("_Mkl" in r["key"] for r in doc["ops"]["by_type"])
    assert {r["op_type"] for r in doc["graphs"]["counts"] if r["delta"]} <= _ONEDNN_ONLY_FUSIONS | {""}
    assert doc["graphs"]["moved"] == []
