"""A progress bar for warm-up and timed batches, on stderr so stdout stays clean (--json)."""

from __future__ import annotations

import contextlib
import os
import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text


class StepProgress:
    """Context manager; ``run(label, warmup, batches)`` returns a ``measure`` callback, and ``on_run(index, total,
    label, point)`` hears each configuration of a sweep start (``point`` None) and end.

    On a terminal, bars: the configurations done, and the current one's warm-up and timed steps. Elsewhere
    (a pipe, a file, CI) a line per configuration as it starts and as it ends, with its throughput and time,
    prefixed with ``name``; stderr either way, so a ``--json`` document on stdout stays clean.
    """

    def __init__(self, console: Console | None = None, name: str = "rnnprof", unit: str = "words"):
        self.console = console or Console(stderr=True)
        self.name = name
        self.unit = unit
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
            disable=not self.console.is_terminal,
        )
        self.steps_seen = 0
        self._runs = None  # the bar of the configurations, once the first starts
        self._started = 0.0

    def on_run(self, index: int, total: int, label: str, point) -> None:
        """Configuration ``index`` of ``total`` starts (``point`` None: its graph or processes are being built)
        or ends (``point``: its ``ScalePoint``)."""
        place = f"[{index + 1}/{total}] {label}"
        if point is None:
            self._started = time.monotonic()
        if self.console.is_terminal:
            if self._runs is None:
                self._runs = self._progress.add_task("configurations", total=total)
            self._progress.update(self._runs, completed=index + (point is not None),
                                  description=f"configurations (now {label})" if point is None else "configurations")
            return
        if point is None:
            self.console.print(Text(f"{self.name}: {place}: started"), highlight=False, soft_wrap=True)
        else:
            rate = point.timed.words_per_second
            self.console.print(Text(f"{self.name}: {place}: done in {time.monotonic() - self._started:.0f} s, "
                                    f"{rate:,.0f} {self.unit}/s over {point.timed.steps} timed steps"),
                               highlight=False, soft_wrap=True)

    def __enter__(self) -> "StepProgress":
        self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self._progress.stop()

    def run(self, label: str, warmup: int, batches: int):
        tasks = {
            "warmup": self._progress.add_task(f"{label} warm-up", total=warmup, visible=warmup > 0),
            "timed": self._progress.add_task(f"{label} timed", total=batches),
        }

        def on_step(phase: str, index: int, step) -> None:
            self.steps_seen += 1
            self._progress.update(tasks[phase], completed=index + 1,
                                  description=f"{label} {'warm-up' if phase == 'warmup' else 'timed'}"
                                              f" (loss {step.loss:.3f})")

        return on_step


@contextlib.contextmanager
def own_stderr_console():
    """A console on a duplicate of file descriptor 2, taken now: it stays this process's stderr while a launch
    of worker processes points descriptor 2 at a file (``torch_ddp``'s workers inherit it), so a bar drawn
    meanwhile reaches the user. Where ``sys.stderr`` is not descriptor 2 (captured), a console on it."""
    try:
        fd = os.dup(2) if sys.stderr.fileno() == 2 else None
    except (AttributeError, OSError, ValueError):
        fd = None
    if fd is None:
        yield Console(stderr=True)
        return
    with os.fdopen(fd, "w", encoding=getattr(sys.stderr, "encoding", None) or "utf-8", errors="replace") as stream:
        yield Console(file=stream)


class RankProgress:
    """Context manager counting analysed ranks; ``on_done(done, total)`` is the callback to hand the map.

    Draws nothing when stderr is not a terminal (CI, pipes, tests).
    """

    def __init__(self, total: int, label: str = "ranks analysed", console: Console | None = None):
        self.console = console or Console(stderr=True)
        self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), console=self.console, transient=True,
                                  disable=not self.console.is_terminal)
        self._task = self._progress.add_task(label, total=total)
        self.done = 0

    def __enter__(self) -> "RankProgress":
        self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self._progress.stop()

    def on_done(self, done: int, total: int) -> None:
        self.done = done
        self._progress.update(self._task, completed=done, total=total)
