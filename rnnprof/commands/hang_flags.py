"""The hang watch's flags, shared by the commands that run a job (``trace`` and ``watch``): ``--hang-after`` and
``--on-hang`` become a ``recording.hang_watch.HangOptions`` (docs/commands/hang.md)."""

from __future__ import annotations

import argparse
import sys

from rnnprof.recording.hang_watch import HangOptions
from rnnprof.training.exposure import parse_duration


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(group) -> None:
    """The two flags, added to ``group`` (a parser or an argument group)."""
    group.add_argument("--hang-after", metavar="DURATION", type=_duration, default=None,
                       help="take the job as hung when no rank finishes a step for this long (90s, 5m); default: "
                            "10x the longest step so far, at least 5m (15m before the first step)")
    group.add_argument("--on-hang", choices=("stop", "wait"), default="stop",
                       help="a hung job: stop it after saving its stacks and verdict, or leave it running "
                            "(default: %(default)s)")


def hang_options(args: argparse.Namespace, command: str) -> HangOptions:
    """The flags' ``HangOptions``; what the watch notes is said on stderr as ``rnnprof COMMAND: ...``."""
    return HangOptions(after=args.hang_after, stop=args.on_hang == "stop",
                       on_note=lambda text: print(f"rnnprof {command}: {text}", file=sys.stderr, flush=True))
