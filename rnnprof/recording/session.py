"""Capturing graph-mode ``Session`` steps into a run directory.

Two phases, because TF allows one profiler session at a time and FULL_TRACE opens
its own: first the traced steps (RunOptions FULL_TRACE -> RunMetadata, timelines,
partition graphs), then the profiled steps (tf.profiler -> TensorBoard xplane with
step markers; on a cluster, every task's profiler service, one xplane per task). Both come after any timed window, so capture never slows the timing.
``step`` is any callable ``step(options=None, run_metadata=None)``, such as
``DataParallelRun.step``.
"""

from __future__ import annotations

import socket
from typing import Callable

from rnnprof import rundir
from rnnprof.rundir.writer import RunWriter, safe_name
from rnnprof.recording.nvtx import nvtx_range
from rnnprof.rundir.xspace import build_xspace

StepFn = Callable[..., object]


def full_trace_options():
    import tensorflow as tf

    return tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE, output_partition_graphs=True)


def trace_steps(writer: RunWriter, step: StepFn, first_step: int, count: int, collected: list | None = None) -> list:
    """Run ``count`` FULL_TRACE steps numbered from ``first_step``; returns ``(step, RunMetadata)`` pairs."""
    import tensorflow as tf

    collected = [] if collected is None else collected
    for n in range(first_step, first_step + count):
        run_metadata = tf.compat.v1.RunMetadata()
        with nvtx_range(f"traced step {n}"):
            step(options=full_trace_options(), run_metadata=run_metadata)
        writer.write_step(n, run_metadata)
        collected.append((n, run_metadata))
    return collected


def profile_steps(writer: RunWriter, step: StepFn, first_step: int, count: int) -> str | None:
    """Run ``count`` steps under tf.profiler with step markers; returns the profile run name."""
    import tensorflow as tf

    scratch = writer.scratch_dir("profile")
    tf.profiler.experimental.start(str(scratch))
    steps = []
    try:
        for n in range(first_step, first_step + count):
            with tf.profiler.experimental.Trace("train", step_num=n, _r=1), nvtx_range(f"profiled step {n}"):
                step()
            steps.append(n)
    finally:
        tf.profiler.experimental.stop()
        runs = sorted(p.name for p in (scratch / rundir.PROFILE_DIR).glob("*") if p.is_dir())
        writer.adopt_profile(scratch)
        writer.manifest["profiled_steps"] += steps
        writer.save_manifest()
    return runs[-1] if runs else None


def profile_cluster_steps(writer: RunWriter, step: StepFn, first_step: int, count: int,
                          tasks: list[tuple[str, int, str]], step_seconds: float) -> str | None:
    """Profile every task of a cluster at once (each task's server runs a profiler service) while this
    process runs at least ``count`` steps; each task's XSpace becomes ``plugins/profile/<run>/<job>_<task>.xplane.pb``.

    The window lasts about twice the steps' expected time (``step_seconds`` each), at least a second.
    A task that cannot be profiled is noted in the manifest's ``profile_error``; the capture goes on.
    Returns the profile run name.
    """
    import threading

    import tensorflow as tf

    scratch = writer.scratch_dir("profile")
    duration_ms = max(1000, int(2000 * count * max(step_seconds, 0.0)) + 500)
    failure: list[str] = []

    def trace() -> None:
        try:
            tf.profiler.experimental.client.trace(",".join(f"grpc://{address}" for _, _, address in tasks),
                                                  str(scratch), duration_ms, num_tracing_attempts=1)
        except Exception as exc:  # noqa: BLE001 - a failed profile must not lose the capture
            failure.append(f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}")

    tracer = threading.Thread(target=trace, name="rnnprof-cluster-profile", daemon=True)
    tracer.start()
    steps, n = [], first_step
    try:
        while tracer.is_alive() or len(steps) < count:
            with nvtx_range(f"profiled step {n}"):
                step()
            steps.append(n)
            n += 1
            if len(steps) >= count and tracer.is_alive():
                tracer.join(timeout=0.05)
    finally:
        runs = sorted(p for p in (scratch / rundir.PROFILE_DIR).glob("*") if p.is_dir())
        names = {f"{address.replace(':', '_')}.xplane.pb": f"{job}_{index}.xplane.pb" for job, index, address in tasks}
        for run in runs:
            for f in run.iterdir():
                if f.name in names:
                    f.rename(f.with_name(names[f.name]))
        writer.adopt_profile(scratch)
        writer.manifest["profiled_steps"] += steps
        if failure:
            writer.manifest["profile_error"] = failure[0]
        writer.save_manifest()
    return runs[-1].name if runs else None


def write_device_xspace(writer: RunWriter, run_metadata: list, run_name: str) -> str | None:
    """The per-device XSpace next to the profiler's: ``plugins/profile/<run>_devices/``."""
    if not run_metadata:
        return None
    space = build_xspace(((n, rm.step_stats) for n, rm in run_metadata), hostname=writer.host,
                         offsets=writer.clock_offsets)
    return writer.write_xspace(space, safe_name(run_name) + rundir.DEVICES_RUN_SUFFIX,
                               host=writer.host or socket.gethostname())


def capture_after(writer: RunWriter, step: StepFn, first_step: int, count: int, graph=None,
                  profile: bool = True, cluster_tasks: list | None = None, step_seconds: float = 0.0) -> None:
    """Traced steps, then profiled steps, then the device XSpace and the user-level graph.

    With ``cluster_tasks`` ((job, index, address) of each task), every task is profiled instead of this process."""
    if graph is not None:
        writer.write_graph(graph.as_graph_def(add_shapes=True))
    collected: list = []
    run_name = None
    try:
        trace_steps(writer, step, first_step, count, collected)
        if profile and cluster_tasks:
            run_name = profile_cluster_steps(writer, step, first_step + count, count, cluster_tasks, step_seconds)
        elif profile:
            run_name = profile_steps(writer, step, first_step + count, count)
    finally:  # an interrupted capture still gets the device view of what was traced
        write_device_xspace(writer, collected, run_name or "steps")
