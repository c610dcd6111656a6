"""rnnprof memory: each device's peak memory, what was live then, growth per step and imbalance across devices."""

from __future__ import annotations

import argparse

from rich.console import Console

from rnnprof import limits
from rnnprof.analyzers.memory import analyze_memory, has_memory
from rnnprof.commands import left_out_notes, step_flags
from rnnprof.commands.flags import INPUT
from rnnprof.errors import InputError, UsageError
from rnnprof.reports.charts import check_plot_path
from rnnprof.reports.memory import memory_chart, render_memory
from rnnprof.reports.results.memory import MemoryResult
from rnnprof.rundir.manifest import run_notes
from rnnprof.traces.rank_folder import job_notes
from rnnprof.traces import load_events

NO_MEMORY = ("holds no allocator records ([memory] events)",
             "a PyTorch trace recorded with profile_memory=True, as rnnprof trace --framework torch records")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar=INPUT,
                        help="a trace file or run directory; several files (one Kineto trace per rank) or a folder "
                             "of rank files are merged, each rank's devices apart")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout instead of tables")
    step_flags.add_arguments(parser)
    parser.add_argument("--plot", metavar="FILE", help="also write each device's memory over time, stacked by "
                                                       "category, to FILE, .png or .svg")
    limits.add_argument(parser)


def run(args: argparse.Namespace, console: Console) -> int:
    plot = check_plot_path(args.plot)
    result = analyze(args)
    result.render(console, args.json, lambda: render_memory(result.report, console), plot,
                  lambda: memory_chart(result.report))
    return 0


def analyze(args: argparse.Namespace) -> MemoryResult:
    """memory's result for ``args``: what the command renders and ``rnnprof.open(...).memory()`` gives."""
    notes = run_notes(args.paths)
    table = load_events(args.paths[0]) if len(args.paths) == 1 else load_events(args.paths)
    if not has_memory(table):
        raise InputError(", ".join(args.paths), *NO_MEMORY)
    selected = step_flags.select(table, args)
    chosen = step_flags.selection(args)
    report = analyze_memory(table, steps=selected.steps() if chosen.active else None,
                            step_selection=chosen.describe() if chosen.active else "")
    if not report.devices:
        raise UsageError(f"{report.steps} selects no step with allocator records ([memory] events)")
    notes = [*notes, *job_notes(table), *left_out_notes.notes(args, table)]
    return MemoryResult(tuple(notes), report, left_out_notes.counts(table))
