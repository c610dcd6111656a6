"""A command's options from Python keywords: read by the command's own parser, so that a value the command line
refuses is refused here with the same one-line message (as a ``UsageError``), and an option left out takes the
command's default."""

from __future__ import annotations

import argparse
from typing import Sequence

from rnnprof import limits
from rnnprof.cli import load_command
from rnnprof.errors import UsageError


class _Parser(argparse.ArgumentParser):
    """A command's parser whose errors are raised, not printed."""

    def error(self, message: str):
        raise UsageError(message)


def command_args(command: str, paths: Sequence[str], **options) -> argparse.Namespace:
    """``rnnprof <command> PATHS ...`` parsed, one flag per option given (None: left out): ``True`` is a flag
    without value, a list or tuple a repeated flag (or several values where the flag takes several), anything
    else the flag's value as text. An option the command has no flag for is a ``TypeError``."""
    parser = _Parser(prog=f"rnnprof {command}", add_help=False)
    load_command(command).add_arguments(parser)
    flags = {a.dest: a for a in parser._actions if a.option_strings}
    argv = [str(p) for p in paths]
    for name, value in options.items():
        if value is None:  # left out: the command's default
            continue
        action = flags.get(name)
        if action is None:
            raise TypeError(f"{command}() got an unexpected keyword argument {name!r}")
        argv += _flag(action, value)
    args = parser.parse_args(argv)
    args.command, args.debug = command, False
    limits.configure(args)
    return args


def _flag(action: argparse.Action, value) -> list[str]:
    """The words of ``value`` given to ``action``'s flag."""
    flag = action.option_strings[-1]
    if value is None or value is False:
        return []
    if value is True:
        return [flag]
    if isinstance(value, (list, tuple)):
        if action.nargs in ("+", "*") or isinstance(action.nargs, int):
            return [flag, *map(str, value)]
        return [word for item in value for word in (flag, str(item))]
    return [f"{flag}={value}"]
