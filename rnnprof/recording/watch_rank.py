"""One rank of a watched PyTorch job (``rnnprof watch``): every step measured without the profiler and appended to
the rank's series, and a capture window opened when the watch asks for one.

A step is one ``optimizer.step()`` of any optimizer or, once the script calls ``rnnprof.step()``, the stretch from
one call to the next (as under ``rnnprof trace``). At each step's end the rank writes one row of its series
(``rundir.series``; what it measures: ``torch_telemetry``), counts the step for the hang watch (``RankProbe``) and
looks at the window asked for (``rundir.windows``: a thread reads the request every ``REQUEST_POLL_S``): from the
step before the window's first, ``TorchCapture`` profiles it into ``windows/<k>-step<S>/`` (that step is the
profiler's warm-up), and once the window's steps have run its trace is written beside the training and the rank's
record saved in the window's folder (its manifest combined from the ranks' records, as a captured script's).
Steps under the profiler and the step the trace was exported in are flagged in the series.

Nothing here raises into the training loop: a series that cannot be written stops (said once on stderr and in the
rank's record), a window that fails is recorded as such, and the job goes on.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from pathlib import Path

from rnnprof import rundir
from rnnprof.events.series import DATA_BEFORE_FORWARD, DATA_LOADER, EXPORTED, PROFILED, WARMUP
from rnnprof.recording import ranks
from rnnprof.recording.active import ClosedAsItEnded, StepContext, clear_active_capture, set_active_capture
from rnnprof.recording.hang_probe import RankProbe
from rnnprof.recording.torch_profiler import TorchCapture
from rnnprof.recording.torch_telemetry import NAN, DdpWaits, LoaderTime, MemoryGauge, RunQueue, StepMarks
from rnnprof.rundir.manifest import process_versions
from rnnprof.rundir.series import SeriesWriter, series_header, series_path
from rnnprof.rundir.windows import REQUEST_POLL_S, WindowRequest, read_request, request_path, windows_dir


class TorchRankWatch(ClosedAsItEnded):
    """One rank's watch (see the module); ``start``/``close``, or ``with``."""

    def __init__(self, run_dir: str | Path, command=None, probe: bool = True, records: bool = True,
                 warmup: int = 0, rank: int | None = None):
        self.run_dir = Path(run_dir)
        self.warmup = warmup  # the first steps are a built-in workload's warm-up: flagged, never a baseline
        self._records = records  # False: the launching process keeps the run's manifest (a built-in workload)
        self.rank = ranks.env_int("RANK", 0) if rank is None else rank
        self.world_size = ranks.env_int("WORLD_SIZE", 1)
        self.steps = 0  # steps finished
        self.notes: list[str] = []
        self._command = command
        self._probe = RankProbe(self.run_dir, self.rank) if probe else None
        self._waits = DdpWaits()
        self._marks = StepMarks(on_root=self._waits.offer)
        self._memory: MemoryGauge | None = None
        self._queue: RunQueue | None = None
        self._loader: LoaderTime | None = None
        self._from_loader: bool | None = None  # the data wait is the DataLoader's time: decided in the first step
        self._series: SeriesWriter | None = None
        self._handles: list = []
        self._marked = self._open = self._closed = False
        self._began = (time.perf_counter(), time.process_time(), NAN)
        self._window: TorchCapture | None = None
        self._window_request: WindowRequest | None = None
        self._asked: WindowRequest | None = None  # set by the request thread
        self._done_number = -1  # the last window number captured (or refused)
        self._writing: list[tuple[TorchCapture, WindowRequest, threading.Thread]] = []
        self._stop = threading.Event()
        self._flag_next = 0
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> "TorchRankWatch":
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        if self._probe is not None:
            self._probe.install()
        self._memory = MemoryGauge()
        self._queue = RunQueue()
        self._loader = LoaderTime()
        self._marks.discover()
        self._handles = [register_optimizer_step_pre_hook(self._before_optimizer),
                         register_optimizer_step_post_hook(self._after_optimizer)]
        set_active_capture(self)
        threading.Thread(target=self._watch_requests, name="rnnprof-watch-requests", daemon=True).start()
        self._record(rundir.STATUS_RUNNING)
        self._began = self._clocks()
        return self

    def _clocks(self) -> tuple[float, float, float]:
        """Now: the wall clock, the process's CPU time, the training thread's wait for a core so far."""
        return time.perf_counter(), time.process_time(), self._queue.read() if self._queue else NAN

    def close(self, status: str = rundir.STATUS_COMPLETE, exit_code: int = 0, error: str | None = None,
              stopped: bool = False) -> dict:
        """End the watch (a window cut short is written as it is) and record how this rank ended."""
        if self._closed:
            return {}
        self._closed = True
        self._stop.set()
        for handle in self._handles:
            handle.remove()
        self._marks.close()
        clear_active_capture(self)
        if self._window is not None:
            self._end_window()
        for _, _, thread in self._writing:
            thread.join()
        if self._probe is not None:
            self._probe.close()
        for part in (self._series, self._memory, self._queue, self._loader):
            if part is not None:
                part.close()
        return self._record(status, exit_code=exit_code, error=error, stopped=stopped, ended=time.time())

    # -- steps -----------------------------------------------------------------------------------

    def step(self, n: int | None = None) -> StepContext:
        """``rnnprof.step()``: a step begins here (ending the one before); ``with`` ends it at the block's end."""
        if not self._marked:
            self._marked = True
            self._began = self._clocks()  # optimizer steps no longer end steps
            self._marks.reset()
        elif self._open:
            self._step_done()
        self._open = True
        return StepContext(self)

    def end_step(self) -> None:
        if self._open:
            self._open = False
            self._step_done()

    def _before_optimizer(self, optimizer, args, kwargs) -> None:
        if self._marks.optimizer is None:
            self._marks.optimizer = time.perf_counter()

    def _after_optimizer(self, optimizer, args, kwargs) -> None:
        self._marks.optimizer_end = time.perf_counter()
        if not self._marked:
            self._step_done()

    def _step_done(self) -> None:
        """One step ended: its row, its tick, the window's step; never raises into the training."""
        if self._closed:
            return
        try:
            end = self._clocks()
            row = self._row(end)
            self._began = end
            self._marks.reset()
            if self.steps == 0:
                self._marks.settle()
                self._open_series()
            if self._series is not None and not self._series.append(row):
                self._series_stopped()
            self.steps += 1
            if self._probe is not None:
                self._probe.tick()
            self._window_step()
        except Exception as exc:  # the job runs on unwatched rather than fail
            self._give_up(exc)

    def _row(self, end: tuple[float, float, float]) -> list:
        """The step's row, in ``events.series.COLUMNS`` order."""
        marks, start = self._marks, self._began[0]
        stop = marks.optimizer_end if marks.optimizer_end is not None else end[0]
        points = [start, marks.forward, marks.backward, marks.optimizer, stop]
        parts = [(b - a) if a is not None and b is not None and b >= a else NAN for a, b in zip(points, points[1:])]
        loader = self._loader.take() if self._loader is not None else NAN
        if self._from_loader is None:
            self._from_loader = self._loader is not None and self._loader.seen
        if self._from_loader:  # what follows the optimizer (a wait for the device, logging) is not the data's
            parts[0] = loader
        memory, peak = self._memory.read()
        flags = self._flag_next | (PROFILED if self._window is not None else 0) | (WARMUP if self.steps < self.warmup
                                                                                 else 0)
        self._flag_next = EXPORTED if self._writing and any(w[0].writing for w in self._writing) else 0
        return [self.steps, time.time(), end[0] - start, *parts, self._waits.take(), end[1] - self._began[1],
                end[2] - self._began[2], memory, peak, flags]

    def _open_series(self) -> None:
        unmeasured = {"comm_wait_s": self._waits.unmeasured} if self._waits.unmeasured else {}
        if not self._marks.roots:
            unmeasured.update(forward_s="no forward ran", backward_s="no forward ran")
            if not self._from_loader:
                unmeasured.update(data_s="no module's forward ran in the first step")
        header = series_header(self.rank, self._memory.source, unmeasured,
                               DATA_LOADER if self._from_loader else DATA_BEFORE_FORWARD)
        self._series = SeriesWriter(series_path(self.run_dir, self.rank), header)
        if self._series.error:
            self._series_stopped()

    def _series_stopped(self) -> None:
        note = f"rank {self.rank}: its series stopped at step {self.steps}: {self._series.error}; the job runs on"
        self._say(note)

    def _say(self, note: str) -> None:
        self.notes.append(note)
        print(f"rnnprof watch: {note}", file=sys.stderr, flush=True)

    def _give_up(self, exc: Exception) -> None:
        self._say(f"rank {self.rank}: the watch stopped at step {self.steps} "
                  f"({type(exc).__name__}: {exc}); the job runs on unwatched")
        traceback.print_exc()
        self._closed = True
        for handle in self._handles:
            handle.remove()
        self._marks.close()

    # -- capture windows -------------------------------------------------------------------------

    def _watch_requests(self) -> None:
        """The request thread: the window asked for, read when the request file changes."""
        path, seen = request_path(self.run_dir), None
        while not self._stop.wait(REQUEST_POLL_S):
            try:
                stamp = os.stat(path).st_mtime_ns
            except OSError:
                continue
            if stamp != seen:
                seen = stamp
                request = read_request(path)
                if request is not None and request.number > self._done_number:
                    self._asked = request

    def _window_step(self) -> None:
        """After step ``self.steps - 1``: the open window's step, or a window opened for the next step."""
        if self._window is not None:
            self._window.step()
            if len(self._window.captured_steps) >= self._window.steps:
                self._end_window()
            return
        asked = self._asked
        if asked is None or asked.number <= self._done_number or self.steps < asked.first_step - 1:
            return
        self._done_number = asked.number
        self._window_request = asked
        self._window = TorchCapture(windows_dir(self.run_dir) / asked.name, self.rank, skip_steps=1,
                                    steps=asked.steps, first_step=self.steps)

    def _end_window(self) -> None:
        """The window's trace written beside the training; its record saved once it is in place."""
        window, request = self._window, self._window_request
        self._window = None
        window.close(wait=False)
        thread = threading.Thread(target=self._keep_window, args=(window, request), name="rnnprof-window",
                                  daemon=False)
        thread.start()
        self._writing.append((window, request, thread))
        self._flag_next = EXPORTED

    def _keep_window(self, window: TorchCapture, request: WindowRequest) -> None:
        status, error = rundir.STATUS_COMPLETE, None
        try:
            facts = window.close()
        except Exception as exc:  # the window is lost, the job goes on
            facts, status, error = {}, rundir.STATUS_INTERRUPTED, f"{type(exc).__name__}: {exc}"
        for name in [k for k in facts if k.startswith("step_") or k in ("profiler_warmup_steps", "export_steps")]:
            facts.pop(name)  # a window's step times are the series'
        record = {"rank": self.rank, "pid": os.getpid(), "world_size": self.world_size, **facts,
                  "status": status, "versions": process_versions(), "window": request.number}
        if error:
            record["error"] = error
        with self._lock:
            try:
                ranks.write_record(windows_dir(self.run_dir) / request.name, record, self._command)
            except Exception as exc:
                self._say(f"rank {self.rank}: window {request.name} could not be kept ({exc})")

    # -- record ----------------------------------------------------------------------------------

    def _record(self, status: str, **fields) -> dict:
        """The rank's record in the run directory (``recording.ranks``): the job's manifest is combined from them."""
        record = {"rank": self.rank, "local_rank": ranks.env_int("LOCAL_RANK", self.rank), "pid": os.getpid(),
                  "trace": None, "steps": [], "steps_run": self.steps, "status": status,
                  "world_size": self.world_size, "backend": ranks.process_group_backend(), "versions": process_versions(),
                  "series": series_path(self.run_dir, self.rank).relative_to(self.run_dir).as_posix(),
                  "series_steps": self._series.rows if self._series else 0, "notes": list(self.notes)}
        if self._series is not None and self._series.error:
            record["series_error"] = self._series.error
        record.update({k: v for k, v in fields.items() if v is not None})
        if not self._records:
            return record
        with self._lock:
            return ranks.write_record(self.run_dir, record, self._command)

