"""rnnprof critical-path: the chain of events across devices and ranks that sets each step's time."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from rnnprof import limits
from rnnprof.commands import job_flags, left_out_notes, step_flags
from rnnprof.commands.flags import INPUT, check_comm_patterns
from rnnprof.errors import InputError, UsageError
from rnnprof.analyzers.critical_path import analyze_critical_path
from rnnprof.inputs.dependencies import read_dependencies
from rnnprof.reports.critical_path import overlay_trace, render_table
from rnnprof.reports.results.critical_path import CriticalPathResult
from rnnprof.rundir.manifest import run_notes
from rnnprof.rundir.writer import atomic_write_json
from rnnprof.traces import load_events
from rnnprof.traces.rank_folder import job_notes
from rnnprof.job.critical_path import job_critical_path



def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar=INPUT,
                        help="a run directory or trace file; several Kineto files (one per rank) are joined "
                             "through their collectives")
    parser.add_argument("--step", type=int, metavar="N",
                        help="only step N (default: every step of the input, or of the step selection)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout instead of tables")
    parser.add_argument("--links", action="store_true",
                        help="also print every step's path link by link, its shares and all its what-ifs (without "
                             "it: the steps, and the median step's shares, top ops and what-ifs)")
    parser.add_argument("--overlay", metavar="FILE",
                        help="write the path as a Chrome trace to FILE, a new file (without it, no overlay is written: "
                             "an analysis never writes into what it reads)")
    parser.add_argument("--comm-pattern", action="append", default=[], metavar="REGEX",
                        help="also count events whose name or op type matches REGEX as communication (repeatable)")
    step_flags.add_arguments(parser)
    job_flags.add_arguments(parser)
    limits.add_argument(parser)


def _overlay_path(args: argparse.Namespace) -> Path | None:
    if args.overlay:
        path = Path(args.overlay)
        if path.exists():
            raise UsageError(f"--overlay {args.overlay}: the file exists; name a new file (it is never overwritten)")
        if not path.parent.is_dir():
            raise UsageError(f"--overlay {args.overlay}: no such directory {path.parent}")
        return path
    return None


def _steps(args: argparse.Namespace, known) -> list[int] | None:
    """The steps to analyse of ``known`` (the input's steps, sorted): ``--step``, or the step selection's."""
    steps = step_flags.chosen(known, args)
    if args.step is not None and args.step not in steps:
        raise InputError(", ".join(args.paths), f"has no step {args.step}",
                         f"one of its steps: {', '.join(map(str, steps))}" if len(steps)
                         else "a trace with step markers for --step (this one is taken whole)")
    return [args.step] if args.step is not None else list(steps) if len(steps) else None


def _analyze(args: argparse.Namespace):
    """``(report, notes, left_out counts)``: a whole job's rank files a rank per worker, else one table."""
    dependencies = read_dependencies(args.paths)
    job = job_flags.rank_job(args.paths)
    if job is not None:
        report, notes, left_out = job_flags.run_job(job_critical_path, job, args, comm_patterns=args.comm_pattern,
                                                    dependencies=dependencies,
                                                    choose=lambda known: _steps(args, known))
        return report, [*notes, *left_out_notes.notes(args, left_out)], left_out_notes.counts(left_out)
    job_flags.refuse_job_options(args)
    table = load_events(args.paths[0] if len(args.paths) == 1 else args.paths)
    notes = [*job_notes(table), *left_out_notes.notes(args, table)]
    # The selection picks the steps analysed; the table stays whole, so a step's window still starts where the
    # previous step's work ends (a GPU-bound step's first kernels queue behind the previous step's).
    report = analyze_critical_path(table, dependencies, steps=_steps(args, table.steps()),
                                   comm_patterns=args.comm_pattern)
    return report, notes, left_out_notes.counts(table)


def run(args: argparse.Namespace, console: Console) -> int:
    result = analyze(args)
    if result.overlay is not None:
        atomic_write_json(Path(result.overlay), overlay_trace(result.report))
    result.render(console, args.json, lambda: render_table(result.report, console, result.overlay, links=args.links))
    return 0


def analyze(args: argparse.Namespace) -> CriticalPathResult:
    """critical-path's result for ``args`` (the overlay's file named, not written): what the command renders and
    ``rnnprof.open(...).critical_path()`` gives."""
    check_comm_patterns(args.comm_pattern)
    overlay = _overlay_path(args)
    notes = run_notes(args.paths)
    report, more_notes, left_out = _analyze(args)
    notes += more_notes
    if not report.steps:
        raise InputError(", ".join(args.paths), "has no event on a device in the chosen steps",
                         "a trace of device ops or kernels")
    return CriticalPathResult(tuple(notes), report, left_out, str(overlay) if overlay is not None else None)
