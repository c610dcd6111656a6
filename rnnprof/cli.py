"""Command-line entry point: a registry of thin commands.

Each command lives in ``rnnprof.commands.<module>`` and provides ``NAME``,
``HELP``, ``add_arguments(parser)`` and ``run(args, console) -> int``. Command
modules must import without TensorFlow; they import it inside ``run`` only when
the input or the command needs it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from typing import Sequence

from rich.console import Console

from rnnprof.version import __version__
from rnnprof import limits
from rnnprof.errors import RnnprofError
from rnnprof.paths import is_loop_error

COMMAND_MODULES = (
    "rnnprof.commands.scale",
    "rnnprof.commands.trace",
    "rnnprof.commands.count_ops",
    "rnnprof.commands.placement_audit",
    "rnnprof.commands.audit",
    "rnnprof.commands.comm",
    "rnnprof.commands.view",
    "rnnprof.commands.diff",
    "rnnprof.commands.critical_path",
    "rnnprof.commands.report",
    "rnnprof.commands.worker",
    "rnnprof.commands.roofline",
    "rnnprof.commands.explain",
)
INTERNAL_ERROR = 3  # a bug in rnnprof, not in the user's input (see rnnprof.errors)


def _available_commands():
    for module_name in COMMAND_MODULES:
        try:
            yield importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            # A command still being written is simply absent from the menu.
            if exc.name != module_name:
                raise


class OneLineErrorParser(argparse.ArgumentParser):
    """Bad flags are one line (argparse would print the whole usage first) and exit code 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="rnnprof",
        description="Run, instrument and explain multi-device data-parallel training: any TensorFlow graph or PyTorch "
                    "script, and traces (Kineto, TF timelines, xplanes) made elsewhere.",
    )
    parser.add_argument("--version", action="version", version=f"rnnprof {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for command in _available_commands():
        sub = subparsers.add_parser(command.NAME, help=command.HELP, description=command.HELP)
        sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                         help="show tracebacks for errors")
        command.add_arguments(sub)
        sub.set_defaults(run=command.run)
    return parser


def main(argv: Sequence[str] | None = None, console: Console | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
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
    sys.exit(main())
