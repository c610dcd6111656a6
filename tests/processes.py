"""The processes a test run started, read from /proc (Linux), for the check that none is left running.

A process whose parent exits is re-parented to the nearest "child subreaper" ancestor, or to init
where there is none; ``become_subreaper`` makes the test process that ancestor, so a grandchild left
behind by a child that exited (a server started by a command under test) still counts as ours.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import time
from pathlib import Path

_PR_SET_CHILD_SUBREAPER = 36
_GONE = {"Z", "X", "x"}  # zombie or dead: exited, only not reaped yet


def become_subreaper() -> bool:
    """Orphaned descendants of this process are re-parented to it instead of init; False where unsupported."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class Proc:
    """One process as /proc shows it; ``start`` (clock ticks after boot) tells it from a later one with its pid."""

    def __init__(self, pid: int):
        text = Path(f"/proc/{pid}/stat").read_text()
        fields = text[text.rindex(")") + 2:].split()  # the name in parentheses may hold spaces and ")"
        self.pid, self.state, self.ppid, self.session, self.start = (
            pid, fields[0], int(fields[1]), int(fields[3]), int(fields[19]))
        self.cmdline = command_line(pid)

    def running(self) -> bool:
        """Still there, the same process, and not exited (a zombie has ended; it only awaits its parent's wait)."""
        try:
            now = Proc(self.pid)
        except (OSError, ValueError, IndexError):
            return False
        return now.start == self.start and now.state not in _GONE

    def __repr__(self):
        return f"{self.pid} [{self.state}] {self.cmdline[:120]}"


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (not merely a zombie waiting to be reaped)."""
    try:
        return Proc(pid).state not in _GONE
    except (OSError, ValueError, IndexError):
        return False


def command_line(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part) or "?"


def processes() -> list[Proc]:
    """Every process /proc lists now."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found.append(Proc(int(entry.name)))
            except (OSError, ValueError, IndexError):
                pass  # ended while we looked
    return found


def descendants(root: int | None = None) -> list[Proc]:
    """Every process below ``root`` (default: this one) in the parent chains, exited or not."""
    root = os.getpid() if root is None else root
    children: dict[int, list[Proc]] = {}
    for proc in processes():
        children.setdefault(proc.ppid, []).append(proc)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


# multiprocessing's resource tracker, started by a spawn pool (rnnprof.job.workers) in this process: it serves
# the process that started it and ends with it, so it is not left running by a test.
RESOURCE_TRACKER = "from multiprocessing.resource_tracker import main"


def running_descendants(root: int | None = None) -> dict[int, str]:
    """The descendants of ``root`` (default: this process) that have not exited: pid -> command line
    (this process's own resource tracker aside)."""
    me = os.getpid()
    return {proc.pid: proc.cmdline for proc in descendants(root)
            if proc.state not in _GONE and not (RESOURCE_TRACKER in proc.cmdline and proc.ppid == me)}


def left_running(grace_s: float = 10.0) -> dict[int, str]:
    """The descendants still running after up to ``grace_s`` seconds for those already on their way out."""
    deadline = time.monotonic() + grace_s
    while True:
        alive = running_descendants()
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.2)


def run_together(commands: list[list[str]], timeout: float = 300) -> list[subprocess.CompletedProcess]:
    """Run independent commands (captures for one fixture) side by side and wait for all of them: a capture
    is mostly one Python thread building a graph, so two of them share two cores well. Every command is
    killed if one cannot be waited for (timeout, Ctrl-C)."""
    children = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for argv in commands]
    done = []
    try:
        deadline = time.monotonic() + timeout
        for argv, child in zip(commands, children):
            out, err = child.communicate(timeout=max(1.0, deadline - time.monotonic()))
            done.append(subprocess.CompletedProcess(argv, child.returncode, out, err))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.communicate()
    return done


def run_retried(command: list[str], attempts: int = 2, **kwargs) -> subprocess.CompletedProcess:
    """``command`` run to its end (``kwargs`` as for ``subprocess.run``), run again if it fails, at most ``attempts``
    times in all; the last run's result, its output captured as text. For a gloo job under torchrun: its
    rendezvous on a loaded 2-core machine fails now and then before the first step (a peer's connection reset,
    rank 0 aborted)."""
    for _ in range(attempts):
        done = subprocess.run(command, capture_output=True, text=True, **kwargs)
        if done.returncode == 0:
            break
    return done


def stderr_ends(done: subprocess.CompletedProcess, chars: int = 2000) -> str:
    """The first and the last ``chars`` characters of a finished process's stderr: where a launcher prints its
    ranks' tracebacks, the first failure is near the top and the launcher's summary at the end."""
    err = done.stderr or ""
    return err if len(err) <= 2 * chars else f"{err[:chars]}\n[...]\n{err[-chars:]}"
