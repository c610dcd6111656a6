"""rnnprof trace: capture a run directory from a built-in workload, a script, or a running job."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from rnnprof.config import (add_workload_arguments, non_negative_int, non_negative_seconds, positive_int,
                            workload_config_from_args)
from rnnprof.errors import InterruptedRun, RnnprofError, UsageError

NAME = "trace"
HELP = ("Capture a run directory (timelines, TensorBoard profile, graphs, run metadata) from a built-in "
        "workload, your own script (-- python train.py ...), or a running job (--attach)")


class ScriptFailed(RnnprofError):
    """The user's script failed under capture; its exit code becomes rnnprof's."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def add_arguments(parser: argparse.ArgumentParser) -> None:
    out = parser.add_argument_group("output")
    out.add_argument("--out", default=None, help="run directory to create (default: a fresh runs/<model>-<time>)")
    out.add_argument("--force", action="store_true",
                     help="replace the run in a non-empty --out (only rnnprof's own files are removed)")
    out.add_argument("--trace-steps", type=positive_int, default=3,
                     help="built-in workloads: steps traced after the timed window (default 3)")
    script = parser.add_argument_group("your own script (-- python train.py ARGS)")
    script.add_argument("--steps", type=positive_int, default=3, help="steps to capture (default 3)")
    script.add_argument("--skip-steps", type=non_negative_int, default=1,
                        help="steps to let pass before capturing (default 1: the first step traces and compiles)")
    script.add_argument("--delay", type=non_negative_seconds, default=0.0,
                        help="seconds to wait before the capture window may open")
    attach = parser.add_argument_group("a running job")
    attach.add_argument("--attach", metavar="grpc://HOST:PORT", default=None,
                        help="capture from a job that called tf.profiler.experimental.server.start(PORT)")
    attach.add_argument("--duration", type=non_negative_seconds, default=2.0, help="seconds to capture (default 2)")
    add_workload_arguments(parser)
    parser.add_argument("script", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def run(args: argparse.Namespace, console) -> int:
    command = list(args.script or [])
    if command and command[0] == "--":
        command = command[1:]
    argv = ["rnnprof", "trace", *sys.argv[2:]] if sys.argv[1:2] == ["trace"] else ["rnnprof", "trace"]
    if args.attach and command:
        raise UsageError("--attach and a script to run cannot be combined")
    if args.out:
        from rnnprof.profiler.rundir.writer import check_out_dir

        check_out_dir(args.out, args.force)  # before TensorFlow loads: a refusal is instant
    if args.attach:
        return _attach(args, console, argv)
    if command:
        return _script(args, command, console)
    return _workload(args, console, argv)


def _require_out(args, what: str):
    if not args.out:
        raise UsageError(f"--out DIR is required when tracing {what}")
    return args.out


def _attach(args, console, argv) -> int:
    from rnnprof.profiler.capture.attach import attach_capture

    writer = attach_capture(args.attach, args.duration, _require_out(args, "a running job"), force=args.force,
                            command=argv)
    console.print(f"captured {args.duration:g} s from {args.attach} into [bold]{writer.path}[/]")
    return 0


def _script(args, command, console) -> int:
    from rnnprof.errors import FindingsError
    from rnnprof.profiler.capture.script import nothing_captured, run_script, script_failure

    out = _require_out(args, "a script")
    code = run_script(out, command, steps=args.steps, skip_steps=args.skip_steps, delay=args.delay,
                      force=args.force)
    if code == 130:
        raise InterruptedRun(f"interrupted; what was captured is in {out}")
    if code != 0:
        reason = script_failure(out) or f"the script exited with code {code}"
        raise ScriptFailed(f"{reason} (run directory: {out})", code)
    empty = nothing_captured(out, args.skip_steps, args.delay)
    if empty:
        raise FindingsError(f"{empty} (run directory: {out})")
    console.print(f"run directory: [bold]{out}[/]")
    return 0


def _workload(args, console, argv) -> int:
    from rnnprof.models import get_workload
    from rnnprof.profiler import rundir
    from rnnprof.profiler.rundir.writer import RunWriter, default_run_dir
    from rnnprof.profiler.capture.nvtx import NvtxSteps
    from rnnprof.profiler.run.runner import DataParallelRun, visible_gpus
    from rnnprof.profiler.capture.session import capture_after
    from rnnprof.profiler.run.measure import measure

    _terminate_as_interrupt()
    config = workload_config_from_args(args, gpus_available=visible_gpus())
    workload = get_workload(config)  # a bad --data file stops here, before a run directory exists
    out = args.out or default_run_dir(config.model)
    writer = RunWriter(out, command=argv, force=args.force, config=config.to_dict())
    status = rundir.STATUS_INTERRUPTED
    try:
        with DataParallelRun(config, workload=workload) as run:
            for warning in run.warnings:
                console.print(f"[yellow]warning:[/] {warning}")
            session_proto = run.session_proto
            writer.update(session_config={"inter_op_threads": session_proto.inter_op_parallelism_threads,
                                          "intra_op_threads": session_proto.intra_op_parallelism_threads,
                                          "allow_soft_placement": session_proto.allow_soft_placement})
            writer.set_devices(run.device_names, run.device_kind)
            times = writer.manifest["step_times"]
            steps = NvtxSteps(run, config.warmup)
            try:
                measurement = measure(steps, config.warmup, config.batches,
                                      on_step=lambda phase, index, step: times[phase].append(step.seconds))
            finally:
                steps.end()
            throughput = dataclasses.asdict(measurement.timed)
            throughput["words_definition"] = run.workload.words_definition
            if config.include_warmup:
                throughput["with_warmup"] = dataclasses.asdict(measurement.with_warmup)
            writer.update(throughput=throughput)
            capture_after(writer, run.step, config.warmup + config.batches, args.trace_steps, graph=run.graph)
        status = rundir.STATUS_COMPLETE
    except KeyboardInterrupt:
        raise InterruptedRun(f"interrupted; what was captured is in {writer.path}") from None
    except Exception as exc:
        writer.manifest["error"] = f"{type(exc).__name__}: {exc}"  # the run says why it stopped
        raise
    finally:
        writer.finish(status)
    timed = measurement.timed
    console.print(f"{config.model} on {config.devices} {run.device_kind} device(s): "
                  f"{timed.words_per_second:,.0f} words/s over {timed.steps} timed steps "
                  f"(median {timed.median_step_seconds * 1000:.1f} ms/step)")
    captured = writer.manifest["captured"]
    console.print(f"run directory: [bold]{writer.path}[/] — {len(captured['timelines'])} timelines, "
                  f"{len(captured['xplane'])} xplanes, {len(captured['graphs'])} graph files")
    return 0


def _terminate_as_interrupt() -> None:
    """SIGTERM (a job scheduler, ``kill``) ends a capture like Ctrl-C: what was captured is kept."""
    import signal
    import threading

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupt)
