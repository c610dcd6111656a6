"""The processes a test run started, read from /proc (Linux), for the check that none is left running.

A process whose parent exits is re-parented to the nearest "child subreaper" ancestor, or to init
where there is none; ``become_subreaper`` makes the test process that ancestor, so a grandchild left
behind by a child that exited (a server started by a command under test) still counts as ours.
"""

from __future__ import annotations

import ctypes
import os
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


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # the name in parentheses may hold spaces and ")"
    return fields[0], int(fields[1])


def command_line(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part) or "?"


def running_descendants(root: int | None = None) -> dict[int, str]:
    """Every process below ``root`` (default: this one) in the parent chains that has not exited:
    pid -> command line."""
    root = os.getpid() if root is None else root
    children: dict[int, list[int]] = {}
    states: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = _stat(int(entry.name))
        if stat is not None:
            states[int(entry.name)] = stat[0]
            children.setdefault(stat[1], []).append(int(entry.name))
    found, stack = {}, list(children.get(root, []))
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        if states[pid] not in _GONE:
            found[pid] = command_line(pid)
    return found


def left_running(grace_s: float = 10.0) -> dict[int, str]:
    """The descendants still running after up to ``grace_s`` seconds for those already on their way out."""
    deadline = time.monotonic() + grace_s
    while True:
        alive = running_descendants()
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.2)
