"""Checks over the whole test session."""

from __future__ import annotations

import os
import signal

import pytest

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
