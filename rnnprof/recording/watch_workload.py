"""The built-in workloads watched (``rnnprof watch`` without a script): the warm-up and timed steps of ``scale`` and
``trace``, every one of them in the series, the warm-up flagged, windows captured when the watch asks.

* PyTorch (``--framework torch``): each rank runs a ``TorchRankWatch`` around its steps (``torch_ddp``'s
  ``watch``); this process keeps the run's manifest, as for ``trace``.
* TensorFlow: one process drives the towers (or a cluster's tasks); its steps are rank 0's series
  (``TensorFlowSteps``: the step's wall and CPU time, and memory: the process's resident memory, or the first GPU's
  allocator where TensorFlow runs on GPUs), and a window is the capture ``trace`` makes after its timed steps:
  ``session.trace_steps`` (RunOptions FULL_TRACE: timelines, RunMetadata, partition graphs) into the window's
  folder, a run directory of its own.

Both are watched for hangs as ``trace`` watches them, and the watch (``watcher.Watcher``) runs in a thread beside.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from rnnprof import rundir
from rnnprof.analyzers.throughput import summarize
from rnnprof.errors import JobHung, RankFailed
from rnnprof.events.series import MEMORY_RSS, MEMORY_TENSORFLOW, PROFILED, WARMUP
from rnnprof.models import get_workload
from rnnprof.models.config import TorchOptions, WorkloadConfig
from rnnprof.recording import session
from rnnprof.recording.hang_collect import ProbedRanks, remark_hung
from rnnprof.recording.hang_probe import FR_BUFFER, FR_BUFFER_ENV, remove_probe_files
from rnnprof.recording.hang_watch import HangOptions, HangWatch
from rnnprof.recording.torch_telemetry import NAN, STATM, RunQueue
from rnnprof.recording.watch_rank import TorchRankWatch
from rnnprof.recording.workload import chief_hang_watch
from rnnprof.rundir.manifest import process_versions
from rnnprof.rundir.series import SeriesWriter, series_header, series_path
from rnnprof.rundir.windows import REQUEST_POLL_S, WindowRequest, read_request, request_path, windows_dir
from rnnprof.rundir.writer import RunWriter, default_run_dir
from rnnprof.training import torch_ddp
from rnnprof.training.cluster import running_cluster
from rnnprof.training.runner import DataParallelRun


@dataclass(frozen=True)
class WatchedRun:
    """A watched built-in workload once it has ended: its run directory and the watch over it."""

    path: Path
    watcher: object


@dataclass(frozen=True)
class RankWatchFactory:
    """``torch_ddp.RankJob.watch``: each rank's ``TorchRankWatch`` (the run's manifest is this process's)."""

    run_dir: str
    warmup: int
    environment: tuple[tuple[str, str], ...] = ((FR_BUFFER_ENV, FR_BUFFER),)

    def __call__(self, rank: int) -> TorchRankWatch:
        return TorchRankWatch(self.run_dir, records=False, warmup=self.warmup, rank=rank)


def watch_torch_workload(options: TorchOptions, out: str | Path | None, force: bool, command: Sequence[str],
                         make_watcher: Callable, hang: HangOptions = HangOptions()) -> WatchedRun:
    """Watch ``options``' workload into ``out`` (None: a fresh ``runs/rnnlm-<time>``); ``make_watcher(path)`` gives
    the watch and its view (entered in that order) once the run directory exists."""
    config = options.workload
    writer = RunWriter(out or default_run_dir(config.model), command=command, force=force, config=options.to_dict())
    writer.update(framework="torch", world_size=config.devices, backend=None, ranks=[], versions=process_versions())
    watcher, view = make_watcher(writer.path)
    probed = ProbedRanks(writer.path, config.devices)
    hang_watch = HangWatch(writer.path, probed, hang, on_hung=lambda verdict: _kill(probed.live()))
    try:
        with writer.recording(), hang_watch, view, watcher:
            results = torch_ddp.run_ranks(options, watch=RankWatchFactory(str(writer.path), config.warmup))
            timed = torch_ddp.combine_ranks([r["timed"] for r in results])
            writer.update(backend=results[0]["backend"], throughput=dataclasses.asdict(summarize(timed)))
    except RankFailed:
        if hang_watch.verdict is None or not hang.stop:
            raise
        remark_hung(writer.path, hang_watch.record)
        raise JobHung(f"hung: {hang_watch.verdict.summary}; stopped; run directory: {writer.path}") from None
    finally:
        remove_probe_files(writer.path)
        writer.update(watch=watcher.summary())
    return WatchedRun(writer.path, watcher)


def _kill(live: dict[int, int]) -> None:
    for pid in live.values():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


class TensorFlowSteps:
    """The TensorFlow process's steps as rank 0's series, and the windows it captures (see the module)."""

    def __init__(self, writer: RunWriter, run, warmup: int, gpu: bool):
        self.writer, self.run, self.warmup = writer, run, warmup
        self.steps = 0
        self._gpu = gpu
        self._memory_fd = _open_statm()
        self._queue = RunQueue()
        source = MEMORY_TENSORFLOW if gpu else MEMORY_RSS
        unmeasured = {name: "one Session.run: the framework does not split it" for name in
                      ("data_s", "forward_s", "backward_s", "optimizer_s")}
        unmeasured["comm_wait_s"] = "the towers' all-reduce runs inside the step (its windows time it)"
        self.series = SeriesWriter(series_path(writer.path, 0), series_header(0, source, unmeasured))
        self._request_path = request_path(writer.path)
        self._seen: int | None = None
        self._checked = 0.0
        self._done_number = -1

    def step(self, options=None, run_metadata=None, flags: int = 0):
        began, cpu, queued = time.perf_counter(), time.process_time(), self._queue.read()
        result = self.run.step(options=options, run_metadata=run_metadata)
        end, cpu_end, queued_end = time.perf_counter(), time.process_time(), self._queue.read()
        memory, peak = self._memory()
        flags |= WARMUP if self.steps < self.warmup else 0
        self.series.append([self.steps, time.time(), end - began, NAN, NAN, NAN, NAN, NAN, cpu_end - cpu,
                            queued_end - queued, memory, peak, flags])
        self.steps += 1
        return result

    def run_steps(self, count: int, step: Callable) -> None:
        """``count`` steps through ``step`` (the hang watch's count of the steps around this one's), each followed
        by the window asked for, if it opens now."""
        for _ in range(count):
            step()
            request = self._asked()
            if request is not None and self.steps >= request.first_step:
                self._capture(request, step)

    def _asked(self) -> WindowRequest | None:
        now = time.monotonic()
        if now - self._checked < REQUEST_POLL_S:
            return None
        self._checked = now
        request = read_request(self._request_path)
        return request if request is not None and request.number > self._done_number else None

    def _capture(self, request: WindowRequest, step: Callable) -> None:
        """Window ``request``: its steps traced (FULL_TRACE) into its folder, a run directory of its own."""
        self._done_number = request.number
        window = RunWriter(windows_dir(self.writer.path) / request.name, command=self.writer.manifest["command"],
                           config=self.writer.manifest["config"])
        window.set_devices(self.run.device_names, self.run.device_kind)
        traced = lambda options=None, run_metadata=None: step(options=options, run_metadata=run_metadata,  # noqa: E731
                                                              flags=PROFILED)
        with window.recording():
            session.capture_after(window, traced, self.steps, request.steps, graph=self.run.graph, profile=False)

    def _memory(self) -> tuple[float, float]:
        if self._gpu:
            import tensorflow as tf

            info = tf.config.experimental.get_memory_info("GPU:0")
            tf.config.experimental.reset_memory_stats("GPU:0")
            return float(info["current"]), float(info["peak"])
        if self._memory_fd is None:
            return NAN, NAN
        try:
            return float(int(os.pread(self._memory_fd, 64, 0).split()[1]) * os.sysconf("SC_PAGE_SIZE")), NAN
        except (OSError, ValueError, IndexError):
            return NAN, NAN

    def close(self) -> None:
        self.series.close()
        self._queue.close()
        if self._memory_fd is not None:
            os.close(self._memory_fd)
            self._memory_fd = None


def _open_statm() -> int | None:
    try:
        return os.open(STATM, os.O_RDONLY)
    except OSError:
        return None


def watch_tf_workload(config: WorkloadConfig, out: str | Path | None, force: bool, command: Sequence[str],
                      make_watcher: Callable, hang: HangOptions | None = None) -> WatchedRun:
    """Watch ``config``'s TensorFlow workload into ``out`` (None: a fresh ``runs/<model>-<time>``); see
    ``watch_torch_workload`` for ``make_watcher``."""
    workload = get_workload(config)
    writer = RunWriter(out or default_run_dir(config.model), command=command, force=force, config=config.to_dict())
    watcher, view = make_watcher(writer.path)
    started: list = []

    def task_died(failure) -> None:
        writer.manifest["error"] = str(failure)
        writer.finish(rundir.STATUS_HUNG if isinstance(failure, JobHung) else rundir.STATUS_INTERRUPTED)

    hang_watch = chief_hang_watch(writer, config, hang, started, task_died)
    try:
        with writer.recording(), contextlib.ExitStack() as stack:
            spec, _ = stack.enter_context(running_cluster(config, on_hung=task_died, on_started=started.append,
                                                          probe_dir=writer.path if hang_watch else None))
            count = stack.enter_context(hang_watch).transport.ticking if hang_watch is not None else lambda s: s
            run = stack.enter_context(DataParallelRun(config, workload=workload, cluster=spec))
            writer.set_devices(run.device_names, run.device_kind)
            steps = TensorFlowSteps(writer, run, config.warmup, gpu=run.device_kind == "gpu")
            stack.callback(steps.close)
            stack.enter_context(view)
            stack.enter_context(watcher)
            steps.run_steps(config.warmup + config.batches, count(steps.step))
    finally:
        writer.update(watch=watcher.summary())
    return WatchedRun(writer.path, watcher)
