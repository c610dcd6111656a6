"""rnnprof watch: watch a whole training job as it runs and capture the steps where it goes wrong.

A command of its own rather than ``trace --watch``: trace records a window the user chose in advance (its flags,
``--steps`` and ``--skip-steps``, say which) and ends; watch runs as long as the job, chooses its windows itself
and takes flags trace has no use for (the rate limits, the baseline, TensorBoard). See docs/commands/watch.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from rich.text import Text

from rnnprof import rundir
from rnnprof.commands.flags import add_out_arguments, add_script_argument, non_negative_int, positive_int, script_command
from rnnprof.commands.given_flags import given_options, record_given_options
from rnnprof.commands import hang_flags
from rnnprof.commands.trace import ScriptFailed
from rnnprof.commands.workload_flags import (add_workload_arguments, check_workload_args, torch_options_from_args,
                                             workload_config_from_args)
from rnnprof.errors import InputError, InterruptedRun, JobHung, UsageError
from rnnprof.files import atomic_write_json
from rnnprof.recording import ranks
from rnnprof.recording.hang_watch import HUNG_EXIT, HangOptions
from rnnprof.recording.interrupt import terminate_as_interrupt
from rnnprof.recording.script import errors_after_failure, hang_verdict, run_script, script_failure
from rnnprof.recording.watch_workload import watch_tf_workload, watch_torch_workload
from rnnprof.recording.watcher import WatchOptions, Watcher
from rnnprof.reports.live import LiveView
from rnnprof.reports.watch import verdict_text
from rnnprof.rundir.series import read_series
from rnnprof.rundir.tensorboard import ScalarWriter
from rnnprof.rundir.windows import ask_for_window
from rnnprof.rundir.writer import check_out_dir
from rnnprof.training.runner import visible_gpus

ASK_WAIT_S = 30.0  # how long --capture waits for the watch to answer (its thread yields the cores to the job)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    record_given_options(parser)
    out = add_out_arguments(parser, "a script")
    out.add_argument("--tensorboard", metavar="DIR", default=None,
                     help="also write each rank's step series as TensorBoard scalars under DIR/rank<r>/")
    windows = parser.add_argument_group("capture windows")
    windows.add_argument("--window-steps", type=positive_int, default=5,
                         help="steps each capture window profiles, on every rank (default: %(default)s)")
    windows.add_argument("--capture-gap", type=positive_int, default=500, metavar="STEPS",
                         help="at most one window every STEPS steps for anomalies of one kind (default: %(default)s)")
    windows.add_argument("--max-captures", type=non_negative_int, default=5,
                         help="at most this many windows opened by anomalies in the job (default: %(default)s)")
    windows.add_argument("--baseline-step", type=non_negative_int, default=30, metavar="STEP",
                         help="the step the baseline window opens at, that the later windows are compared with "
                              "(default: %(default)s)")
    windows.add_argument("--no-baseline", action="store_true", help="capture no baseline window")
    windows.add_argument("--capture", metavar="RUN", default=None,
                         help="from another terminal: ask the watch writing RUN for a window now, and exit")
    hang_flags.add_arguments(parser.add_argument_group("hangs"))
    add_workload_arguments(parser)
    add_script_argument(parser)


def run(args: argparse.Namespace, console) -> int:
    command = script_command(args)
    if args.capture:
        return _ask(args, command, console)
    if not command:
        check_workload_args(args)  # before TensorFlow or torch loads
    else:
        _refuse_workload_flags(args)
    if args.out:
        check_out_dir(args.out, args.force)
    with terminate_as_interrupt():
        return _script(args, command, console) if command else _workload(args, console)


def _refuse_workload_flags(args: argparse.Namespace) -> None:
    for action in add_workload_arguments(argparse.ArgumentParser(add_help=False)):
        option = given_options(args).get(action.dest)
        if option:
            raise UsageError(f"{option} does not apply when watching a script; it is for the built-in workloads")


def _ask(args: argparse.Namespace, command: list[str], console) -> int:
    """``--capture RUN``: a window now, asked of the watch writing RUN."""
    if command or len(given_options(args)) > 1:
        raise UsageError("--capture RUN takes nothing else: it asks the watch already writing RUN for a window")
    run_dir = Path(args.capture)
    if not (run_dir / rundir.SERIES_DIR).is_dir():
        raise UsageError(f"--capture {run_dir}: no watched run there (expected the --out of a running rnnprof watch)")
    answer = ask_for_window(run_dir, ASK_WAIT_S)
    if answer is None:
        raise UsageError(f"--capture {run_dir}: no watch answered within {ASK_WAIT_S:g} s (has the job ended?)")
    console.print(Text(answer))
    return 0


def _options(args: argparse.Namespace, gpu: bool = False) -> WatchOptions:
    return WatchOptions(window_steps=args.window_steps, capture_gap=args.capture_gap, max_captures=args.max_captures,
                        baseline_step=None if args.no_baseline else args.baseline_step, gpu=gpu)


def _watcher(args: argparse.Namespace, out: Path, console, options: WatchOptions) -> tuple[Watcher, LiveView]:
    hint = (f"a window now: kill -USR1 {os.getpid()}, or rnnprof watch --capture {out}")
    view = LiveView(console, hint=hint)
    scalars = ScalarWriter(args.tensorboard) if args.tensorboard else None
    watcher = Watcher(out, options, view, analyse=WindowAnalysis, scalars=scalars)
    view.step_view = lambda step: watcher.detector.view(step=step)
    signal.signal(signal.SIGUSR1, lambda signum, frame: watcher.ask())
    return watcher, view


def _hang(args: argparse.Namespace) -> HangOptions:
    return hang_flags.hang_options(args, "watch")


def _script(args: argparse.Namespace, command: list[str], console) -> int:
    if not args.out:
        raise UsageError("--out DIR is required when watching a script")
    out = Path(args.out)
    watcher, view = _watcher(args, out, console, _options(args))
    with view:
        code = run_script(out, command, steps=None, skip_steps=0, force=args.force, hang=_hang(args),
                          watch={"window_steps": args.window_steps}, beside=watcher)
    try:
        ranks.update_manifest(out, watch=watcher.summary())
    except InputError as exc:  # the run keeps its series and windows; only the summary is missing
        print(f"rnnprof watch: the manifest could not keep the watch's summary: {exc}", file=sys.stderr)
    _summary(console, out, watcher)
    return _outcome(out, code)


def _outcome(out: Path, code: int) -> int:
    verdict = hang_verdict(out)
    if code == HUNG_EXIT and verdict:
        raise JobHung(f"hung: {verdict}; stopped; run directory: {out}")
    if code == 130:
        raise InterruptedRun(f"interrupted; what was watched is in {out}")
    if code != 0:
        first, after = errors_after_failure(out)
        for error in after:
            print(f"rnnprof watch: after rank {first} failed: {error}", file=sys.stderr)
        raise ScriptFailed(f"{script_failure(out) or f'the job exited with code {code}'} (run directory: {out})",
                           code)
    return 0


def _workload(args: argparse.Namespace, console) -> int:
    argv = ["rnnprof", "watch", *sys.argv[2:]] if sys.argv[1:2] == ["watch"] else ["rnnprof", "watch"]
    if args.framework == "torch":
        options = torch_options_from_args(args, 0)
        watch = lambda out: _watcher(args, out, console, _options(args))  # noqa: E731
        done = watch_torch_workload(options, args.out, args.force, argv, watch, hang=_hang(args))
    else:
        config = workload_config_from_args(args, gpus_available=visible_gpus())
        watch = lambda out: _watcher(args, out, console, _options(args, gpu=bool(visible_gpus())))  # noqa: E731
        done = watch_tf_workload(config, args.out, args.force, argv, watch, hang=_hang(args))
    _summary(console, done.path, done.watcher)
    return 0


def _summary(console, out: Path, watcher: Watcher) -> None:
    """What the watch saw, once the job has ended: its steps, each window and its verdict."""
    series = read_series(out)
    steps = max((len(s) for s in series.values()), default=0)
    console.print(Text.assemble("watched ", (f"{steps:,}", "bold"), f" steps on {len(series)} rank(s); "
                                f"{len(watcher.windows)} window(s); run directory: ", (str(out), "bold")),
                  soft_wrap=True)
    for window in watcher.windows:
        text = (window.verdict or {}).get("text") or verdict_text(window.verdict or {})
        console.print(Text(f"  {window.request.name} ({window.reason}): {text}"), soft_wrap=True)
    for note in watcher.notes:
        console.print(Text(f"  note: {note}"), soft_wrap=True)


class WindowAnalysis:
    """A window's analysis in a process of its own at nice 19 while the job runs (``commands.window_verdict``),
    at the default priority once it has ended (``hurry()``): ``poll()`` gives its
    verdict once it has ended (a failed one's says why). What it is given and what it says on stderr are files in
    the window's folder, removed once it has ended well."""

    def __init__(self, window: Path, baseline: Path | None, anomalies: list):
        self.window = window
        self._given = window / ".anomalies.json"
        self._log = window / ".analysis.log"
        atomic_write_json(self._given, [a.as_dict() for a in anomalies])
        self._argv = [sys.executable, "-m", "rnnprof.commands.window_verdict", str(window),
                      "--anomalies", str(self._given), *(["--baseline", str(baseline)] if baseline else [])]
        self._process = self._start(19)

    def _start(self, nice: int) -> subprocess.Popen:
        with open(self._log, "wb") as log:
            return subprocess.Popen(self._argv, stdout=subprocess.DEVNULL, stderr=log,
                                    preexec_fn=(lambda: os.nice(nice)) if nice else None)

    def hurry(self) -> None:
        """The job has ended: the analysis runs at the default priority (started again where this user may not
        raise a process's priority back)."""
        if self._process.poll() is not None:
            return
        try:
            os.setpriority(os.PRIO_PROCESS, self._process.pid, 0)
        except OSError:
            self.stop()
            self._process = self._start(0)

    def poll(self) -> dict | None:
        code = self._process.poll()
        if code is None:
            return None
        self._given.unlink(missing_ok=True)
        try:
            verdict = json.loads((self.window / rundir.VERDICT).read_text())
        except (OSError, ValueError):
            lines = self._log.read_text(errors="replace").strip().splitlines() if self._log.exists() else []
            why = lines[-1] if lines else f"exit code {code}"
            return {"window": self.window.name, "text": f"the window's analysis failed ({why}); the job went on"}
        self._log.unlink(missing_ok=True)
        return verdict

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
