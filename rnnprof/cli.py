"""Command-line entry point: a registry of thin commands.

``COMMANDS`` maps each command's name to its module and one-line help, so ``rnnprof --help`` imports no command
and ``main(argv)`` imports only the command asked for. Each module ``rnnprof.commands.<module>`` provides
``add_arguments(parser)`` and ``run(args, console) -> int``; it imports without TensorFlow or torch, which
load inside ``run`` only when the input or the command needs them.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
import traceback
from types import ModuleType
from typing import NamedTuple, Sequence

from rich.console import Console

from rnnprof.version import __version__
from rnnprof import limits
from rnnprof.errors import RnnprofError
from rnnprof.paths import is_loop_error
from rnnprof.training.child_processes import exit_process


class Command(NamedTuple):
    module: str  # imported only when the command runs (or for the whole parser, build_parser())
    help: str  # one lowercase line: what the command does


COMMANDS: dict[str, Command] = {
    "scale": Command("rnnprof.commands.scale",
                     "time training on several device counts and print throughput and speedup"),
    "trace": Command("rnnprof.commands.trace",
                     "capture a run directory from a built-in workload, your own script or a running job"),
    "watch": Command("rnnprof.commands.watch",
                     "watch a whole job as it runs, judge each rank against its own baseline, capture where it goes wrong"),
    "count-ops": Command("rnnprof.commands.count_ops",
                         "count graph operators and kernel invocations per device and step, or compare two runs"),
    "placement-audit": Command("rnnprof.commands.placement_audit",
                               "find ops placed on the wrong device and what they cost"),
    "audit": Command("rnnprof.commands.audit",
                     "rank what to fix first by estimated saving per step, judged against the run's own jitter"),
    "comm": Command("rnnprof.commands.comm",
                    "split each device's time into communication, compute and idle, and find stragglers"),
    "pipeline": Command("rnnprof.commands.pipeline",
                        "measure a pipeline's bubble per stage against its schedule's theory, and its slowest stage"),
    "memory": Command("rnnprof.commands.memory",
                      "find each device's peak memory, what was live then, growth per step and imbalance"),
    "view": Command("rnnprof.commands.view",
                    "open a run directory (or a folder of runs) in TensorBoard's profile viewer"),
    "diff": Command("rnnprof.commands.diff",
                    "compare two runs, traces or graphs: time, ops and kernels, op counts, placement, configuration"),
    "critical-path": Command("rnnprof.commands.critical_path",
                             "find a step's critical path across devices and ranks, its shares and a what-if"),
    "whatif": Command("rnnprof.commands.whatif",
                      "predict the step time a change would give by replaying each step's graph across ranks"),
    "report": Command("rnnprof.commands.report",
                      "write one self-contained HTML report of a run, trace files or a sweep"),
    "worker": Command("rnnprof.commands.worker",
                      "serve one task of a TensorFlow gRPC cluster; it has no authentication: trusted networks only"),
    "roofline": Command("rnnprof.commands.roofline",
                        "measure FLOPs, bytes, TFLOP/s, TB/s and MFU per op and step against the device's roofline"),
    "hang": Command("rnnprof.commands.hang",
                    "name the rank a hung job waits for, its collective and its line, from a run or dumps"),
    "explain": Command("rnnprof.commands.explain",
                       "split each device count's step time into parts and give each part's share of the lost speedup"),
}
INTERNAL_ERROR = 3  # a bug in rnnprof, not in the user's input (see rnnprof.errors)


def load_command(name: str) -> ModuleType:
    """The module of the command ``name`` (a key of ``COMMANDS``)."""
    return importlib.import_module(COMMANDS[name].module)


class OneLineErrorParser(argparse.ArgumentParser):
    """Bad flags are one line (argparse would print the whole usage first) and exit code 2. A flag is never
    abbreviated: ``--device 2`` is refused, not taken as ``--devices 2``."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def refuse_unknown(self, extras: Sequence[str]):
        """The one-line error for words the command does not take, naming the closest flag of each unknown one."""
        flags = [option for action in self._actions for option in action.option_strings]
        hints = []
        for word in extras:
            if word.startswith("-"):
                given = word.split("=", 1)[0]
                close = difflib.get_close_matches(given, flags, n=1, cutoff=0.6)
                if close:
                    hints.append(f"{given}: did you mean {close[0]}?")
        self.error(f"unrecognized arguments: {' '.join(extras)}" + (f" ({'; '.join(hints)})" if hints else ""))


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command (the CLI reference's), or with ``chosen`` one whose other commands are
    only listed: their modules are not imported."""
    parser = OneLineErrorParser(
        prog="rnnprof",
        description="Run, instrument and explain multi-device data-parallel training: any TensorFlow graph or PyTorch "
                    "script, and traces (Kineto, TF timelines, xplanes) made elsewhere.",
    )
    parser.add_argument("--version", action="version", version=f"rnnprof {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    parser.commands = {}  # name -> its parser, which words the command does not take are refused by
    for name, command in COMMANDS.items():
        sub = subparsers.add_parser(name, help=command.help, description=command.help)
        parser.commands[name] = sub
        if chosen is None or name == chosen:
            sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                             help="show tracebacks for errors")
            module = load_command(name)
            module.add_arguments(sub)
            sub.set_defaults(run=module.run)
    return parser


def _chosen_command(argv: Sequence[str]) -> str:
    """The command ``argv`` names (its first word that is no flag; the top level's flags take no value), or ""."""
    name = next((word for word in argv if not word.startswith("-")), "")
    return name if name in COMMANDS else ""


def main(argv: Sequence[str] | None = None, console: Console | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_chosen_command(argv))
    try:
        args, extras = parser.parse_known_args(argv)
        if extras:  # the command's own parser says so, with its --help and the closest flag
            parser.commands[args.command].refuse_unknown(extras)
    except SystemExit as exc:  # argparse already printed its one-line usage error
        return int(exc.code or 0)
    console = console or Console()
    try:
        limits.configure(args)
        return int(args.run(args, console) or 0)
    except RnnprofError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"rnnprof {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"rnnprof {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except (OSError, RuntimeError) as exc:
        if not is_loop_error(exc):
            return _internal_error(args, exc)
        if args.debug:
            traceback.print_exc()
        where = getattr(exc, "filename", None) or str(exc).removeprefix("Symlink loop from ")
        print(f"rnnprof {args.command}: error: {where}: is a symlink loop (following its links never reaches "
              f"a file)", file=sys.stderr)
        return 2
    except Exception as exc:
        return _internal_error(args, exc)


def _internal_error(args: argparse.Namespace, exc: Exception) -> int:
    """A bug in rnnprof: still one line, the traceback on request."""
    if args.debug:
        traceback.print_exc()
    print(f"rnnprof {args.command}: internal error: {type(exc).__name__}: {_one_line(exc)} "
          f"(rerun with --debug for the traceback and please report it)", file=sys.stderr)
    return INTERNAL_ERROR


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300]


def entry_point() -> None:
    exit_process(main())
