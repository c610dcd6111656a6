"""The watch over a whole job (``rnnprof watch``), a thread of rnnprof's own process while the job runs. Every
``POLL_S`` it reads what each rank added to its series, feeds the detector (``analyzers.watch.Detector``), logs each
anomaly (``anomalies.jsonl``) and asks every rank for a capture window on it (``rundir.windows``): from ``LEAD_S``
after the last step a rank finished (at least ``MIN_LEAD`` steps), at most one every ``capture_gap`` steps for
anomalies of one kind and ``max_captures`` in the job; anomalies raised before a window opens join it. It asks for
the baseline window before the job starts (every rank opens it at ``baseline_step``), and for a window whenever the
user asks (``ask()``: a signal; ``rundir.windows.ask_for_window``: another terminal). Once every rank has written a
window it hands it to ``analyse`` (the command's: audit, and the comparison with the baseline window), one at a time
while the job runs, and logs the verdict. It tells ``events`` (the live view) what happens and writes the new steps
as TensorBoard scalars. A rank whose series stopped is no longer waited for, and said; nothing here stops the job.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from rnnprof import rundir
from rnnprof.analyzers.watch import BASELINE, REQUESTED, Anomaly, Detector, JobView
from rnnprof.events.series import RankSeries
from rnnprof.recording import ranks
from rnnprof.recording.hang_probe import read_progress
from rnnprof.rundir import windows
from rnnprof.errors import InputError
from rnnprof.rundir.manifest import read_manifest_json
from rnnprof.rundir.series import SeriesTail
from rnnprof.rundir.windows import WindowRequest

POLL_S = 0.2
LEAD_S = 0.5  # a window opens this long after the last step seen (a poll, a rank's look at the request, a margin)
MIN_LEAD = 3
WINDOW_WAIT_S = 60.0  # how long a window's traces may take to appear once every rank has run its steps
ENDED = "ended"  # a rank that closed normally: its series is whole
STOPPED_S = 10.0  # a rank with no new step this long while the others step has stopped (time alone says so)


@dataclass(frozen=True)
class WatchOptions:
    """``--window-steps``, ``--capture-gap``, ``--max-captures`` and ``--baseline-step`` (None: no baseline)."""

    window_steps: int = 5
    capture_gap: int = 500
    max_captures: int = 5
    baseline_step: int | None = 30
    gpu: bool = False


class WatchEvents(Protocol):
    """What the watch says as it goes (the live view)."""

    def steps(self, view: JobView, first: int, last: int) -> None:
        """The job's steps ``first`` .. ``last`` are done by every rank; ``view``: the job now."""

    def anomaly(self, anomaly: Anomaly, window: str | None, why_not: str) -> None:
        """An anomaly raised; the window it joins, or why none."""

    def window(self, request: WindowRequest, reason: str) -> None:
        """A window asked of every rank."""

    def verdict(self, window: str, verdict: dict) -> None:
        """A window's verdict (``analyzers.watch.WindowVerdict.as_dict()``, with its ``text``)."""

    def machine(self, spike: Anomaly) -> None:
        """A step the machine took from the job (a rank waited for a core): said, no anomaly, no window."""

    def note(self, text: str) -> None:
        """Something the user should know (a rank stopped, a write failed, the watch failed)."""


class Analysis(Protocol):
    def poll(self) -> dict | None:
        """The verdict once the analysis has ended (a failed one's says why), else None."""

    def stop(self) -> None: ...

    def hurry(self) -> None:
        """The job has ended: nothing left to slow down."""


@dataclass
class _Window:
    request: WindowRequest
    reason: str  # BASELINE, REQUESTED or the kind of the anomaly that opened it
    anomalies: list[Anomaly] = field(default_factory=list)
    passed_at: float | None = None  # when every rank had run past it
    analysis: Analysis | None = None
    verdict: dict | None = None
    asks: list = field(default_factory=list)  # the asks from other terminals it answers
    signals: int = 0  # the asks by signal it answers

    @property
    def end_step(self) -> int:
        return self.request.first_step + self.request.steps - 1


class Watcher:
    """The watch over one job (see the module); ``with watcher:`` runs it in a thread, ``summary()`` after."""

    def __init__(self, run_dir: str | Path, options: WatchOptions, events: WatchEvents,
                 analyse: Callable[[Path, Path | None, list[Anomaly]], Analysis] | None = None, scalars=None):
        self.run_dir, self.options, self.events = Path(run_dir), options, events
        self.analyse, self.scalars = analyse, scalars
        self.detector = Detector(gpu=options.gpu)
        self.windows: list[_Window] = []
        self.notes: list[str] = []
        self._tail = SeriesTail(self.run_dir)
        self._asked = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rnnprof-watch", daemon=True)
        self._last_seen: dict[int, tuple[int, float]] = {}
        self._steps_told = -1
        self._failed = False
        self._ended = False  # the job has ended: analyses run at the default priority

    def __enter__(self) -> "Watcher":
        if self.options.baseline_step is not None:  # asked before the ranks start: each opens it at that very step
            self._open(BASELINE, [], first=self.options.baseline_step)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._guarded(self._finish)

    def ask(self) -> None:
        """A window now (a signal's handler may call it)."""
        self._asked.set()

    # -- the loop --------------------------------------------------------------------------------

    def _run(self) -> None:
        _lower_priority()
        while not self._stop.wait(POLL_S) and not self._failed:
            self._guarded(self.poll)

    def _guarded(self, work: Callable[[], None]) -> None:
        try:
            work()
        except Exception as exc:  # the job runs on unwatched: said, not dropped
            self._failed = True
            traceback.print_exc()
            self._note(f"the watch stopped ({type(exc).__name__}: {exc}); the job runs on unwatched")

    def poll(self) -> None:
        """One look at the job (see the module)."""
        progress = read_progress(self.run_dir)  # before the series: a rank counts a step once it wrote it
        self._read_series()
        self._find_stopped(progress)
        for anomaly in self.detector.advance():
            self._raised(anomaly)
        while self.detector.machine_spikes:
            spike = self.detector.machine_spikes.pop(0)
            windows.append_line(self.run_dir, {"machine": spike.as_dict()})
            self.events.machine(spike)
        self._tell_steps()
        self._asks()
        self._windows()

    def _read_series(self) -> None:
        """The steps the ranks wrote since the last read, to the detector (and the TensorBoard scalars)."""
        for series in self._tail.read().values():
            self.detector.feed(series)
            if self.scalars is not None:
                self._scalars(series)

    def _scalars(self, series: RankSeries) -> None:
        error = self.scalars.add(series)
        if error:
            self.scalars = None
            self._note(f"TensorBoard scalars stopped: {error}; the watch goes on")

    def _tell_steps(self) -> None:
        step = self.detector.job_step()
        if step > self._steps_told:
            self.events.steps(self.detector.view(), self._steps_told + 1, step)
            self._steps_told = step

    def _note(self, text: str) -> None:
        self.notes.append(text)
        windows.append_line(self.run_dir, {"note": text, "step": self.detector.job_step()})
        self.events.note(text)

    def _find_stopped(self, progress: dict[int, tuple[int, int]]) -> None:
        """Ranks whose series stopped: ended (their record says so), or behind their own progress, or silent;
        said unless they ended normally."""
        records = {r["rank"]: r for r in ranks.read_records(self.run_dir)}
        now = time.monotonic()
        for rank, store in self.detector.stores.items():
            if rank in self.detector.stopped:
                continue
            seen = self._last_seen.get(rank)
            if seen is None or seen[0] != store.last_step:
                self._last_seen[rank] = (store.last_step, now)
            why = _why_stopped(records.get(rank), progress.get(rank), store.last_step,
                               now - self._last_seen[rank][1], self.detector.job_step() < self._max_step())
            if why:
                self.detector.stop(rank, why)
                if why != ENDED:
                    self._note(f"rank {rank}: {why}")

    def _max_step(self) -> int:
        return max((s.last_step for s in self.detector.stores.values()), default=-1)

    def _latest_step(self) -> int:
        """The last step any rank has finished, by the ranks' hang probes where they count (read now: the series
        read at the start of the poll may be behind), else by their series."""
        counted = [steps - 1 for steps, _ in read_progress(self.run_dir).values()]
        return max([self._max_step(), *counted])

    # -- windows ---------------------------------------------------------------------------------

    def _raised(self, anomaly: Anomaly) -> None:
        window, why_not = self._window_for(anomaly)
        windows.append_line(self.run_dir, {"anomaly": anomaly.as_dict(), "window": window})
        self.events.anomaly(anomaly, window, why_not)

    def _window_for(self, anomaly: Anomaly) -> tuple[str | None, str]:
        """The window ``anomaly`` joins (one not open yet) or opens, or why none."""
        pending = [w for w in self.windows if w.request.first_step > self._max_step() and w.reason != BASELINE]
        if pending:
            pending[-1].anomalies.append(anomaly)
            return pending[-1].request.name, ""
        captured = [w for w in self.windows if w.reason not in (BASELINE, REQUESTED)]
        if len(captured) >= self.options.max_captures:
            return None, f"{len(captured)} windows captured already (--max-captures {self.options.max_captures})"
        same = [w for w in captured if anomaly.kind in {a.kind for a in w.anomalies}]
        if same and anomaly.step - same[-1].request.first_step < self.options.capture_gap:
            return None, (f"the last window on a {anomaly.kind.replace('_', ' ')} opened at step "
                          f"{same[-1].request.first_step} (--capture-gap {self.options.capture_gap})")
        window = self._open(anomaly.kind, [anomaly])
        return window.request.name, ""

    def _open(self, reason: str, anomalies: list[Anomaly], first: int | None = None) -> _Window:
        number = len(self.windows)
        first = self._latest_step() + self._lead() if first is None else first
        request = WindowRequest(number, rundir.window_name(number, first), first, self.options.window_steps)
        windows.write_request(self.run_dir, request)
        window = _Window(request, reason, list(anomalies))
        self.windows.append(window)
        self.events.window(request, reason)
        return window

    def _lead(self) -> int:
        step_s = [r.step_s for r in self.detector.view().ranks if math.isfinite(r.step_s) and r.step_s > 0]
        return max(MIN_LEAD, math.ceil(LEAD_S / max(step_s))) if step_s else MIN_LEAD

    def _asks(self) -> None:
        asks = windows.take_asks(self.run_dir)
        signalled = self._asked.is_set()
        if not asks and not signalled:
            return
        self._asked.clear()
        # a window whose steps every rank has already run cannot take it: the steps written since this look began
        # are read first (a look can take seconds on a loaded machine, and the ranks run on meanwhile)
        self._read_series()
        step = self.detector.job_step()
        open_ = [w for w in self.windows if w.verdict is None and w.analysis is None and w.passed_at is None
                 and w.end_step > step]
        window = open_[-1] if open_ else self._open(REQUESTED, [])
        window.asks += asks
        window.signals += signalled
        for ask in asks:
            windows.answer_ask(ask, f"window {window.request.name}: steps {window.request.first_step}-"
                                    f"{window.end_step} on every rank")

    def _windows(self, at_once: int = 1) -> None:
        """Windows every rank has run: analysed once written, ``at_once`` at a time (one while the job runs); their
        verdicts logged."""
        now, step = time.monotonic(), self.detector.job_step()
        for window in self.windows:
            if window.passed_at is None and step > window.end_step:
                window.passed_at = now
        running = [w for w in self.windows if w.analysis is not None and w.verdict is None]
        for window in running:
            try:
                verdict = window.analysis.poll()
            except Exception as exc:  # the analysis failed: the window says so, the watch goes on
                verdict = _failed(window, exc)
            if verdict is not None:
                self._verdict(window, verdict)
        free = at_once - sum(1 for w in running if w.verdict is None)
        for window in self.windows:
            if free <= 0:
                return
            if window.passed_at is not None and window.analysis is None and window.verdict is None and \
                    self._written(window, now):
                self._start_analysis(window)
                free -= 1

    def _written(self, window: _Window, now: float) -> bool:
        """The window's run directory is closed (its manifest says how it ended), or every live rank has recorded
        its part, or they have had ``WINDOW_WAIT_S`` to."""
        folder = self._folder(window)
        try:
            if read_manifest_json(folder).get("status") not in (None, rundir.STATUS_RUNNING):
                return True
        except InputError:
            pass
        done = {r["rank"] for r in ranks.read_records(folder) if r.get("status") != rundir.STATUS_RUNNING}
        return bool(done) and set(self.detector.live()) <= done or now - window.passed_at > WINDOW_WAIT_S

    def _start_analysis(self, window: _Window) -> None:
        folder = self._folder(window)
        baseline = self.windows[0] if self.windows and self.windows[0].reason == BASELINE else None
        base_dir = self._folder(baseline) if baseline and baseline is not window else None
        if self.analyse is None or not folder.is_dir():
            self._verdict(window, {"window": window.request.name, "text": "" if self.analyse is None else
                                   "not captured: the job ended before the window opened"})
            return
        records = ranks.read_records(folder)
        ended = records and all(r.get("status") != rundir.STATUS_RUNNING for r in records)
        if ended and not any(r.get("trace") for r in records):  # its ranks opened it, then the job ended
            self._verdict(window, {"window": window.request.name,
                                   "text": "not captured: the job ended before the window's steps were traced"})
            return
        try:
            window.analysis = self.analyse(folder, base_dir, window.anomalies)
            if self._ended:
                window.analysis.hurry()
        except Exception as exc:
            self._verdict(window, _failed(window, exc))

    def _folder(self, window: _Window) -> Path:
        """The window's run directory."""
        return windows.windows_dir(self.run_dir) / window.request.name

    def _verdict(self, window: _Window, verdict: dict) -> None:
        window.verdict = verdict
        windows.append_line(self.run_dir, {"verdict": verdict})
        windows.keep_verdict(self.run_dir, verdict)
        self.events.verdict(window.request.name, verdict)

    def _finish(self) -> None:
        """After the job: its last steps read and judged, its windows analysed (the job has ended: nothing to slow)."""
        self.poll()
        for window in self.windows:
            window.passed_at = -math.inf  # the job has ended: what its ranks wrote is all there will be
        self._ended = True
        for window in self.windows:
            if window.analysis is not None and window.verdict is None:
                try:
                    window.analysis.hurry()
                except Exception:  # it runs on at its priority, its deadline the same
                    pass
        deadline = time.monotonic() + WINDOW_WAIT_S
        while time.monotonic() < deadline and any(self._unfinished(w) for w in self.windows):
            self._windows(at_once=os.cpu_count() or 1)
            time.sleep(POLL_S)
        for window in self.windows:
            if window.analysis is not None and window.verdict is None:
                window.analysis.stop()
                folder = self._folder(window)
                self._verdict(window, {"window": window.request.name,
                                       "text": f"not analysed: its analysis had not ended {WINDOW_WAIT_S:g} s after "
                                               f"the job; rnnprof audit {folder} reads the window"})

    @staticmethod
    def _unfinished(window: _Window) -> bool:
        return window.verdict is None

    def summary(self) -> dict:
        """The manifest's ``watch`` object: the options, each window (its reason, steps and verdict's headline),
        the anomalies raised, the notes."""
        return {"options": {k: getattr(self.options, k) for k in ("window_steps", "capture_gap", "max_captures",
                                                                  "baseline_step")},
                "steps": self._max_step() + 1, "ranks": sorted(self.detector.stores),
                "windows": [{"name": w.request.name, "number": w.request.number, "first_step": w.request.first_step,
                             "steps": w.request.steps, "reason": w.reason, "asks": len(w.asks) + w.signals,
                             "anomalies": [a.as_dict() for a in w.anomalies],
                             "verdict": (w.verdict or {}).get("text")} for w in self.windows],
                "stopped": {str(r): why for r, why in self.detector.stopped.items()},
                "unmeasured": dict(self.detector.unmeasured), "notes": list(self.notes)}


WATCH_NICE = 10  # the watch's thread yields the cores to the job's ranks (and runs before a window's analysis, at 19)


def _lower_priority() -> None:
    """The calling thread at nice ``WATCH_NICE`` where Linux schedules threads on their own (else nothing: the same
    call would lower the whole process, a TensorFlow workload's training included)."""
    if sys.platform.startswith("linux"):
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WATCH_NICE)
        except OSError:
            pass


def _failed(window: _Window, exc: Exception) -> dict:
    return {"window": window.request.name,
            "text": f"the window's analysis failed ({type(exc).__name__}: {exc}); the job went on"}


def _why_stopped(record: dict | None, progress: tuple[int, int] | None, last_step: int, silent_s: float,
                 behind: bool) -> str:
    """Why a rank's series has stopped, or "" while it goes on."""
    if record is not None and record.get("status") not in (None, rundir.STATUS_RUNNING):
        if record.get("status") == rundir.STATUS_COMPLETE and not record.get("series_error"):
            return ENDED
        return record.get("series_error") or record.get("error") or f"ended ({record.get('status')}) after step {last_step}"
    if progress is not None and progress[0] > last_step + 1 + 2 * MIN_LEAD:
        return (f"its series stopped at step {last_step} while it ran on to step {progress[0] - 1} "
                f"(it cannot write it: see its error above); the watch goes on without it")
    if behind and silent_s > STOPPED_S:
        return f"no step written for {silent_s:.0f} s since step {last_step} while the others went on"
    return ""
