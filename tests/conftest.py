"""Checks over the whole test session."""

from __future__ import annotations

import os
import signal

import pytest

from processes import Proc, become_subreaper, left_running

RESOURCE_TRACKER = "from multiprocessing.resource_tracker import main"


def _parent(pid: int) -> int | None:
    try:
        return Proc(pid).ppid
    except (OSError, ValueError, IndexError):
        return None


@pytest.fixture(scope="session", autouse=True)
def no_process_left_running():
    """The suite leaves no process behind: at the end, every process it started (children, their
    children, and orphans re-parented to the test process) has exited, or the last test fails naming it."""
    become_subreaper()
    yield
    # multiprocessing's resource tracker serves this process (a spawn pool started it) and ends with it.
    left = {pid: command for pid, command in left_running().items()
            if not (RESOURCE_TRACKER in command and _parent(pid) == os.getpid())}
    for pid in left:  # named below; not left to run on
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if left:
        listing = "; ".join(f"pid {pid}: {command}" for pid, command in sorted(left.items()))
        pytest.fail(f"{len(left)} process(es) started by the tests still running at the end: {listing}",
                    pytrace=False)
