"""SIGTERM ends a capture the way Ctrl-C does: what was captured is kept and the run says ``interrupted``.

A job scheduler or ``kill`` sends SIGTERM; Python's default is to die on the spot, which leaves the
manifest saying ``running`` and a script under capture still running. Inside ``terminate_as_interrupt``
SIGTERM raises ``Terminated``, a ``KeyboardInterrupt``, so every ``except KeyboardInterrupt`` that
closes a capture handles both, and the code that must tell them apart (a Ctrl-C from a terminal
reaches the whole process group; a SIGTERM only the process it was sent to) can. ``SignalWakeup`` lets another
thread see them while the main thread is stuck outside Python.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived."""


def _raise_terminated(signum, frame):
    raise Terminated


@contextlib.contextmanager
def terminate_as_interrupt():
    """While inside, SIGTERM raises ``Terminated`` in the main thread; the previous handler comes back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def ignore_interrupts() -> None:
    """From now on SIGINT and SIGTERM do nothing: a capture that is closing finishes writing.

    Whoever started this process stops it with SIGKILL if closing takes too long.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _raise_once(signum, frame):
    """The first SIGINT or SIGTERM stops the script; later ones (Ctrl-C reaches the whole process group and
    rnnprof passes its own signal on too) are ignored, so the capture's close is not cut short."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt


@contextlib.contextmanager
def interrupt_once():
    """In the process under capture: the first SIGINT or SIGTERM raises ``KeyboardInterrupt`` (``Terminated``
    for SIGTERM) in the main thread, and every later one is ignored. Handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _raise_once) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def interrupts_deferred():
    """A SIGINT or SIGTERM that arrives inside is delivered as the block ends, so what the block writes (a
    trace being exported) is whole. Outside the main thread, or with a handler that is not Python's (ignored,
    default), it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []

    def remember(signum, frame):
        arrived.append(signum)

    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(signum)
        if callable(handler):
            previous[signum] = signal.signal(signum, remember)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if arrived:
            signal.raise_signal(arrived[0])  # the handler now runs, as if the signal came just now


class SignalWakeup:
    """The signals this process's Python handlers take (Ctrl-C, SIGTERM), seen from another thread: written to a
    pipe by the C handler (``signal.set_wakeup_fd``) even while the main thread never runs Python."""

    def __init__(self, read_fd: int, write_fd: int, old: int):
        self._read, self._write, self._old = read_fd, write_fd, old

    @classmethod
    def install(cls) -> "SignalWakeup | None":
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        try:
            old = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        except ValueError:  # not the main thread: interrupts stay the main thread's alone
            os.close(read_fd)
            os.close(write_fd)
            return None
        return cls(read_fd, write_fd, old)

    def interrupted(self, timeout_s: float) -> bool:
        """Whether SIGINT or SIGTERM came (since the last look), waiting up to ``timeout_s``."""
        ready, _, _ = select.select([self._read], [], [], timeout_s)
        try:
            got = os.read(self._read, 512) if ready else b""
        except OSError:
            return False
        return int(signal.SIGINT) in got or int(signal.SIGTERM) in got

    def close(self) -> None:
        signal.set_wakeup_fd(self._old)
        os.close(self._read)
        os.close(self._write)
