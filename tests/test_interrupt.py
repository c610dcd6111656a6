"""Ctrl-C, SIGTERM and failures in the middle of ``rnnprof trace``: the run directory stays valid and
readable, and a script or job under capture does not keep running.

These start the real CLI in a child process and send it real signals, so a signal takes the same path
as a user's Ctrl-C (Python's KeyboardInterrupt inside a TF Session step) or a job scheduler's SIGTERM.
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rnnprof import rundir

from processes import alive

# Enough traced steps that the capture is still running when the signal arrives.
TINY_NMT = ["--model", "nmt", "--devices", "2", "--units", "16", "--layers", "1", "--src-max-len", "6",
            "--tgt-max-len", "6", "--vocab-size", "100", "--batch-size", "4", "--warmup", "1", "--batches", "1"]
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def _default_sigint():
    # A child started from a shell's background job inherits SIGINT ignored; Python would then
    # never raise KeyboardInterrupt. Restore the default so the real Ctrl-C path runs.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _manifest(run: Path) -> dict:
    return json.loads((run / rundir.MANIFEST).read_text())


def _listed_files(manifest: dict) -> list[str]:
    return [rel for files in manifest["captured"].values() for rel in files]


def _leftovers(run: Path) -> list[str]:
    """Temporary files or scratch folders that a clean stop must not leave behind."""
    return [str(p.relative_to(run)) for p in run.rglob("*")
            if p.name.startswith(".") or p.name.endswith(".tmp")]


def _count_ops(run: Path) -> tuple[int, dict | None, str]:
    done = subprocess.run([sys.executable, "-m", "rnnprof", "count-ops", str(run), "--json"],
                          capture_output=True, text=True, env=ENV, timeout=120)
    return done.returncode, json.loads(done.stdout) if done.returncode == 0 else None, done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_during_traced_steps_keeps_a_readable_run(tmp_path, signum):
    run = tmp_path / "run"
    child = subprocess.Popen(
        [sys.executable, "-m", "rnnprof", "trace", *TINY_NMT, "--trace-steps", "300", "--out", str(run)],
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        traced = []
        while time.monotonic() < deadline and child.poll() is None:
            try:
                traced = _manifest(run)["traced_steps"]
            except (OSError, ValueError, KeyError):
                traced = []  # not written yet (the manifest itself is replaced atomically)
            if len(traced) >= 2:
                break
            time.sleep(0.05)
        assert child.poll() is None, f"trace ended before the signal: {child.communicate()}"
        assert len(traced) >= 2, "trace never reached its traced steps"
        os.kill(child.pid, signum)
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
    assert child.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err

    manifest = _manifest(run)
    assert manifest["status"] == rundir.STATUS_INTERRUPTED
    assert 2 <= len(manifest["traced_steps"]) < 300
    listed = _listed_files(manifest)
    assert len(manifest["captured"]["timelines"]) == len(manifest["traced_steps"])
    assert all((run / rel).is_file() for rel in listed), [r for r in listed if not (run / r).is_file()]
    # Nothing the manifest does not know about, and nothing half-written.
    on_disk = {str(p.relative_to(run)) for p in run.rglob("*") if p.is_file()} - {rundir.MANIFEST}
    assert on_disk == set(listed)
    assert _leftovers(run) == []

    code, doc, err = _count_ops(run)
    assert code == 0, err
    assert err.startswith("note:") and "interrupted" in err
    assert f"{len(manifest['traced_steps'])} traced step(s)" in err  # what the figures cover
    kernels = doc["kernels"]
    assert kernels["available"] and sorted(kernels["steps"]) == sorted(manifest["traced_steps"])
    assert all(d["cpu_kernels"] > 0 for d in kernels["devices"]) and len(kernels["devices"]) == 2
    comm = subprocess.run([sys.executable, "-m", "rnnprof", "comm", str(run), "--json"],
                          capture_output=True, text=True, env=ENV, timeout=120)
    assert comm.returncode == 0, comm.stderr
    assert len(json.loads(comm.stdout)["devices"]) == 2


def _wait_for_traced_steps(child, run: Path, n: int) -> list:
    deadline = time.monotonic() + 120
    traced: list = []
    while time.monotonic() < deadline and child.poll() is None:
        try:
            traced = _manifest(run)["traced_steps"]
        except (OSError, ValueError, KeyError):
            traced = []
        if len(traced) >= n:
            break
        time.sleep(0.02)
    return traced


@pytest.mark.slow
def test_hard_kill_mid_capture_leaves_only_complete_files(tmp_path):
    """SIGKILL gives rnnprof no chance to clean up: the manifest still says running, yet every file it
    lists is whole (written under a temporary name, then renamed) and the analyses read the run."""
    run = tmp_path / "run"
    child = subprocess.Popen(
        [sys.executable, "-m", "rnnprof", "trace", *TINY_NMT, "--trace-steps", "300", "--out", str(run)],
        env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        traced = _wait_for_traced_steps(child, run, 3)
        assert child.poll() is None and len(traced) >= 3
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
    manifest = _manifest(run)
    assert manifest["status"] == rundir.STATUS_RUNNING
    for rel in _listed_files(manifest):
        data = (run / rel).read_bytes()
        if rel.endswith(".gz"):
            json.loads(gzip.decompress(data))  # complete: decompresses and parses
    code, doc, err = _count_ops(run)
    assert code == 0, err
    assert set(doc["kernels"]["steps"]) >= set(manifest["traced_steps"])
    assert '"running"' in err and "killed" in err


def _file_size_limit(nbytes: int):
    def apply():
        _default_sigint()
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return apply


@pytest.mark.slow
def test_write_failure_mid_capture_marks_the_run_and_says_why(tmp_path):
    """A real write failure (the file size limit a full disk or quota would impose) part way in."""
    run = tmp_path / "run"
    # The manifest (a few KB) fits; the user-level graph (~200 KB) written at capture start does not.
    done = subprocess.run(
        [sys.executable, "-m", "rnnprof", "trace", *TINY_NMT, "--trace-steps", "2", "--out", str(run)],
        env=ENV, capture_output=True, text=True, preexec_fn=_file_size_limit(64 * 1024), timeout=300)
    assert done.returncode == 2, done.stderr
    err_lines = [line for line in done.stderr.splitlines() if line.startswith("rnnprof trace:")]
    assert len(err_lines) == 1 and "Traceback" not in done.stderr
    assert "cannot write" in err_lines[0] and "graph" in err_lines[0]

    manifest = _manifest(run)
    assert manifest["status"] == rundir.STATUS_INTERRUPTED
    assert "cannot write" in manifest["error"]
    assert manifest["throughput"], "the timed window finished before the failure and is kept"
    assert all((run / rel).is_file() for rel in _listed_files(manifest))
    assert _leftovers(run) == []
    # Nothing was traced, and the analyses say so instead of printing an empty report.
    code, _, err = _count_ops(run)
    assert code == 2 and "no readable timeline" in err and len(err.strip().splitlines()) == 1


# -- a script or a running job under capture ------------------------------------------------------

# Steps forever (tf.function calls) after writing its pid where the test can read it.
ENDLESS_SCRIPT = """
import os, signal, sys, time
import tensorflow as tf
if len(sys.argv) > 2 and sys.argv[2] == "ignore-sigterm":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

@tf.function
def step(x):
    return tf.reduce_sum(tf.matmul(x, x))

with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
done = 0
while True:
    step(tf.ones([32, 32]))
    done += 1
    with open(sys.argv[1] + ".steps", "w") as f:  # the script's own count of its steps
        f.write(str(done))
    time.sleep(0.01)
"""


def _wait_for_steps(count_file: Path, more: int, seconds: float = 60) -> None:
    """Until the endless script has finished ``more`` steps after this call (its own count)."""
    def done() -> int:
        try:
            return int(count_file.read_text() or 0)
        except (OSError, ValueError):
            return 0

    start, deadline = done(), time.monotonic() + seconds
    while done() < start + more:
        assert time.monotonic() < deadline, f"the script finished no {more} steps in {seconds} s"
        time.sleep(0.02)


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _start_script_capture(tmp_path: Path, *script_args: str):
    """`rnnprof trace -- python endless.py` with the capture window open; returns (rnnprof, script pid, run)."""
    script = tmp_path / "endless.py"
    script.write_text(ENDLESS_SCRIPT)
    pid_file, run = tmp_path / "script.pid", tmp_path / "run"
    rnnprof = subprocess.Popen(
        [sys.executable, "-m", "rnnprof", "trace", "--out", str(run), "--steps", "100000", "--skip-steps", "1",
         "--", sys.executable, str(script), str(pid_file), *script_args],
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and rnnprof.poll() is None:
        try:
            if pid_file.exists() and _manifest(run)["devices"]:  # devices are recorded as the window opens
                return rnnprof, int(pid_file.read_text()), run
        except (OSError, ValueError, KeyError):
            pass  # not written yet
        time.sleep(0.05)
    rnnprof.kill()
    raise AssertionError(f"the capture window never opened: {rnnprof.communicate()}")


def _stop_all(rnnprof: subprocess.Popen, script_pid: int | None) -> None:
    """Cleanup for a failed test: nothing it started keeps running."""
    if rnnprof.poll() is None:
        os.killpg(rnnprof.pid, signal.SIGKILL)
        rnnprof.wait()
    if script_pid is not None and alive(script_pid):
        os.kill(script_pid, signal.SIGKILL)


@pytest.mark.slow
def test_sigterm_stops_the_script_under_capture_and_marks_the_run_interrupted(tmp_path):
    rnnprof, script_pid, run = _start_script_capture(tmp_path)
    try:
        _wait_for_steps(tmp_path / "script.pid.steps", 3)  # steps finished in the open window, whatever the load
        os.kill(rnnprof.pid, signal.SIGTERM)  # rnnprof alone, as `kill PID` or a job scheduler sends it
        out, err = rnnprof.communicate(timeout=120)
        assert rnnprof.returncode == 130, err
        assert _gone_within(script_pid, 10), "the script kept running after rnnprof exited"
    finally:
        _stop_all(rnnprof, script_pid)
    assert "interrupted" in err.strip().splitlines()[-1] and "Traceback" not in err
    manifest = _manifest(run)
    assert manifest["status"] == rundir.STATUS_INTERRUPTED
    # The window was open: it closed on the way out and its profile is in the run.
    assert manifest["profiled_steps"] and manifest["captured"]["xplane"]
    assert all((run / rel).is_file() for rel in _listed_files(manifest))
    assert _leftovers(run) == []


@pytest.mark.slow
def test_a_script_that_ignores_sigterm_is_killed_at_the_second_one(tmp_path):
    rnnprof, script_pid, run = _start_script_capture(tmp_path, "ignore-sigterm")
    try:
        os.kill(rnnprof.pid, signal.SIGTERM)  # passed on, and ignored by the script
        time.sleep(2)
        assert alive(script_pid)
        os.kill(rnnprof.pid, signal.SIGTERM)  # no more waiting
        out, err = rnnprof.communicate(timeout=120)
        assert rnnprof.returncode == 130, err
        assert _gone_within(script_pid, 10), "the script kept running after rnnprof exited"
    finally:
        _stop_all(rnnprof, script_pid)
    manifest = _manifest(run)
    assert manifest["status"] == rundir.STATUS_INTERRUPTED
    assert manifest["exit_code"] == -signal.SIGKILL


@pytest.mark.slow
def test_the_script_does_not_outlive_rnnprof_killed_outright(tmp_path):
    rnnprof, script_pid, run = _start_script_capture(tmp_path)
    try:
        _wait_for_steps(tmp_path / "script.pid.steps", 3)  # steps finished in the open window, whatever the load
        os.kill(rnnprof.pid, signal.SIGKILL)  # no handler runs in rnnprof
        rnnprof.wait(timeout=60)
        assert _gone_within(script_pid, 60), "the script kept running after rnnprof was killed"
    finally:
        _stop_all(rnnprof, script_pid)
    manifest = _manifest(run)
    assert manifest["status"] == rundir.STATUS_INTERRUPTED  # written by the script's side on its way out
    assert manifest["profiled_steps"] and manifest["captured"]["xplane"]


PROFILED_JOB = """
import sys, time
import tensorflow as tf
tf.profiler.experimental.server.start(int(sys.argv[1]))
w = tf.Variable(tf.ones([64, 64]) / 64.0)

@tf.function
def work():
    w.assign(tf.tanh(tf.matmul(w, w)))

work()
print("ready", flush=True)
end = time.time() + 300
while time.time() < end:
    work()
    time.sleep(0.005)
"""


@pytest.mark.slow
def test_sigterm_during_attach_ends_the_capture_at_once_and_marks_the_run_interrupted(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "job.py"
    script.write_text(PROFILED_JOB)
    job = subprocess.Popen([sys.executable, str(script), str(port)], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, env=ENV)
    run = tmp_path / "attached"
    rnnprof = None
    try:
        assert job.stdout.readline().strip() == "ready"
        rnnprof = subprocess.Popen(
            [sys.executable, "-m", "rnnprof", "trace", "--attach", f"grpc://127.0.0.1:{port}", "--duration", "300",
             "--out", str(run)],
            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and rnnprof.poll() is None:
            if list(run.glob(".attach-*")):  # the scratch folder exists once the capture request is under way
                break
            time.sleep(0.05)
        assert rnnprof.poll() is None, rnnprof.communicate()
        time.sleep(1)
        os.kill(rnnprof.pid, signal.SIGTERM)
        out, err = rnnprof.communicate(timeout=120)  # well before the 300 s the capture asked for
    finally:
        if rnnprof is not None and rnnprof.poll() is None:
            os.killpg(rnnprof.pid, signal.SIGKILL)
            rnnprof.wait()
        job.kill()
        job.wait()
    assert rnnprof.returncode == 130, err
    assert "interrupted" in err.strip().splitlines()[-1] and "Traceback" not in err
    manifest = _manifest(run)
    assert manifest["status"] == rundir.STATUS_INTERRUPTED
    assert _leftovers(run) == []
