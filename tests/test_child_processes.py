"""Children that end with the command: a real process tree stopped as a group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rnnprof.training import child_processes

from processes import alive

# A child that starts a grandchild ignoring SIGTERM, prints the grandchild's pid, then waits.
TREE = """
import subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"],
    stdout=subprocess.PIPE, text=True)
grandchild.stdout.readline()
print(grandchild.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_stop_ends_the_whole_group_and_kills_what_ignores_sigterm():
    child = child_processes.start([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    grandchild = None
    try:
        grandchild = int(child.stdout.readline())
        assert os.getpgid(child.pid) == child.pid == os.getsid(child.pid) != os.getsid(0)  # a session of its own
        assert os.getpgid(grandchild) == child.pid
        began = time.monotonic()
        child_processes.stop(child, timeout=2)
        took = time.monotonic() - began
        assert child.returncode == -signal.SIGTERM  # the child ended on SIGTERM ...
        assert not alive(grandchild)  # ... and the grandchild that ignored it was killed
        assert 2 <= took < 30 and not child_processes.group_running(child.pid)
    finally:
        for pid in (child.pid, grandchild):
            if pid and alive(pid):
                os.kill(pid, signal.SIGKILL)
        if child.poll() is None:
            child.wait()


def test_sigterm_and_sighup_raise_keyboard_interrupt_once_and_handlers_come_back():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        with child_processes.signals_interrupt():
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signum)
                time.sleep(5)  # the handler raises here
            os.kill(os.getpid(), signum)  # a second signal while cleaning up is ignored
            time.sleep(0.1)
    assert {s: signal.getsignal(s) for s in before} == before
