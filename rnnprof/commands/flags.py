"""Flags every command shares: number types that refuse bad values in argparse's one-line error, the one
metavar of the paths a command reads (``INPUT``) and comma lists of values."""

from __future__ import annotations

import argparse
import math
import re

from rnnprof.errors import UsageError

INPUT = "INPUT"  # the metavar of the paths a command reads (traces, run directories, sweeps)


def add_script_argument(parser: argparse.ArgumentParser) -> None:
    """What follows the flags: the user's own command (``-- python train.py ...``, ``-- torchrun ...``), unparsed."""
    parser.add_argument("script", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def script_command(args: argparse.Namespace) -> list[str]:
    """The user's command ``add_script_argument`` kept, without the ``--`` before it."""
    command = list(args.script or [])
    return command[1:] if command and command[0] == "--" else command


def _number_in(minimum, maximum=None, kind=int, what="a whole number"):
    """An argparse type: ``kind`` parsed from text, refused outside [minimum, maximum] or not finite."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        if value < minimum or (maximum is not None and value > maximum):
            bound = f"between {minimum} and {maximum}" if maximum is not None else f"of at least {minimum}"
            raise argparse.ArgumentTypeError(f"expected a number {bound}, got {value}")
        return value

    return parse


positive_int = _number_in(1)
non_negative_int = _number_in(0)
non_negative_seconds = _number_in(0, kind=float, what="a number of seconds")
non_negative_us = _number_in(0, kind=float, what="a number of microseconds")
percentage = _number_in(0, 100, kind=float, what="a percentage")
positive_float = _number_in(1e-12, kind=float, what="a positive number")
dropout_rate = _number_in(0, 0.99, kind=float, what="a dropout rate")


def parse_int_list(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{flag} takes comma-separated whole numbers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise UsageError(f"{flag} takes device counts of at least 1, got {text!r}")
    return values


def parse_choice_list(text: str, flag: str, choices: tuple[str, ...]) -> list[str]:
    values = [v.strip() for v in str(text).split(",") if v.strip()]
    bad = [v for v in values if v not in choices]
    if not values or bad:
        raise UsageError(f"{flag}: unknown value {', '.join(bad) or repr(text)} (expected one of {', '.join(choices)})")
    return values


def check_comm_patterns(patterns: list[str]) -> None:
    """Refuse a ``--comm-pattern`` that is no regular expression."""
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise UsageError(f"--comm-pattern {pattern!r} is not a valid regular expression: {exc}") from None


def add_out_arguments(parser: argparse.ArgumentParser, required_for: str):
    """A recording command's ``--out`` and ``--force`` (``required_for``: what cannot do without ``--out``), in
    its "output" group, which it returns for the command's own flags."""
    out = parser.add_argument_group("output")
    out.add_argument("--out", default=None, help=f"run directory to create; required for {required_for} (default: "
                                                 "a fresh runs/<model>-<time> for a built-in workload)")
    out.add_argument("--force", action="store_true",
                     help="replace the run in a non-empty --out (only rnnprof's own files are removed)")
    return out
