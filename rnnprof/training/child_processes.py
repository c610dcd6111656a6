"""Child processes that end with the command that started them.

A child starts in a session (and process group) of its own, which everything it starts in turn
shares; stopping it stops that whole group: SIGTERM, then SIGKILL for whatever still runs after a
timeout. Its own group also keeps a terminal's Ctrl-C away from the child: the command receives
it and stops the group. ``signals_interrupt()`` makes SIGTERM and SIGHUP take the Ctrl-C path
(``KeyboardInterrupt``), so a command stopped by ``kill``, a job scheduler or a closed terminal
still stops its children.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator, NoReturn

STOP_TIMEOUT_S = 10.0
KILL_WAIT_S = 5.0
_INTERRUPTING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def start(argv: list[str], **popen_kwargs) -> subprocess.Popen:
    """``subprocess.Popen`` in a new session: the child leads a process group of its own."""
    return subprocess.Popen(argv, start_new_session=True, **popen_kwargs)


def group_running(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (an exited one awaiting its parent's wait does not)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended while we looked
            continue
        state, _ppid, group = text[text.rindex(")") + 2:].split()[:3]
        if int(group) == pgid and state not in ("Z", "X"):
            return True
    return False


def _group_ends(pgid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for group ``pgid`` to have no running process; whether it has none."""
    deadline = time.monotonic() + timeout
    while group_running(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def stop(process: subprocess.Popen, timeout: float = STOP_TIMEOUT_S) -> None:
    """End ``process`` (started by :func:`start`) and every process of its group.

    SIGTERM to the group, then SIGKILL to what still runs ``timeout`` seconds later; ``process``
    is waited for, so it leaves no zombie, and its pipes are closed.
    """
    pgid = process.pid  # the session leader's pid is its group's id
    deadline = time.monotonic() + timeout
    _signal_group(pgid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=timeout)
    if not _group_ends(pgid, deadline - time.monotonic()) or process.poll() is None:
        _signal_group(pgid, signal.SIGKILL)
        process.wait()
        _group_ends(pgid, KILL_WAIT_S)  # SIGKILL is delivered asynchronously
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise ``KeyboardInterrupt`` as Ctrl-C (SIGINT) does.

    Only the first such signal raises; later ones are ignored, so that cleanup after the interrupt
    (stopping children, bounded by a timeout) runs to its end. Outside the main thread, where
    handlers cannot be set, this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = False

    def interrupt(signum, frame):
        nonlocal raised
        if not raised:
            raised = True
            raise KeyboardInterrupt

    previous = {signum: signal.signal(signum, interrupt) for signum in _INTERRUPTING}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


FRAMEWORKS = ("tensorflow", "torch")


def exit_process(code: int) -> NoReturn:
    """End this process of rnnprof's own (a command, the torchrun launcher) with ``code``. Once TensorFlow or torch
    is loaded, the interpreter's teardown of their modules costs CPU and writes nothing (measured on 2 busy cores:
    about 1 s after TensorFlow's import, of 3.7 s in all, twice that on cores more loaded; 0.4 s after
    torch.distributed.run's, of 1.7 s): the exit handlers run and the output is flushed as at any exit, then the
    process ends without that teardown. A thread that is not a daemon still running is waited for by the ordinary
    exit."""
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if others or not any(name in sys.modules for name in FRAMEWORKS):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or 120  # as the interpreter's own exit does when it cannot flush
    os._exit(code)
