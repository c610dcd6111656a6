"""The capture sequence of a built-in workload (``rnnprof trace`` without a script or ``--attach``).

Open the data-parallel run, record its session config and devices, time it exactly as ``rnnprof scale``
does (warm-up, then timed steps, inside NVTX ranges), record the throughput, then trace and profile
steps after the timed window (``session.capture_after``). The run directory's status says how it ended.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from rnnprof.analyzers.throughput import TimingSummary
from rnnprof.errors import InterruptedRun, JobHung
from rnnprof.recording.cluster_hang import ChiefTransport
from rnnprof.recording.hang_collect import remark_hung
from rnnprof.recording.hang_probe import TASKS, remove_probe_files
from rnnprof.recording.hang_watch import HangOptions, HangWatch
from rnnprof import rundir
from rnnprof.events import names
from rnnprof.models.config import WorkloadConfig
from rnnprof.models import get_workload
from rnnprof.recording.nvtx import NvtxSteps
from rnnprof.recording import session  # session.capture_after, looked up when called (tests wrap it)
from rnnprof.rundir.manifest import applied_offsets, session_config_fields
from rnnprof.rundir.writer import RunWriter, default_run_dir
from rnnprof.training.clock import manifest_offsets, measure_offsets
from rnnprof.training.cluster import PS_JOB, WORKER_JOB, exit_with, running_cluster
from rnnprof.training.measure import measure
from rnnprof.training.runner import DataParallelRun


@dataclass(frozen=True)
class WorkloadCapture:
    """What a finished capture reports: where it went, how fast the timed steps ran, what was written."""

    path: Path
    device_kind: str
    timed: TimingSummary
    captured: dict  # the manifest's lists of written files, by kind
    layout: dict | None = None  # --framework torch: how the ranks split the model (torch_layout.Layout.to_dict)


def capture_workload(config: WorkloadConfig, out: str | Path | None, force: bool, command: Sequence[str],
                     trace_steps: int, on_warning: Callable[[str], None] = lambda warning: None,
                     hang: HangOptions | None = None) -> WorkloadCapture:
    """Capture ``config``'s workload into ``out`` (None: a fresh ``runs/<model>-<time>``).

    A ``KeyboardInterrupt`` (Ctrl-C, or SIGTERM under ``interrupt.terminate_as_interrupt``) keeps what
    was captured, marks the run interrupted and raises ``InterruptedRun``; any other failure is recorded
    in the manifest's ``error`` and raised. ``hang``: watch the job for a hang (through ``cluster_hang``: the
    cluster it starts with ``--workers``, or its own devices); a hung job is marked ``hung`` and the process ends with
    ``JobHung``'s exit status (with ``--on-hang wait`` it runs on, and the run stays marked ``hung``).
    """

    workload = get_workload(config)  # a bad --data file stops here, before a run directory exists
    writer = RunWriter(out or default_run_dir(config.model), command=command, force=force,
                       config=config.to_dict())

    started: list = []  # the LocalCluster, once it runs

    def task_died(failure) -> None:  # the chief is stuck in a step: the process ends after this
        if isinstance(failure, JobHung) and watch is not None:
            writer.manifest["hang"] = watch.record or {}
            writer.finish(rundir.STATUS_HUNG)
        else:
            writer.manifest["error"] = str(failure)
            writer.finish(rundir.STATUS_INTERRUPTED)
        remove_probe_files(writer.path, TASKS)

    watch = chief_hang_watch(writer, config, hang, started, task_died)
    try:
        return _capture(writer, config, workload, trace_steps, on_warning, watch, started, task_died)
    finally:
        if watch is not None and watch.record is not None and not hang.stop:
            remark_hung(writer.path, watch.record)  # --on-hang wait: however the job ended, it hung


def _capture(writer: RunWriter, config: WorkloadConfig, workload, trace_steps: int, on_warning,
             watch: HangWatch | None, started: list, task_died) -> WorkloadCapture:
    with writer.recording(), contextlib.ExitStack() as stack:
        spec, tasks = stack.enter_context(running_cluster(config, on_hung=task_died, on_started=started.append,
                                                          probe_dir=writer.path if watch else None))
        count = stack.enter_context(watch).transport.ticking if watch is not None else lambda step: step
        if watch is not None and config.cluster_spec is not None:
            watch.transport.remote = [f"{job}:{index}" for job, index, _ in spec.tasks()]
        stack.callback(remove_probe_files, writer.path, TASKS)
        run = stack.enter_context(DataParallelRun(config, workload=workload, cluster=spec))
        for warning in run.warnings:
            on_warning(warning)
        _record_setup(writer, run, spec, tasks)
        timed = _timed_steps(writer, run, config, count)
        with clock_offsets(writer, run):
            session.capture_after(writer, count(run.step), config.warmup + config.batches, trace_steps,
                                  graph=run.graph, cluster_tasks=spec.tasks() if spec is not None else None,
                                  step_seconds=timed.median_step_seconds)
    return WorkloadCapture(path=writer.path, device_kind=run.device_kind, timed=timed,
                           captured=writer.captured)


def chief_hang_watch(writer: RunWriter, config: WorkloadConfig, hang: HangOptions | None, started: list,
                task_died: Callable) -> HangWatch | None:
    """The hang watch of a job this process drives, or None (no ``hang``): a cluster it starts (``--workers``; its
    tasks are numbered as ``ClusterSpec.tasks()`` lists them: workers, then ps tasks), its own devices (no task),
    or tasks started elsewhere (``--cluster-spec``: named once the spec is read, never asked nor stopped). A hung
    job's tasks are stopped if rnnprof started them, the run is marked ``hung`` (``task_died``) and the process
    ends with ``JobHung``'s exit status."""
    if hang is None:
        return None
    jobs = [(WORKER_JOB, k) for k in range(config.workers or 0)] + [(PS_JOB, k) for k in range(config.ps_tasks or 0)]
    started_here = config.workers and config.cluster_spec is None
    names = {n: f"{job}:{index}" for n, (job, index) in enumerate(jobs)} if started_here else {}

    def give_up(verdict) -> None:
        failure = JobHung(f"hung: {verdict.summary}; stopped; run directory: {writer.path}")
        if started:
            started[0].give_up(failure)  # stops the tasks, then task_died, then the process ends
        else:
            task_died(failure)
            exit_with(failure)

    def interrupted() -> None:  # --on-hang wait, then Ctrl-C or SIGTERM while the chief is stuck
        if started:
            started[0].stop()
        writer.manifest["hang"] = watch.record or {}
        writer.finish(rundir.STATUS_HUNG)  # what was written listed, the run kept hung
        remove_probe_files(writer.path, TASKS)
        exit_with(InterruptedRun(f"interrupted; the job hung; what was captured is in {writer.path}"))

    watch = HangWatch(writer.path, ChiefTransport(writer.path, names), hang, give_up, interrupted)
    return watch


def _record_setup(writer, run, spec, tasks: list[dict]) -> None:
    """The manifest's cluster (when there is one), session config and devices."""

    if spec is not None:
        writer.update(cluster=cluster_fields(spec, tasks))
    writer.update(session_config=session_config_fields(run.session_proto))
    writer.set_devices(run.device_names, run.device_kind)


def _timed_steps(writer, run, config: WorkloadConfig, count: Callable = lambda step: step) -> TimingSummary:
    """Time the run as ``rnnprof scale`` does (warm-up, then timed steps, inside NVTX ranges), recording each
    step's time and the throughput in the manifest; returns the timed steps' summary."""

    times, cpu = writer.recorded(names.STEP_TIMES), writer.recorded(names.STEP_CPU)

    def record(phase: str, index: int, step) -> None:
        times[phase].append(step.seconds)
        if step.cpu is not None:
            cpu[phase].append(step.cpu.as_dict())

    steps = NvtxSteps(run, config.warmup)
    steps.step = count(steps.step)  # each step the hang watch counts
    try:
        measurement = measure(steps, config.warmup, config.batches, on_step=record)
    finally:
        steps.end()
    throughput = dataclasses.asdict(measurement.timed)
    throughput["words_definition"] = run.workload.words_definition
    if config.include_warmup:
        throughput["with_warmup"] = dataclasses.asdict(measurement.with_warmup)
    writer.update(throughput=throughput)
    return measurement.timed


def cluster_fields(spec, tasks: list[dict]) -> dict:
    """The manifest's ``cluster``: the spec, every task's job, index, address, host and pid, and the chief."""
    import os
    import socket

    return {"spec": spec.to_dict(), "tasks": tasks, "chief": {"host": socket.gethostname(), "pid": os.getpid()},
            "master": spec.master()}


@contextlib.contextmanager
def clock_offsets(writer, run):
    """Around a cluster run's capture: each task's clock offset measured before it (applied to the timelines)
    and after it, into the manifest's ``clock_offsets``."""
    if run.cluster is None:
        yield
        return

    start = measure_offsets(run.session, run.clock_ops)
    writer.update(clock_offsets=manifest_offsets(start))
    writer.clock_offsets = applied_offsets(writer.recorded("clock_offsets"))
    yield
    writer.update(clock_offsets=manifest_offsets(start, measure_offsets(run.session, run.clock_ops)))
