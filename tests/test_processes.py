"""The end-of-session check (conftest.py) sees what the tests leave running, orphans included."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from processes import become_subreaper, left_running, running_descendants


def _wait_gone(pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pid not in running_descendants():
            return True
        time.sleep(0.05)
    return False


def test_a_running_child_is_listed_with_its_command_line_until_it_exits():
    child = subprocess.Popen(["sleep", "300"])
    try:
        assert running_descendants().get(child.pid) == "sleep 300"
    finally:
        child.kill()
        child.wait()
    assert child.pid not in running_descendants()


def test_an_orphaned_grandchild_is_still_listed():
    assert become_subreaper()
    # The shell starts a sleep in the background, prints its pid and exits: the sleep is orphaned.
    done = subprocess.run(["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True,
                          timeout=30)
    orphan = int(done.stdout.strip())
    try:
        assert running_descendants().get(orphan) == "sleep 300"
    finally:
        os.kill(orphan, signal.SIGKILL)
    assert _wait_gone(orphan)
    os.waitpid(orphan, 0)  # re-parented to this process, so ours to reap


def test_a_process_on_its_way_out_is_given_time_to_exit():
    child = subprocess.Popen(["sleep", "1"])
    try:
        assert child.pid not in left_running(grace_s=30)
    finally:
        child.kill()
        child.wait()
