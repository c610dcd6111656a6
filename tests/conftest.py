"""Checks over the whole test session."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from fixtures import TINY_NMT
from processes import become_subreaper, left_running


@pytest.fixture(scope="session", autouse=True)
def no_process_left_running():
    """The suite leaves no process behind: at the end, every process it started (children, their
    children, and orphans re-parented to the test process) has exited, or the last test fails naming it."""
    become_subreaper()
    yield
    left = left_running()
    for pid in left:  # named below; not left to run on
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if left:
        listing = "; ".join(f"pid {pid}: {command}" for pid, command in sorted(left.items()))
        pytest.fail(f"{len(left)} process(es) started by the tests still running at the end: {listing}",
                    pytrace=False)


NMT_LOOP_FUSED = ["--model", "nmt", "--direction", "bi", "--layers", "4", "--units", "16", "--vocab-size", "200",
                  "--src-max-len", "12", "--tgt-max-len", "12", "--batch-size", "4", "--devices", "2",
                  "--warmup", "1", "--batches", "1", "--trace-steps", "1"]


@pytest.fixture(scope="session")
def nmt_loop_fused(tmp_path_factory):
    """Loop and fused NMT (4 layers, bi encoder, 2 devices) captured once for the session: ``root/loop``,
    ``root/fused``."""
    root = tmp_path_factory.mktemp("nmt")
    from processes import run_together

    for done in run_together([[sys.executable, "-m", "rnnprof", "trace", *NMT_LOOP_FUSED, "--encoder", encoder,
                               "--out", str(root / encoder)] for encoder in ("loop", "fused")]):
        assert done.returncode == 0, done.stderr
    return root


@pytest.fixture(scope="session")
def tiny_nmt_run(tmp_path_factory):
    """``rnnprof trace`` of TINY_NMT captured once for the session, into a folder named ``nmt2``; tests only
    read it."""
    from rnnprof.cli import main

    out = tmp_path_factory.mktemp("tiny") / "nmt2"
    assert main(["trace", *TINY_NMT, "--out", str(out)]) == 0
    return out
