"""Step progress from the ranks of a PyTorch run to the process that launched them.

Each rank appends one line per finished step to its own file in a folder of the launch
(``StepLog``: one ``write`` after the step's timing, no reply awaited); the launching process
polls the files from a thread (``StepFollower``) and, once every rank has finished step i,
hands ``on_step`` that step combined as the run's step is (the slowest rank's time, all ranks'
words, their mean loss), in order, one call per step. The folder belongs to the launch's
temporary directory, so the files go with it whether the run ends, fails or is interrupted.
"""

from __future__ import annotations

import math
import os
import statistics
import threading
from typing import Callable, Sequence

from rnnprof.training.measure import StepCallback, StepResult

POLL_SECONDS = 0.1


def step_log_path(folder: str, rank: int) -> str:
    return os.path.join(folder, f"rank{rank}.steps")


class StepLog:
    """A rank's side: ``measure``'s ``on_step`` callback appending ``phase index seconds words loss`` lines."""

    def __init__(self, folder: str, rank: int):
        self._fd = os.open(step_log_path(folder, rank), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def __call__(self, phase: str, index: int, step) -> None:
        os.write(self._fd, f"{phase} {index} {step.seconds!r} {step.words} {step.loss!r}\n".encode())

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _parse(line: str) -> tuple[str, int, StepResult]:
    phase, index, seconds, words, loss = line.split()
    return phase, int(index), StepResult(seconds=float(seconds), words=int(words), loss=float(loss))


class StepFollower:
    """The launching process's side: a context manager that polls the ranks' step logs in ``folder`` every
    ``interval`` seconds from a thread and calls ``on_step(phase, index, step)`` once per step of the run,
    when all ``ranks`` have finished it. Leaving the context stops the thread, after a last read when the
    run ended without an exception."""

    def __init__(self, folder: str, ranks: int, on_step: StepCallback, interval: float = POLL_SECONDS,
                 ranks_per_batch: int = 1):
        self.folder, self.ranks, self.on_step, self.interval = folder, ranks, on_step, interval
        self.ranks_per_batch = ranks_per_batch
        self._offsets = [0] * ranks
        self._partial = [b""] * ranks
        self._steps: list[list[tuple[str, int, StepResult]]] = [[] for _ in range(ranks)]
        self.reported = 0  # steps handed to on_step
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def _read(self, rank: int) -> None:
        try:
            with open(step_log_path(self.folder, rank), "rb") as file:
                file.seek(self._offsets[rank])
                data = file.read()
        except FileNotFoundError:  # the rank has not finished a step yet
            return
        self._offsets[rank] += len(data)
        *lines, self._partial[rank] = (self._partial[rank] + data).split(b"\n")
        self._steps[rank].extend(_parse(line.decode()) for line in lines if line)

    def poll(self) -> int:
        """Read what the ranks wrote since the last poll; report the steps every rank has finished. Returns
        how many steps have been reported in all."""
        with self._lock:
            for rank in range(self.ranks):
                self._read(rank)
            ready = min(len(steps) for steps in self._steps)
            while self.reported < ready:
                records = [steps[self.reported] for steps in self._steps]
                phase, index, _ = records[0]
                step = combine_step([r[2] for r in records], self.ranks_per_batch)
                self.reported += 1
                self.on_step(phase, index, step)
            return self.reported

    def _follow(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                self.poll()
        except BaseException as exc:  # shown by __exit__, in the launching thread
            self._error = exc

    def __enter__(self) -> "StepFollower":
        self._thread = threading.Thread(target=self._follow, name="rnnprof-step-follower", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._stop.set()
        self._thread.join()
        if exc_type is None:
            if self._error is not None:
                raise self._error
            self.poll()  # the steps finished since the last poll


def follow_steps(folder: str, ranks: int, on_step: Callable | None, ranks_per_batch: int = 1):
    """A ``StepFollower`` when there is an ``on_step`` to call, else a context that does nothing."""
    import contextlib

    if on_step is None:
        return contextlib.nullcontext()
    return StepFollower(folder, ranks, on_step, ranks_per_batch=ranks_per_batch)


def combine_step(steps: Sequence[StepResult], ranks_per_batch: int = 1) -> StepResult:
    """One step of the run from its ranks' records: the slowest rank's time (a synchronized step ends with its last
    rank), the words of the step's batches (every rank counts its batch's; ``ranks_per_batch`` ranks share one under
    tensor or pipeline parallelism), the mean loss of the ranks that have one (a pipeline's is its last stage's, NaN
    on the others)."""
    losses = [s.loss for s in steps if not math.isnan(s.loss)]
    return StepResult(seconds=max(s.seconds for s in steps), words=sum(s.words for s in steps) // ranks_per_batch,
                      loss=statistics.fmean(losses) if losses else math.nan)
