"""rnnprof trace: capture a run directory from a built-in workload, a script, or a running job."""

from __future__ import annotations

import argparse
import sys

from rich.text import Text

from rnnprof.commands.given_flags import given_options, record_given_options
from rnnprof.commands.hang_flags import hang_options
from rnnprof.commands import hang_flags
from rnnprof.commands.flags import (add_out_arguments, add_script_argument, non_negative_int, non_negative_seconds,
                                   positive_int, script_command)
from rnnprof.commands.workload_flags import (add_workload_arguments, check_workload_args, torch_options_from_args,
                                             workload_config_from_args)
from rnnprof.models.config import IMAGE_MODELS
from rnnprof.errors import FindingsError, InterruptedRun, JobHung, RnnprofError, UsageError
from rnnprof.recording.interrupt import terminate_as_interrupt
from rnnprof.recording.attach import attach_capture
from rnnprof.recording.hang_watch import HUNG_EXIT, HangOptions
from rnnprof.recording.script import (errors_after_failure, hang_verdict, nothing_captured, run_script, script_failure,
                                      what_was_kept)
from rnnprof.recording.torch_workload import capture_torch_workload
from rnnprof.recording.workload import capture_workload
from rnnprof.reports.scale import layout_text
from rnnprof.rundir.writer import check_out_dir
from rnnprof.training.runner import visible_gpus



class ScriptFailed(RnnprofError):
    """The user's script failed under capture; its exit code becomes rnnprof's."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


# What each kind of capture is called in messages.
WORKLOAD, SCRIPT, ATTACH = "a built-in workload", "a script (-- python ...)", "a running job (--attach)"
# Options that only one kind of capture reads (the workload flags are added to these in ``run``).
_ONLY = {"trace_steps": WORKLOAD, "steps": SCRIPT, "skip_steps": SCRIPT, "delay": SCRIPT, "duration": ATTACH}
_HANG_FLAGS = ("hang_after", "on_hang")  # every capture that runs the job (not --attach)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    record_given_options(parser)
    out = add_out_arguments(parser, "a script or --attach")
    out.add_argument("--trace-steps", type=positive_int, default=3,
                     help="built-in workloads: steps traced after the timed window (default: %(default)s)")
    script = parser.add_argument_group("your own script (-- python train.py ARGS, or -- torchrun OPTIONS train.py "
                                       "ARGS for PyTorch)")
    script.add_argument("--steps", type=positive_int, default=3, help="steps to capture (default: %(default)s)")
    script.add_argument("--skip-steps", type=non_negative_int, default=1,
                        help="steps to let pass before capturing; the first step traces and compiles "
                             "(default: %(default)s)")
    script.add_argument("--delay", type=non_negative_seconds, default=0.0,
                        help="seconds to wait before the capture window may open; TensorFlow scripts only "
                             "(default: %(default)g)")
    hang_flags.add_arguments(script)
    attach = parser.add_argument_group("a running job")
    attach.add_argument("--attach", metavar="grpc://HOST:PORT", default=None,
                        help="capture from a job that called tf.profiler.experimental.server.start(PORT)")
    attach.add_argument("--duration", type=non_negative_seconds, default=2.0,
                        help="seconds to capture (default: %(default)g)")
    add_workload_arguments(parser)
    add_script_argument(parser)


def run(args: argparse.Namespace, console) -> int:
    command = script_command(args)
    argv = ["rnnprof", "trace", *sys.argv[2:]] if sys.argv[1:2] == ["trace"] else ["rnnprof", "trace"]
    if args.attach and command:
        raise UsageError("--attach and a script to run cannot be combined")
    _refuse_options_of_other_modes(args, ATTACH if args.attach else SCRIPT if command else WORKLOAD)
    if not args.attach and not command:
        check_workload_args(args)  # before TensorFlow or torch loads: a bad flag is refused at once
    if args.out:
        check_out_dir(args.out, args.force)
    with terminate_as_interrupt():  # SIGTERM ends a capture the way Ctrl-C does
        if args.attach:
            return _attach(args, console, argv)
        if command:
            return _script(args, command, console)
        return _workload(args, console, argv)


def _refuse_options_of_other_modes(args: argparse.Namespace, mode: str) -> None:
    """An option the mode would ignore is an error, not a silent no-op; defaults do not count."""
    only = dict(_ONLY)
    for action in add_workload_arguments(argparse.ArgumentParser(add_help=False)):
        only[action.dest] = WORKLOAD
    for dest, option in given_options(args).items():
        if dest in _HANG_FLAGS and mode == ATTACH:
            raise UsageError(f"{option} does not apply when tracing {mode}; it is for scripts and built-in workloads")
        if only.get(dest, mode) != mode:
            raise UsageError(f"{option} does not apply when tracing {mode}; it is for {only[dest]}")


def _require_out(args, what: str):
    if not args.out:
        raise UsageError(f"--out DIR is required when tracing {what}")
    return args.out


def _attach(args, console, argv) -> int:
    writer = attach_capture(args.attach, args.duration, _require_out(args, "a running job"), force=args.force,
                            command=argv)
    console.print(Text.assemble(f"captured {args.duration:g} s from {args.attach} into ", (str(writer.path), "bold")))
    return 0


def _hang_options(args) -> HangOptions:
    return hang_options(args, "trace")


def _script(args, command, console) -> int:
    out = _require_out(args, "a script")
    hang = _hang_options(args)
    code = run_script(out, command, steps=args.steps, skip_steps=args.skip_steps, delay=args.delay,
                      force=args.force, hang=hang)
    verdict = hang_verdict(out)
    if code == HUNG_EXIT and verdict:  # the script's own exit code 124 is passed on below, as any other
        raise JobHung(f"hung: {verdict}; stopped; {what_was_kept(out)}")
    if code == 130:
        raise InterruptedRun(f"interrupted; {what_was_kept(out)}")
    if code != 0:
        reason = script_failure(out) or f"the script exited with code {code}"
        first, after = errors_after_failure(out)
        for error in after:  # the first failure is the last line: the others followed from it
            print(f"rnnprof trace: after rank {first} failed: {error}", file=sys.stderr)
        raise ScriptFailed(f"{reason} (run directory: {out})", code)
    empty = nothing_captured(out, args.skip_steps, args.delay)
    if empty:
        raise FindingsError(f"{empty} (run directory: {out})")
    console.print(Text.assemble("run directory: ", (str(out), "bold")))
    return 0


def _torch_workload(args, console, argv) -> int:
    options = torch_options_from_args(args, 0)
    config = options.workload
    done = capture_torch_workload(options, args.out, args.force, argv, args.trace_steps, hang=_hang_options(args))
    timed = done.timed
    mode = f", --parallel {options.parallel} ({layout_text(done.layout)})" if options.parallel != "ddp" else ""
    console.print(Text(f"{config.model} on {config.devices} rank(s) ({done.device_kind}{mode}): "
                       f"{timed.words_per_second:,.0f} words/s over {timed.steps} timed steps "
                       f"(median {timed.median_step_seconds * 1000:.1f} ms/step, slowest rank)"))
    console.print(Text.assemble("run directory: ", (str(done.path), "bold"),
                                f" — {len(done.captured.get('kineto', []))} rank traces (Kineto)"))
    return 0


def _workload(args, console, argv) -> int:
    if args.framework == "torch":
        return _torch_workload(args, console, argv)

    config = workload_config_from_args(args, gpus_available=visible_gpus())
    done = capture_workload(config, args.out, args.force, argv, args.trace_steps,
                            on_warning=lambda warning: console.print(Text.assemble(("warning:", "yellow"), f" {warning}")),
                            hang=_hang_options(args))
    timed = done.timed
    unit = "images" if config.model in IMAGE_MODELS else "words"
    where = f"{config.devices} {done.device_kind} device(s)"
    if config.workers:
        where = f"{config.workers} worker task(s) x {where}" + (f", {config.ps_tasks} ps task(s)" if config.ps_tasks else "")
    console.print(Text(f"{config.model} on {where}: "
                       f"{timed.words_per_second:,.0f} {unit}/s over {timed.steps} timed steps "
                       f"(median {timed.median_step_seconds * 1000:.1f} ms/step)"))
    console.print(Text.assemble("run directory: ", (str(done.path), "bold"),
                                f" — {len(done.captured['timelines'])} timelines, {len(done.captured['xplane'])} "
                                f"xplanes, {len(done.captured['graphs'])} graph files"))
    return 0
