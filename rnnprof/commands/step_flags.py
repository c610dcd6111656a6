"""The step-selection flags shared by the commands that analyse a trace's events.

``--steps FIRST:LAST``, ``--skip-first N`` and ``--drop-last`` become a
``rnnprof.analyzers.steps.StepSelection``; ``select(table, args)`` applies it, turning a
selection that leaves no step into a one-line usage error.
"""

from __future__ import annotations

import argparse

from rnnprof.commands.flags import non_negative_int
from rnnprof.errors import UsageError
from rnnprof.analyzers.steps import StepSelection, StepSelectionError, chosen_steps, parse_range, select_steps


def _step_range(text: str) -> tuple[int | None, int | None]:
    try:
        return parse_range(text)
    except StepSelectionError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("step selection (applied to the trace's events before the analysis)")
    group.add_argument("--steps", type=_step_range, metavar="FIRST:LAST",
                       help="only the steps FIRST to LAST, inclusive, in the trace's own step numbers "
                            "(e.g. 1009:1013; FIRST: or :LAST leave an end open; N is one step); "
                            "GPU work belongs to the step of the runtime call that launched it")
    group.add_argument("--skip-first", type=non_negative_int, default=0, metavar="N",
                       help="leave out the first N of the (selected) steps, e.g. warm-up (default: %(default)s)")
    group.add_argument("--drop-last", action="store_true",
                       help="leave out the last (selected) step, often cut short by the profiler; "
                            "with no other selection this is what HTA counts by default")


def selection(args: argparse.Namespace):
    first, last = args.steps if args.steps is not None else (None, None)
    return StepSelection(first=first, last=last, skip_first=args.skip_first, drop_last=args.drop_last)


def select(table, args: argparse.Namespace):
    """``table`` (an EventTable, or None) restricted to the selected steps."""

    chosen = selection(args)
    if not chosen.active:
        return table
    if table is None:
        raise UsageError(f"{chosen.describe()} selects steps of a trace's events, and the input has no trace")
    try:
        return select_steps(table, chosen)
    except StepSelectionError as exc:
        raise UsageError(str(exc)) from None


def chosen(steps, args: argparse.Namespace):
    """The step numbers the selection keeps of ``steps`` (sorted), as ``select(table, args).steps()`` gives them
    for a table with those steps."""
    try:
        return chosen_steps(steps, selection(args))
    except StepSelectionError as exc:
        raise UsageError(str(exc)) from None
