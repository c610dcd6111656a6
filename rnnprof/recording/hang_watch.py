"""``rnnprof trace``'s hang watch (docs/commands/hang.md): one watch for every job it can see, which reaches the
job through a ``HangTransport`` (how the ranks or tasks are asked for their steps and their stacks):

* ``hang_collect.ProbedRanks``: the ranks of a script's job (torch's, or one TensorFlow process) and of the
  built-in PyTorch workload, each running a probe (``hang_probe``) that counts its steps and answers with its
  stacks and flight recorder;
* ``cluster_hang.ChiefTransport``: a TensorFlow job this process drives, whose steps the chief counts: the tasks
  of a cluster it started, its own devices, or the chief alone for tasks started elsewhere.

The clock: when no step has finished for the hang threshold (``--hang-after``, or by default
``max(DEFAULT_FLOOR_S, GAP_FACTOR x`` the longest wait between steps so far``)``, ``FIRST_STEP_S`` before the first
step; it starts once every rank is up), the watch samples every live rank, waits ``confirm_s`` (the threshold, at
most ``CONFIRM_MAX_S``) and samples again. A step finished, a collective finished or a main thread's stack changed
in between: slow, not hung (said, and the clock starts again). Nothing moved: hung; the second sample and the
verdict go to ``RUN/hang/`` and the run is marked ``hung``."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from rnnprof import rundir
from rnnprof.errors import JobHung
from rnnprof.analyzers.hang import HangVerdict, own_frame, slow_verdict, still_moving
from rnnprof.recording import hang_collect
from rnnprof.recording.hang_collect import Sample
from rnnprof.recording.interrupt import SignalWakeup

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
INTERRUPT_GRACE_S = 4.0  # --on-hang wait: how long a stuck main thread has to act on Ctrl-C or SIGTERM itself


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


class HangTransport(Protocol):
    """How a ``HangWatch`` reaches a job: each rank (or task) by its number."""

    def progress(self) -> tuple[dict[int, int], bool]:
        """The steps finished so far, by the number of whoever counts them, and whether every rank is up (the
        clock starts then)."""

    def live(self) -> dict[int, int]:
        """number -> pid of each rank that can be asked now."""

    def sample(self, live: dict[int, int], scratch: Path) -> Sample:
        """What the ``live`` ranks answer now (their files written under ``scratch`` meanwhile)."""

    def who(self, number: int) -> str:
        """What the watch calls a rank in what it says: "rank 1", "task 1", "the chief"."""

    def judge(self, got: Sample) -> HangVerdict:
        """The verdict on a hung job's last sample."""

    def stacks_file(self, number: int) -> str:
        """The name a rank's stacks are saved under in ``RUN/hang/``."""

    def keep(self, hang: dict) -> dict:
        """The manifest's ``hang`` object completed with what only the transport knows (its scope, its tasks);
        the run marked ``hung`` where the job's ranks keep its manifest."""


class HangWatch:
    """The hang watch over one job (see the module), reaching it through ``transport``.

    Either call ``poll()`` every ``POLL_S`` while the job runs (it returns the verdict once the job has hung), or
    watch from a thread (``with watch:``) while this process's main thread drives the job: once the job hung,
    ``on_hung(verdict)`` runs with ``--on-hang stop`` (it stops the job). With ``--on-hang wait`` the verdict is
    said and the job left running; given ``on_interrupt``, a Ctrl-C or SIGTERM that the main thread does not act
    on within ``INTERRUPT_GRACE_S`` (it is stuck outside Python, inside TensorFlow) runs ``on_interrupt``."""

    def __init__(self, run_dir: str | Path, transport: HangTransport, hang: HangOptions = HangOptions(),
                 on_hung: Callable[[HangVerdict], None] = lambda verdict: None,
                 on_interrupt: Callable[[], None] | None = None):
        self.run_dir, self.transport, self.hang = Path(run_dir), transport, hang
        self.on_hung, self.on_interrupt = on_hung, on_interrupt
        self.verdict: HangVerdict | None = None
        self.record: dict | None = None  # the manifest's ``hang`` object, once hung
        self._counts: dict[int, int] = {}
        self._last = time.monotonic()
        self._longest_gap = 0.0
        self._stepped = False
        self._stop = threading.Event()  # set as the watching thread ends
        self._thread = threading.Thread(target=self._run, name="rnnprof-hang-watch", daemon=True)
        self._wakeup: SignalWakeup | None = None

    def threshold(self) -> float:
        return threshold_s(self.hang.after, self._stepped, self._longest_gap)

    def _moved(self) -> bool:
        """Whether a step finished since the last look (and the longest gap so far)."""
        counts, ready = self.transport.progress()
        if not ready and not self._stepped:
            self._last = time.monotonic()  # the clock starts once every rank is up
        moved = any(n > self._counts.get(number, 0) for number, n in counts.items())
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
        live = self.transport.live()
        if not live:
            return None
        verdict = self._judge(live, quiet)
        if verdict is None:
            self._last = time.monotonic()
            return None
        self.verdict = verdict
        if not self.hang.stop:
            self.hang.on_note(f"hung: {verdict.summary}; --on-hang wait: the job keeps running")
        return verdict

    def _judge(self, live: dict[int, int], quiet: float) -> HangVerdict | None:
        folder = self.run_dir / rundir.HANG_DIR
        scratch = folder / ".sample"
        first = self.transport.sample(live, scratch / "1")
        deadline = time.monotonic() + min(self.threshold(), CONFIRM_MAX_S)
        stepped = False
        while time.monotonic() < deadline and not stepped:
            if self._stop.wait(POLL_S):  # the job ended meanwhile
                hang_collect.clear(folder)
                return None
            stepped = self._moved()
        second = self.transport.sample(live, scratch / "2") if not stepped else None
        if second is not None and (self.transport.live() != live or not (second.recorders or second.stacks)):
            hang_collect.clear(folder)
            return None  # ranks are ending (or none could answer): not a hang to judge
        why = "a step finished meanwhile" if stepped else self._what_moved(first, second)
        if why:
            hang_collect.clear(folder)
            self.hang.on_note(slow_verdict(quiet, why).summary)
            return None
        verdict = self.transport.judge(second)
        files = hang_collect.save(self.run_dir, second, verdict.summary, self.transport.stacks_file)
        hang_collect.clear(scratch)
        self.record = self.transport.keep(hang_collect.hang_record(verdict, files, self.threshold(), second.notes))
        return verdict

    def _what_moved(self, first: Sample, second: Sample) -> str:
        """What went on between two samples: collectives that finished, or a main thread whose stack changed (at
        any depth); empty when nothing did."""
        moved = still_moving(first.recorders, second.recorders)
        if moved:
            return f"collectives still finish ({', '.join(moved[:4])})"
        for number in sorted(set(first.stacks) & set(second.stacks)):
            a, b = first.stacks[number].main_thread, second.stacks[number].main_thread
            if a and b and a.frames != b.frames:  # any frame, the library's too: a thread that runs is not hung
                was, now = own_frame(a.frames), own_frame(b.frames)
                return (f"{self.transport.who(number)}'s main thread runs ({was.where if was else '?'} -> "
                        f"{now.where if now else '?'})")
        return ""

    def __enter__(self) -> "HangWatch":
        if self.on_interrupt is not None and not self.hang.stop:
            self._wakeup = SignalWakeup.install()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        if self._wakeup is not None:
            self._wakeup.close()

    def _run(self) -> None:
        try:
            while not self._stop.wait(POLL_S):
                verdict = self.poll()
                if verdict is None:
                    continue
                if self.hang.stop:
                    self.on_hung(verdict)
                else:
                    self._await_interrupt()
                return
        except Exception as exc:  # the job runs on unwatched: said, not dropped
            self.hang.on_note(f"the hang watch stopped ({type(exc).__name__}: {exc}); the job is not watched")

    def _await_interrupt(self) -> None:
        """A hung job left running: a Ctrl-C or SIGTERM reaches the main thread only once it runs Python again,
        which one stuck inside TensorFlow never does. ``INTERRUPT_GRACE_S`` after one, unless the watch has
        ended meanwhile, ``on_interrupt`` ends the process."""
        while self._wakeup is not None and not self._stop.is_set():
            if self._wakeup.interrupted(POLL_S):
                if not self._stop.wait(INTERRUPT_GRACE_S):
                    self.on_interrupt()
                return
