"""Run one function over many items in worker processes, on this machine or on a Dask cluster.

``map_items(function, items, jobs=N)`` starts N worker processes here (``spawn``: nothing of the
parent's threads or memory is inherited), hands each an item at a time and returns the results in
the items' order. ``scheduler="tcp://HOST:PORT"`` sends the same calls to an existing Dask
distributed cluster instead; its workers need rnnprof installed and the items' files at the same
paths. A worker holds one item's data at a time, so memory is bounded by the workers, not the items.

A task's ``RnnprofError`` (a bad file, say) comes back as the same one-line message and exit code;
the first failure stops the map. Ctrl-C stops the local workers (they ignore SIGINT themselves, so
only the parent reports it); nothing is left running.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import traceback
from typing import Callable, Sequence, TypeVar

from rnnprof.errors import MissingDependency, RnnprofError, UsageError, is_missing

T = TypeVar("T")
R = TypeVar("R")

DASK_EXTRAS = "pip install 'rnnprof[dask]'"
CONNECT_TIMEOUT_S = 10


class TaskError(RnnprofError):
    """A task's own ``RnnprofError``, carried back from a worker process with its exit code."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def default_jobs() -> int:
    """The cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def map_items(function: Callable[[T], R], items: Sequence[T], jobs: int | None = None,
              scheduler: str | None = None, on_done: Callable[[int, int], None] | None = None) -> list[R]:
    """``[function(item) for item in items]``, computed in worker processes; ``on_done(done, total)`` after each."""
    items = list(items)
    if scheduler:
        return _on_dask(function, items, scheduler, on_done)
    jobs = min(jobs or default_jobs(), len(items))
    if jobs <= 1:
        results = []
        for item in items:
            results.append(function(item))
            if on_done:
                on_done(len(results), len(items))
        return results
    return _local(function, items, jobs, on_done)


def _local(function, items, jobs, on_done) -> list:
    context = multiprocessing.get_context("spawn")
    with context.Pool(jobs, initializer=_ignore_interrupts) as pool:  # leaving the block terminates the workers
        return _on_pool(pool, function, items, on_done)


def _on_pool(pool, function, items, on_done) -> list:
    results: list = [None] * len(items)
    tasks = ((function, index, item) for index, item in enumerate(items))
    for done, (index, outcome) in enumerate(pool.imap_unordered(_call, tasks), start=1):
        results[index] = _unwrap(outcome)
        if on_done:
            on_done(done, len(items))
    return results


class Workers:
    """Worker processes kept for several maps, one after another (``with Workers(jobs, scheduler, most) as w:
    w.map(f, items)``): started once, at the first map of two items or more; ``most``: the most items a map will
    have, which bounds the processes started. With ``scheduler``, each map goes to the Dask cluster."""

    def __init__(self, jobs: int | None = None, scheduler: str | None = None, most: int = 1):
        self.jobs, self.scheduler = min(jobs or default_jobs(), max(most, 1)), scheduler
        self._pool = None

    def map(self, function: Callable[[T], R], items: Sequence[T],
            on_done: Callable[[int, int], None] | None = None) -> list[R]:
        items = list(items)
        if self.scheduler or self.jobs <= 1 or len(items) <= 1:
            return map_items(function, items, self.jobs if not self.scheduler else None, self.scheduler, on_done)
        if self._pool is None:
            self._pool = multiprocessing.get_context("spawn").Pool(self.jobs, initializer=_ignore_interrupts)
        return _on_pool(self._pool, function, items, on_done)

    def __enter__(self) -> "Workers":
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None


def _on_dask(function, items, address: str, on_done) -> list:
    try:
        from distributed import Client, as_completed
    except ImportError as exc:
        if is_missing(exc, "distributed") or is_missing(exc, "dask"):
            raise MissingDependency("dask.distributed", "--scheduler", DASK_EXTRAS) from None
        raise
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise UsageError(f"--scheduler {address}: cannot reach a Dask scheduler there ({exc or type(exc).__name__})"
                         ) from None
    results: list = [None] * len(items)
    with client:
        futures = [client.submit(_call, (function, index, item), pure=False) for index, item in enumerate(items)]
        try:
            for done, future in enumerate(as_completed(futures, loop=client.loop), start=1):
                try:
                    index, outcome = future.result()
                except Exception as exc:  # the cluster's failure, not a task's (those come back as values)
                    first = " ".join(str(exc).split())[:200] or type(exc).__name__
                    raise UsageError(f"--scheduler {address}: the cluster could not run rnnprof's tasks ({first}); "
                                     f"its scheduler and workers need rnnprof installed, and the files at the "
                                     f"same paths") from exc
                results[index] = _unwrap(outcome)
                if on_done:
                    on_done(done, len(items))
        finally:
            client.cancel([f for f in futures if not f.done()])
    return results


def _ignore_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _call(task) -> tuple[int, tuple]:
    """Run one task in a worker; errors travel back as plain values (exceptions may not unpickle)."""
    function, index, item = task
    try:
        return index, ("ok", function(item))
    except RnnprofError as exc:
        return index, ("error", str(exc), exc.exit_code)
    except Exception as exc:  # a bug: its traceback travels with it for --debug
        return index, ("bug", f"{type(exc).__name__}: {exc}", "".join(traceback.format_exc()))


def _unwrap(outcome: tuple):
    if outcome[0] == "ok":
        return outcome[1]
    if outcome[0] == "error":
        raise TaskError(outcome[1], outcome[2])
    raise RuntimeError(f"{outcome[1]} (in a worker process)") from _RemoteTraceback(outcome[2])


class _RemoteTraceback(Exception):
    """A worker's traceback, shown as the cause of the error it raised (with ``--debug``)."""

    def __str__(self) -> str:
        return "\n" + str(self.args[0])
