"""``rnnprof trace``'s hang watch over a captured job's ranks (docs/commands/hang.md).

The ranks count their finished steps (``hang_probe``). When none has finished a step for the hang threshold
(``--hang-after``, or by default ``max(DEFAULT_FLOOR_S, GAP_FACTOR x`` the longest wait between steps so far``)``,
``FIRST_STEP_S`` before the first step), the watch samples every live rank's flight recorder and stacks, waits
``confirm_s`` (the threshold, at most ``CONFIRM_MAX_S``) and samples again. A step finished, a collective
finished or a main thread's stack changed in between: slow, not hung (said, and the clock starts again). Nothing moved:
hung; the second sample and the verdict go to ``RUN/hang/`` and the run is marked ``hung``.

A TensorFlow script is one process (its probe in ``TASKS``, no flight recorder): judged on its stacks alone
(``analyze_process_hang``)."""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rnnprof import rundir
from rnnprof.errors import JobHung
from rnnprof.analyzers.hang import (HangVerdict, analyze_hang, analyze_process_hang, own_frame, slow_verdict,
                                    still_moving)
from rnnprof.recording import hang_collect
from rnnprof.recording.hang_probe import RANKS, TASKS, read_progress
from rnnprof.recording.ranks import read_records

DEFAULT_FLOOR_S = 300.0  # the default threshold is never shorter than this
GAP_FACTOR = 10  # ... nor than this many times the longest wait between two steps seen so far
FIRST_STEP_S = 900.0  # before the first step (imports, data loading, compilation)
CONFIRM_MAX_S = 10.0
# A hung job is stopped within threshold + confirm + STOP_BOUND_S of its last finished step: two samples
# (hang_collect.ANSWER_WAIT_S and a little each), then SIGTERM and SIGKILL (script.HANG_STOP_GRACE_S) and the
# manifest rebuilt.
STOP_BOUND_S = 12.0
POLL_S = 0.25
HUNG_EXIT = JobHung.exit_code  # rnnprof trace's exit status when the job hung and was stopped


@dataclass(frozen=True)
class HangOptions:
    """``--hang-after`` (seconds; None: the default threshold), ``--on-hang stop`` (``stop``) and where the watch
    says what it sees (slow, not hung; hung with ``--on-hang wait``)."""

    after: float | None = None
    stop: bool = True
    on_note: Callable[[str], None] = lambda text: None


def threshold_s(hang_after: float | None, stepped: bool, longest_gap_s: float) -> float:
    """How long no step may finish before the job is looked at: ``--hang-after``, or the default."""
    if hang_after is not None:
        return hang_after
    if not stepped:
        return FIRST_STEP_S
    return max(DEFAULT_FLOOR_S, GAP_FACTOR * longest_gap_s)


class HangWatch:
    """Call ``poll()`` every ``POLL_S`` while the job runs; it returns the verdict once the job has hung."""

    def __init__(self, run_dir: str | Path, hang_after: float | None = None,
                 on_note: Callable[[str], None] = lambda text: None, world_size: int | None = None):
        self.run_dir = Path(run_dir)
        self.world_size = world_size  # None: the ranks' records say
        self.hang_after = hang_after
        self.on_note = on_note
        self._counts: dict[int, int] = {}
        self._last = time.monotonic()
        self._longest_gap = 0.0
        self._stepped = False
        self.folder = RANKS  # where the probes are: TASKS once a TensorFlow script's process opened its own
        self.record: dict | None = None  # the manifest's ``hang`` object, once hung

    def threshold(self) -> float:
        return threshold_s(self.hang_after, self._stepped, self._longest_gap)

    def _moved(self) -> bool:
        """Whether a rank finished a step since the last look (and the longest gap so far)."""
        found, self.folder = read_progress(self.run_dir), RANKS
        if not found and read_progress(self.run_dir, TASKS):  # a TensorFlow script's process (torch's ranks win:
            found, self.folder = read_progress(self.run_dir, TASKS), TASKS  # a script may switch to torch)
        counts = {rank: steps for rank, (steps, _) in found.items()}
        world = self.world_size or max([r.get("world_size") or 1 for r in read_records(self.run_dir)] or [1])
        if len(counts) < world and not self._stepped:
            self._last = time.monotonic()  # the clock starts once every rank has opened its capture
        moved = any(n > self._counts.get(rank, 0) for rank, n in counts.items())
        self._counts.update(counts)
        if moved:
            now = time.monotonic()
            if self._stepped:
                self._longest_gap = max(self._longest_gap, now - self._last)
            self._stepped, self._last = True, now
        return moved

    def poll(self) -> HangVerdict | None:
        if self._moved():
            return None
        quiet = time.monotonic() - self._last
        if quiet < self.threshold():
            return None
        live = hang_collect.live_ranks(self.run_dir, self.folder)
        if not live:
            return None
        verdict = self._judge(live, quiet)
        if verdict is None:
            self._last = time.monotonic()
        return verdict

    def _judge(self, live: dict[int, int], quiet: float) -> HangVerdict | None:
        scratch = self.run_dir / rundir.HANG_DIR / ".sample"
        first = hang_collect.sample(self.run_dir, live, scratch / "1", self.folder)
        deadline = time.monotonic() + min(self.threshold(), CONFIRM_MAX_S)
        stepped = False
        while time.monotonic() < deadline and not stepped:
            time.sleep(POLL_S)
            stepped = self._moved()
        second = hang_collect.sample(self.run_dir, live, scratch / "2", self.folder) if not stepped else None
        if second is not None and (hang_collect.live_ranks(self.run_dir, self.folder) != live
                                   or not _answered(second)):
            hang_collect.clear(self.run_dir / rundir.HANG_DIR)
            return None  # ranks are ending (or none could answer): not a hang to judge
        why = "a step finished meanwhile" if stepped else _what_moved(first, second)
        if why:
            hang_collect.clear(self.run_dir / rundir.HANG_DIR)
            self.on_note(slow_verdict(quiet, why).summary)
            return None
        verdict = self._verdict(second)
        files = hang_collect.save(self.run_dir, second, verdict.summary)
        hang_collect.clear(scratch)
        scope = rundir.HANG_SCOPE_PROCESS if self.folder == TASKS else None
        self.record = hang_collect.record_hang(self.run_dir, verdict, files, self.threshold(), second.notes, scope)
        return verdict

    def _verdict(self, second) -> HangVerdict:
        if self.folder == TASKS:  # a TensorFlow script: one process, judged on its stacks
            return analyze_process_hang(second.stacks.get(0))
        world = self.world_size or max([r.get("world_size") or 1 for r in read_records(self.run_dir)] or [1])
        return analyze_hang(second.recorders, second.stacks, world)


def _what_moved(first, second) -> str:
    """What went on between two samples: collectives that finished, or a main thread whose stack changed (at
    any depth); empty when nothing did."""
    moved = still_moving(first.recorders, second.recorders)
    if moved:
        return f"collectives still finish ({', '.join(moved[:4])})"
    for rank in sorted(set(first.stacks) & set(second.stacks)):
        a, b = first.stacks[rank].main_thread, second.stacks[rank].main_thread
        if a and b and a.frames != b.frames:  # any frame, the library's too: a thread that runs is not hung
            was, now = own_frame(a.frames), own_frame(b.frames)
            return f"rank {rank}'s main thread runs ({was.where if was else '?'} -> {now.where if now else '?'})"
    return ""


def _answered(got) -> bool:
    return bool(got.recorders or got.stacks)


class HangWatchThread:
    """``HangWatch`` polled from a thread, for a job whose launch blocks this process's main thread (the built-in
    workload's ranks): a hung job's live ranks are killed (``hang.stop``), which ends the launch with a failure
    the caller turns into ``JobHung`` (``verdict`` is set); with ``--on-hang wait`` the verdict is only said."""

    def __init__(self, run_dir: str | Path, hang: HangOptions, world_size: int):
        self.hang = hang
        self.watch = HangWatch(run_dir, hang.after, hang.on_note, world_size)
        self.verdict: HangVerdict | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rnnprof-hang-watch", daemon=True)

    def __enter__(self) -> "HangWatchThread":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            verdict = self.watch.poll()
            if verdict is None:
                continue
            self.verdict = verdict
            if not self.hang.stop:
                self.hang.on_note(f"hung: {verdict.summary}; --on-hang wait: the job keeps running")
                return
            for pid in hang_collect.live_ranks(self.watch.run_dir).values():
                try:
                    os.kill(pid, signal.SIGKILL)  # blocked in a collective, a rank cannot act on SIGTERM
                except OSError:
                    pass
            return
