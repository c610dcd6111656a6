"""Step progress from the ranks of a PyTorch run to the launching process: the ranks' step logs and the follower."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from rnnprof.training.measure import StepResult
from rnnprof.training.torch_progress import StepFollower, StepLog, step_log_path


def _log(folder, rank, steps):
    log = StepLog(str(folder), rank)
    try:
        for phase, index, step in steps:
            log(phase, index, step)
    finally:
        log.close()


def test_a_step_is_reported_once_every_rank_has_finished_it_combined_as_the_runs_step(tmp_path):
    calls = []
    follower = StepFollower(str(tmp_path), 2, lambda phase, index, step: calls.append((phase, index, step)))
    assert follower.poll() == 0  # no rank has written yet: no file, nothing reported
    _log(tmp_path, 0, [("warmup", 0, StepResult(0.5, 10, 2.0)), ("timed", 0, StepResult(0.2, 10, 1.0))])
    assert follower.poll() == 0 and calls == []  # rank 1 has finished no step
    _log(tmp_path, 1, [("warmup", 0, StepResult(0.3, 12, 4.0))])
    assert follower.poll() == 1
    assert calls == [("warmup", 0, StepResult(seconds=0.5, words=22, loss=3.0))]
    _log(tmp_path, 1, [("timed", 0, StepResult(0.4, 12, 3.0))])  # appended to the same file
    assert follower.poll() == 2 and follower.poll() == 2  # each step once
    assert calls[1] == ("timed", 0, StepResult(seconds=0.4, words=22, loss=2.0))


def test_a_line_the_rank_has_only_half_written_waits_for_its_end(tmp_path):
    calls = []
    follower = StepFollower(str(tmp_path), 1, lambda phase, index, step: calls.append((phase, index, step.loss)))
    line = b"timed 3 0.25 40 1.5\n"
    with open(step_log_path(str(tmp_path), 0), "ab") as file:
        file.write(line[:9])
        file.flush()
        assert follower.poll() == 0
        file.write(line[9:])
    assert follower.poll() == 1 and calls == [("timed", 3, 1.5)]


def test_the_follower_reports_steps_while_the_ranks_run_and_the_rest_when_it_stops(tmp_path):
    """Two processes log steps apart in time; the thread reports them as they come, in order, each once."""
    code = ("import sys, time\n"
            "from rnnprof.training.measure import StepResult\n"
            "from rnnprof.training.torch_progress import StepLog\n"
            "log = StepLog(sys.argv[1], int(sys.argv[2]))\n"
            "for i in range(6):\n"
            "    log('timed', i, StepResult(0.1, 5, float(i)))\n"
            "    time.sleep(0.05)\n"
            "open(sys.argv[1] + '/done' + sys.argv[2], 'w').close()\n"
            "sys.stdin.read()\n")  # the last step is logged; wait for the test's word before exiting
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    calls, seen_while_running = [], threading.Event()

    def on_step(phase, index, step):
        calls.append((phase, index, step.words))
        seen_while_running.set()

    ranks = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(rank)], stdin=subprocess.PIPE, env=env)
             for rank in range(2)]
    try:
        with StepFollower(str(tmp_path), 2, on_step, interval=0.02):
            assert seen_while_running.wait(60)  # reported by the thread, not only at the end
            deadline = time.monotonic() + 60
            while not all((tmp_path / f"done{r}").exists() for r in range(2)) and time.monotonic() < deadline:
                time.sleep(0.05)
        assert calls == [("timed", i, 10) for i in range(6)]
    finally:
        for rank in ranks:
            rank.communicate(b"", timeout=60)
    assert not [t for t in threading.enumerate() if t.name == "rnnprof-step-follower"]


def test_a_failing_on_step_surfaces_when_the_follower_stops(tmp_path):
    def on_step(phase, index, step):
        raise RuntimeError("planted")

    _log(tmp_path, 0, [("timed", 0, StepResult(0.1, 1, 1.0))])
    follower = StepFollower(str(tmp_path), 1, on_step, interval=0.01)
    with pytest.raises(RuntimeError, match="planted"):
        with follower:
            deadline = time.monotonic() + 30
            while follower._error is None and time.monotonic() < deadline:
                time.sleep(0.01)
    assert not follower._thread.is_alive()


def test_the_progress_console_keeps_writing_to_stderr_while_descriptor_2_points_at_a_file(tmp_path):
    """A launch of PyTorch workers points descriptor 2 at a file for them to inherit; the bar must still reach
    the user's stderr meanwhile, not the file (which is shown only after a successful run)."""
    code = ("import os, sys\n"
            "from rnnprof.reports.progress import own_stderr_console\n"
            "with own_stderr_console() as console:\n"
            "    held = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT)\n"
            "    saved = os.dup(2)\n"
            "    os.dup2(held, 2)\n"
            "    console.print('drawn meanwhile')\n"
            "    os.dup2(saved, 2)\n")
    held = tmp_path / "held"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code, str(held)], capture_output=True, text=True, env=env,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "drawn meanwhile" in out.stderr and held.read_text() == ""
