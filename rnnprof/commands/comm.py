"""rnnprof comm: communication vs compute vs idle per device and step, and stragglers."""

from __future__ import annotations

import argparse
from typing import NamedTuple

from rich.console import Console

from rnnprof import limits
from rnnprof.commands import job_flags, left_out_notes, step_flags
from rnnprof.commands.flags import INPUT, check_comm_patterns, non_negative_us
from rnnprof.errors import InputError, UsageError
from rnnprof.analyzers.comm import analyze_comm
from rnnprof.analyzers.tasks import analyze_tasks
from rnnprof.reports.charts import check_plot_path, comm_chart
from rnnprof.reports.comm import render_table, render_tasks
from rnnprof.reports.results.comm import CommResult
from rnnprof.rundir.manifest import run_notes
from rnnprof.traces import load_aligned, load_events
from rnnprof.job.comm import job_comm



def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar=INPUT,
                        help="a trace file or run directory; several files (e.g. one Kineto trace per rank) are "
                             "merged; a folder of Kineto rank files is a whole job, one rank per worker process")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout instead of tables")
    parser.add_argument("--comm-pattern", action="append", default=[], metavar="REGEX",
                        help="also count events whose name or op type matches REGEX as communication (repeatable)")
    parser.add_argument("--per-step", action="store_true", help="also break the figures down per step")
    parser.add_argument("--align", choices=("none", "start", "collectives"), default="none",
                        help="how several files are put on one clock before merging: none (they share one, as the "
                             "ranks of one host do; default), start (each starts where the first does), collectives "
                             "(offsets measured on the end times of collectives matched across the files)")
    parser.add_argument("--kernel-wait-us", type=non_negative_us,
                        default=30.0, metavar="US",
                        help="idle gaps between kernels shorter than US (and not waiting on a launch) are kernel "
                             "wait (default: %(default)g, HTA's default in effect)")
    step_flags.add_arguments(parser)
    parser.add_argument("--plot", metavar="FILE", help="also write the chart of time per device (and per step with "
                                                       "--per-step) to FILE, .png or .svg")
    limits.add_argument(parser)
    job_flags.add_arguments(parser)


def run(args: argparse.Namespace, console: Console) -> int:
    plot = check_plot_path(args.plot)
    result = analyze(args)
    result.render(console, args.json, lambda: _tables(result, args, console), plot,
                  lambda: comm_chart(result.report, per_step=args.per_step))
    return 0


def _tables(result: CommResult, args: argparse.Namespace, console: Console) -> None:
    render_table(result.report, per_step=args.per_step, console=console)
    render_tasks(result.tasks, console)


def analyze(args: argparse.Namespace) -> CommResult:
    """comm's result for ``args`` (its input's notes, the analysis, what the loaders left out): what the command
    renders and ``rnnprof.open(...).comm()`` gives."""
    check_comm_patterns(args.comm_pattern)
    notes = run_notes(args.paths)
    analysis = _analyze(args)
    _require_devices(analysis.report, args.paths)
    notes = [*notes, *analysis.notes, *left_out_notes.notes(args, analysis.left_out)]
    return CommResult(tuple(notes), analysis.report, analysis.tasks, left_out_notes.counts(analysis.left_out),
                      per_step=args.per_step)


class _Analysis(NamedTuple):
    """What comm found in its input."""

    report: object  # analyzers.comm.CommReport
    tasks: object  # per TF cluster task (analyzers.tasks); None for a whole job (Kineto rank files are no cluster)
    left_out: object  # what the loaders left out: the table as loaded, or a whole job's ranks' metadata merged
    notes: list[str]  # of a whole job's analysis


def _analyze(args: argparse.Namespace) -> _Analysis:
    """comm's analysis of ``args.paths``: a whole job's rank files one rank per worker (with ``--align none``),
    anything else merged into one table."""
    job = job_flags.rank_job(args.paths)
    selection = step_flags.selection(args)
    if job is not None and args.align == "none":
        report, job_notes, left_out = job_flags.run_job(job_comm, job, args, comm_patterns=args.comm_pattern,
                                                   kernel_wait_us=args.kernel_wait_us, selection=selection)
        return _Analysis(report, None, left_out, job_notes)
    job_flags.refuse_job_options(args, "" if job is None else f"--align {args.align}")
    paths = [str(f.path) for f in job.files] if job is not None else args.paths
    return _analyze_table(paths, args, selection)


def _analyze_table(paths: list[str], args: argparse.Namespace, selection) -> _Analysis:
    """comm's analysis of ``paths`` merged into one table, on the clock ``--align`` says."""

    loaded = load_events(paths[0]) if len(paths) == 1 else load_aligned(paths, args.align)
    table = step_flags.select(loaded, args)
    report = analyze_comm(table, args.comm_pattern, kernel_wait_us=args.kernel_wait_us,
                          step_selection=selection.describe())
    return _Analysis(report, analyze_tasks(table, args.comm_pattern), loaded, [])


def _require_devices(report, paths: list[str]) -> None:
    """Refuse input with no device activity: nothing for comm to split."""
    if report.devices:
        return
    problem = ("no device activity: every event is on the host (a CPU-only tf.profiler XSpace, for one, "
               "names no device for its ops)" if report.host_only
               else "no device activity (no kernels, memcpys or ops on a device)")
    raise InputError(", ".join(paths), problem,
                     "a trace of GPU streams or TF device ops, e.g. an rnnprof run directory")
