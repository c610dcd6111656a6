"""The planted mishaps of the TensorFlow workloads (``--plant``): each changes what it claims, in the graph's
placement or the session's ConfigProto, and nothing else; bad combinations are refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import RNNLM_SMALL_2
from rnnprof.cli import main
from rnnprof.models.config import (FEW_INTER_OP_THREADS, PLANTS, SOFTMAX_ON_DEVICE0, UPDATES_ON_DEVICE0, WorkloadConfig,
                              validate_without_gpus)
from rnnprof.errors import UsageError


def tiny(**changes) -> WorkloadConfig:
    base = WorkloadConfig(model="rnnlm", encoder="fused", layers=1, units=16, embedding=16, vocab_size=50,
                          src_max_len=6, tgt_max_len=6, batch_size=4, learning_rate=0.5, warmup=1, batches=2,
                          devices=2)
    return base.replace(**changes)


def test_the_plants_are_named_once():
    assert PLANTS == ("softmax-on-device0", "few-inter-op-threads", "updates-on-device0")
    assert (SOFTMAX_ON_DEVICE0, FEW_INTER_OP_THREADS, UPDATES_ON_DEVICE0) == PLANTS


@pytest.mark.parametrize("changes, says", [
    (dict(plant=FEW_INTER_OP_THREADS, devices=1), "needs several devices"),
    (dict(plant=UPDATES_ON_DEVICE0, devices=1), "needs several devices"),
    (dict(plant=FEW_INTER_OP_THREADS, inter_op_threads=4), "runs without --inter-op-threads"),
    (dict(plant=UPDATES_ON_DEVICE0, variable_update="parameter_server"), "replicated or independent"),
    (dict(plant=SOFTMAX_ON_DEVICE0, model="nmt"), "applies to --model rnnlm"),
])
def test_a_plant_that_cannot_apply_is_refused(changes, says):
    with pytest.raises(UsageError, match=says):
        validate_without_gpus(tiny(**changes))


@pytest.mark.parametrize("plant", [FEW_INTER_OP_THREADS, UPDATES_ON_DEVICE0])
def test_the_new_plants_apply_to_every_tensorflow_model(plant):
    validate_without_gpus(tiny(plant=plant, model="nmt"))  # no error


def test_trace_refuses_a_bad_plant_in_one_line(capsys):
    code = main(["trace", "--model", "rnnlm", "--devices", "1", "--plant", UPDATES_ON_DEVICE0, "--out",
                 "/nonexistent/never"])
    err = capsys.readouterr().err
    assert code == 2 and "needs several devices" in err and "Traceback" not in err


# -- in the graph and the session (TensorFlow) ------------------------------------------------------------------------

VARIABLE_OPS = ("VarHandleOp", "AssignVariableOp", "VarIsInitializedOp", "ReadVariableOp")  # colocated with it


def _update_ops(run):
    return [op for op in run.graph.get_operations() if op.name.startswith("update/") and op.type.startswith(
        ("Apply", "ResourceApply"))]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["replicated", "independent"])
def test_updates_on_device0_puts_every_towers_variables_and_updates_on_device_0(mode):
    from rnnprof.training.runner import DataParallelRun

    for plant in (None, UPDATES_ON_DEVICE0):
        with DataParallelRun(tiny(plant=plant, variable_update=mode)) as run:
            updates = _update_ops(run)
            variables = [op for op in run.graph.get_operations() if op.type == "VarHandleOp"
                         and op.name.startswith("tower_1/")]
            forward = [op for op in run.graph.get_operations() if op.name.startswith("tower_1/rnn") and op.device
                       and op.type not in VARIABLE_OPS and "Initializer" not in op.name]
            assert len(updates) >= 2 * 3 and variables and forward  # embedding, LSTM, projection per tower
            result = run.step()
            assert result.loss == result.loss  # a number: the step ran
        # update/sgd_tower_k/update_tower_k/...: the device index of each tower's updates
        where = {}
        for op in updates:
            where.setdefault(op.name.split("/")[1].rsplit("_", 1)[1], set()).add(op.device.rsplit(":", 1)[1])
        if plant is None:  # each tower updates its own copy on its own device
            assert where == {"0": {"0"}, "1": {"1"}}
            assert all(op.device.endswith("CPU:1") for op in variables)
        else:
            assert where == {"0": {"0"}, "1": {"0"}}, {op.name: op.device for op in updates}
            assert all(op.device.endswith("CPU:0") for op in variables)
        # the tower's own compute stays on its device either way
        assert all(op.device.endswith("CPU:1") for op in forward), {op.name: op.device for op in forward
                                                                    if not op.device.endswith("CPU:1")}


@pytest.mark.slow
def test_few_inter_op_threads_gives_the_session_one_inter_op_thread():
    from rnnprof.training.runner import DataParallelRun

    with DataParallelRun(tiny(plant=FEW_INTER_OP_THREADS)) as run:
        assert run.session_proto.inter_op_parallelism_threads == 1
        planted = sorted((op.name, op.device) for op in run.graph.get_operations())
    with DataParallelRun(tiny()) as run:
        assert run.session_proto.inter_op_parallelism_threads == 0
        plain = sorted((op.name, op.device) for op in run.graph.get_operations())
    assert planted == plain  # the graph and its placement are the same


@pytest.fixture(scope="module")
def inter_op_runs(tmp_path_factory, rnnlm_planted):
    """The small RNNLM on 2 devices traced with the few-inter-op-threads plant ("planted"), in a process of its
    own: TensorFlow's inter-op pool is the process's, sized by its first session; and without it ("control"):
    conftest's unplanted capture of the same model (``rnnlm_planted``: the same arguments, 4 traced steps where
    this one traces 1), made once for the session, in a process of its own too."""
    root = tmp_path_factory.mktemp("inter-op")
    assert RNNLM_SMALL_2[-2] == "--trace-steps"
    common = [*RNNLM_SMALL_2[:-1], "1"]
    subprocess.run([sys.executable, "-m", "rnnprof", "trace", *common, "--plant", FEW_INTER_OP_THREADS, "--out",
                    str(root / "planted")], check=True, capture_output=True)
    return {"planted": root / "planted", "control": rnnlm_planted / "plain"}


@pytest.mark.slow
def test_a_traced_run_records_the_plant_in_its_manifest(inter_op_runs):
    manifest = json.loads((inter_op_runs["planted"] / "manifest.json").read_text())
    assert manifest["config"]["plant"] == FEW_INTER_OP_THREADS
    assert manifest["session_config"]["inter_op_threads"] == 1
    control = json.loads((inter_op_runs["control"] / "manifest.json").read_text())
    assert control["config"]["plant"] is None and control["session_config"]["inter_op_threads"] == 0  # TF's default


@pytest.mark.slow
def test_the_audit_finds_one_inter_op_thread_by_the_towers_taking_turns_and_spares_tfs_default(inter_op_runs,
                                                                                             capsys):
    """PA006 on real captures: the plant's two towers never run side by side and the audit says so, with its
    cost; the control (TF's default pool) runs them side by side and draws nothing from PA006."""
    from rnnprof.analyzers.placement import inter_op_threads
    from rnnprof.commands.audit_inputs import read_audit_input

    docs, shares = {}, {}
    for name, out in inter_op_runs.items():
        assert main(["audit", str(out), "--json", "--fail-on", "never"]) == 0
        docs[name] = json.loads(capsys.readouterr().out)
        shares[name] = inter_op_threads.side_by_side(read_audit_input([str(out)]), cores=2)["share"]
    assert shares["planted"] == 0.0 and shares["control"] > 0.3  # one op at a time; TF's pool overlaps them
    (threads,) = [f for f in docs["planted"]["findings"] if f["rule"] == "PA006"]
    assert threads["severity"] == "error" and threads["evidence"]["took_turns"] is True
    assert threads["evidence"]["inter_op_threads"] == 1 and threads["evidence"]["side_by_side_share"] == 0.0
    busy = threads["evidence"]["busy_ms_per_step"]
    towers = sum(busy.values()) - max(busy.values())  # the towers' bound: what side by side saves at most
    # the CPU figure from the manifest's timed steps: wall time less the process's CPU time over the free cores
    manifest = json.loads((inter_op_runs["planted"] / "manifest.json").read_text())
    walls, cpu = manifest["step_times"]["timed"], manifest["step_cpu"]["timed"]
    cores = manifest["machine"]["cpu_count"]
    known = [(w, c) for w, c in zip(walls, cpu) if c["host_busy_s"] is not None]
    others = max(sum(c["host_busy_s"] - c["process_s"] for _, c in known), 0) / sum(w for w, _ in known)
    free = min(max(cores - others, 1.0), cores)
    figure = 1000 * float(np.median([max(w - c["process_s"] / free, 0.0) for w, c in zip(walls, cpu)]))
    assert threads["evidence"]["cpu_bound_ms_per_step"] == pytest.approx(figure, abs=0.01)
    expected = (figure * towers) ** 0.5 if figure < towers else towers
    assert threads["saving_ms"] == pytest.approx(expected, abs=0.02)
    assert docs["planted"]["findings"][0]["rule"] == "PA006"  # ranked first
    assert not [f for f in docs["control"]["findings"] if f["rule"] == "PA006"]
    assert "PA006" in next(n for n in docs["control"]["notes"] if n.startswith("rules checked"))



def test_tfs_default_pool_is_no_warning_when_taking_turns_would_gain_nothing(capsys):
    """A tiny NMT on 2 logical CPU devices, TF's own pool (0) (tests/data/tf-run-nmt-tiny, captured here): its two
    towers ran one op at a time (side by side 0 %), but the process already kept both cores busy in its timed
    steps, so running them side by side is estimated to gain nothing. A warning for it was a balanced run's
    false alarm; it is info, and the evidence still says the towers took turns."""
    from fixtures import FIXTURES

    assert main(["audit", str(FIXTURES / "tf-run-nmt-tiny"), "--json", "--fail-on", "never"]) == 0
    document = json.loads(capsys.readouterr().out)
    (finding,) = [f for f in document["findings"] if f["rule"] == "PA006"]
    evidence = finding["evidence"]
    assert evidence["inter_op_threads"] == 0 and evidence["took_turns"] and evidence["side_by_side_share"] == 0.0
    assert evidence["cpu_bound_ms_per_step"] == 0.0 and finding["saving_ms"] == 0.0  # no core left to gain
    assert finding["severity"] == "info"
    assert not [f for f in document["findings"] if f["severity"] in ("warning", "error")]
