"""rnnprof comm on rnnprof's own 2-device captures: all-reduce time shows up only when there is one."""

import json
import subprocess
import sys

import pytest

from rnnprof.analyzers.comm import analyze_comm
from rnnprof.cli import main
from rnnprof.traces import load_events

SMALL = ["--model", "rnnlm", "--preset", "small", "--layers", "1", "--units", "32", "--vocab-size", "200",
         "--batch-size", "8", "--devices", "2", "--warmup", "1", "--batches", "1", "--trace-steps", "2"]
UPDATES = ("replicated", "independent", "parameter_server")

# ``rnnprof trace`` of SMALL with each variable update, one after the other in one process: the same 2 logical
# devices each time (TF fixes them once per process), and TensorFlow imported once. A process of its own, as the
# test process's TensorFlow may already have other devices.
_CAPTURE_EACH = """
import sys
from rnnprof.cli import main
small, root = sys.argv[1].split(), sys.argv[2]
for update in sys.argv[3:]:
    code = main(["trace", *small, "--variable-update", update, "--out", f"{root}/{update}"])
    assert code == 0, (update, code)
"""


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    """The run directory of each of ``UPDATES``, captured once for the module."""
    root = tmp_path_factory.mktemp("comm")
    done = subprocess.run([sys.executable, "-c", _CAPTURE_EACH, " ".join(SMALL), str(root), *UPDATES],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return {update: root / update for update in UPDATES}


def comm(run):
    return analyze_comm(load_events(run))


@pytest.mark.slow
def test_replicated_run_spends_time_in_all_reduce_and_independent_does_not(captures, capsys):
    replicated = comm(captures["replicated"])
    assert len(replicated.devices) == 2
    for device in replicated.devices:
        assert device.total.communication_us > 0
        assert device.total.communication_us <= device.total.busy_us
        assert device.steps and all(b.communication_us > 0 for b in device.steps.values())
    # The communication is the runner's all-reduce, nothing else.
    assert replicated.comm_event_names
    assert all(name.startswith("allreduce/") for name in replicated.comm_event_names)
    assert replicated.stragglers and all(s.last_comm_start is not None for s in replicated.stragglers)
    # The ops list names the same all-reduce ops, and their summed time covers the union per device.
    assert {op.name for op in replicated.comm_ops} == set(replicated.comm_event_names)
    assert [op.total_us for op in replicated.comm_ops] == sorted((op.total_us for op in replicated.comm_ops),
                                                                  reverse=True)
    assert sum(op.total_us for op in replicated.comm_ops) >= max(d.total.communication_us
                                                                  for d in replicated.devices)
    # Steps are disjoint and every device event lies in a traced step: per-step figures add up to the total.
    for device in replicated.devices:
        assert sorted(device.steps) == list(replicated.steps) and len(replicated.steps) == 2
        for field in ("busy_us", "compute_us", "communication_us", "overlap_us"):
            assert sum(getattr(b, field) for b in device.steps.values()) == pytest.approx(
                getattr(device.total, field), rel=1e-9)
        for b in device.steps.values():
            assert b.busy_us + b.idle_us == pytest.approx(b.span_us)
    # --drop-last on a TF run: only the first traced step, whose figures are that step's in the whole report; its
    # window there runs on to the next step's start (the idle time between two session.run calls is the earlier
    # step's), while alone it ends with its last work.
    first, last = replicated.steps
    assert main(["comm", str(captures["replicated"]), "--drop-last", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["steps"] == [first] and doc["step_selection"] == "--drop-last"
    for device, whole in zip(doc["devices"], replicated.devices):
        assert device["device"] == whole.device.label
        step = whole.steps[first]
        for field in ("busy_us", "compute_us", "communication_us"):
            assert device["total"][field] == pytest.approx(step.as_dict()[field], rel=1e-9)
        assert device["total"]["span_us"] == pytest.approx(step.work_end_us - step.start_us, rel=1e-9)
        assert step.span_us > step.work_end_us - step.start_us  # the two session.run calls are apart

    independent = comm(captures["independent"])
    assert len(independent.devices) == 2
    for device in independent.devices:
        assert device.total.busy_us > 0
        assert device.total.communication_us <= 0.01 * device.total.busy_us


@pytest.mark.slow
def test_parameter_server_run_shows_its_gradient_aggregation(captures):
    report = comm(captures["parameter_server"])
    assert len(report.devices) == 2
    # The parameter device adds the towers' gradients: that aggregation is its communication.
    assert any(d.total.communication_us > 0 for d in report.devices)
    assert report.comm_ops
    assert all(op.name.startswith("gradient_aggregation/") or op.op_type in ("_Send", "_Recv")
               for op in report.comm_ops)
