"""rnnprof diff: what changed from one run, trace or graph (A) to another (B)."""

from __future__ import annotations

import argparse

from rich.console import Console

from rnnprof import limits
from rnnprof.commands import left_out_notes, step_flags
from rnnprof.commands.flags import non_negative_int
from rnnprof.errors import UsageError
from rnnprof.analyzers.diff import IncompatibleSides, Side, diff
from rnnprof.commands.roofline import for_report as roofline_of
from rnnprof.inputs.read import read_inputs
from rnnprof.reports import diff as report
from rnnprof.reports.results.diff import DiffResult
from rnnprof.rundir.manifest import run_notes
from rnnprof.traces.rank_folder import job_notes


_SIDES = "give two inputs, A B, or several files per side with --a FILE... --b FILE..."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", metavar="A B",
                        help="the reference (A) and the input compared with it (B): each a run directory, a trace "
                             "file, a GraphDef or a RunMetadata")
    parser.add_argument("--a", nargs="+", metavar="FILE", default=None,
                        help="side A as several trace files, merged (e.g. one Kineto file per rank)")
    parser.add_argument("--b", nargs="+", metavar="FILE", default=None,
                        help="side B as several trace files, merged")
    parser.add_argument("--top", type=non_negative_int, default=None, metavar="N",
                        help="rows per section and list (default: 6, with --all or --json 10; 0: all)")
    parser.add_argument("--all", action="store_true", dest="every",
                        help="every section and list (appeared, vanished, by op type, the copies table, the counts "
                             "that did not change) and the definitions; without it, what fits a screen")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout instead of tables")
    step_flags.add_arguments(parser)  # each side's trace events, on its own step numbers
    limits.add_argument(parser)


def sides_of(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The paths of side A and side B, from ``A B`` or ``--a ... --b ...``."""
    if args.a is None and args.b is None:
        if len(args.paths) != 2:
            raise UsageError(f"{len(args.paths)} input(s) given; {_SIDES}")
        return [args.paths[0]], [args.paths[1]]
    if args.paths:
        raise UsageError(f"positional inputs and --a/--b cannot be combined; {_SIDES}")
    if args.a is None or args.b is None:
        raise UsageError(f"--{'b' if args.a is not None else 'a'} is missing; {_SIDES}")
    return list(args.a), list(args.b)


def read_side(paths: list[str], args: argparse.Namespace | None = None):
    """A ``diff.Side`` from what ``read_inputs`` reads of ``paths`` (its events restricted to the steps
    ``args`` select, when given)."""

    inputs = read_inputs(paths)
    graphs = inputs.graph_set
    events = step_flags.select(inputs.events, args) if args is not None else inputs.events
    roofline, roofline_reason = roofline_of(paths, inputs.events, events, args, [], with_peaks=False)
    return Side(label=inputs.label, events=events, events_reason=inputs.events_reason,
                user_graph=graphs.user if graphs else None, user_reason=inputs.user_graph_reason,
                runtime_graph=graphs.runtime if graphs else None, runtime_reason=inputs.runtime_graph_reason,
                graph=inputs.graph, manifest=inputs.manifest, roofline=roofline, roofline_reason=roofline_reason)


def run(args: argparse.Namespace, console: Console) -> int:
    result = analyze(args)
    result.render(console, args.json,
                  lambda: report.render_table(result.report, top=args.top, console=console, every=args.every))
    return 0


def analyze(args: argparse.Namespace) -> DiffResult:
    """diff's result for ``args``: what the command renders and ``rnnprof.open(a).diff(b)`` gives."""
    paths_a, paths_b = sides_of(args)
    notes = run_notes([*paths_a, *paths_b])
    side_a, side_b = read_side(paths_a, args), read_side(paths_b, args)
    notes += [*job_notes(side_a.events), *job_notes(side_b.events), *left_out_notes.notes(args, side_a.events),
              *left_out_notes.notes(args, side_b.events)]
    try:
        result = diff(side_a, side_b)
    except IncompatibleSides as exc:
        raise UsageError(f"{exc} (expected two inputs of one kind: two traces, two graphs or two run "
                         f"directories)") from None
    left_out = {"a": left_out_notes.counts(side_a.events), "b": left_out_notes.counts(side_b.events)}
    return DiffResult(tuple(notes), result, left_out, args.top)
