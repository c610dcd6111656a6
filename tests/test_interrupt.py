"""Ctrl-C and failures in the middle of ``rnnprof trace``: the run directory stays valid and readable.

These start the real CLI in a child process and send it a real SIGINT, so the signal takes the
same path as a user's Ctrl-C (Python's KeyboardInterrupt inside a TF Session step).
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

from rnnprof.profiler import rundir

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
def test_sigint_during_traced_steps_keeps_a_readable_run(tmp_path):
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
        os.kill(child.pid, signal.SIGINT)
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
