"""rnnprof comm on rnnprof's own 2-device captures: all-reduce time shows up only when there is one."""

import subprocess
import sys

import pytest

from rnnprof.analyzers.comm import analyze_comm
from rnnprof.profiler.loaders import load_events

SMALL = ["--model", "rnnlm", "--preset", "small", "--layers", "1", "--units", "32", "--vocab-size", "200",
         "--batch-size", "8", "--devices", "2", "--warmup", "1", "--batches", "1", "--trace-steps", "2"]


def capture(out, variable_update):
    # A fresh process per capture: TF fixes its logical devices once per process.
    done = subprocess.run([sys.executable, "-m", "rnnprof", "trace", *SMALL, "--variable-update", variable_update,
                           "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return analyze_comm(load_events(out))


@pytest.mark.slow
def test_replicated_run_spends_time_in_all_reduce_and_independent_does_not(tmp_path):
    replicated = capture(tmp_path / "replicated", "replicated")
    assert len(replicated.devices) == 2
    for device in replicated.devices:
        assert device.total.communication_us > 0
        assert device.total.communication_us <= device.total.busy_us
        assert device.steps and all(b.communication_us > 0 for b in device.steps.values())
    # The communication is the runner's all-reduce, nothing else.
    assert replicated.comm_event_names
    assert all(name.startswith("allreduce/") for name in replicated.comm_event_names)
    assert replicated.stragglers and all(s.last_comm_start is not None for s in replicated.stragglers)

    independent = capture(tmp_path / "independent", "independent")
    assert len(independent.devices) == 2
    for device in independent.devices:
        assert device.total.busy_us > 0
        assert device.total.communication_us <= 0.01 * device.total.busy_us
