"""rnnprof count-ops: graph operators (user and runtime graphs) and kernel invocations per device and step."""

from __future__ import annotations

import argparse

from rich.console import Console
from rnnprof import limits
from rnnprof.commands import job_flags
from rnnprof.commands import left_out_notes, step_flags
from rnnprof.commands.flags import INPUT, non_negative_us
from rnnprof.analyzers.opcount import compare, count_ops, with_kernels
from rnnprof.inputs.read import MERGED_TRACES, read_inputs
from rnnprof.reports import opcount as report
from rnnprof.reports.charts import check_plot_path, opcount_chart
from rnnprof.reports.results.count_ops import CountOpsResult
from rnnprof.rundir.manifest import run_notes
from rnnprof.job.count_ops import job_kernels



def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar=INPUT,
                        help="run directory, trace file (several: merged, e.g. one Kineto file per rank), "
                             "GraphDef or RunMetadata")
    parser.add_argument("--vs", metavar="OTHER", help="a second input; prints INPUT ÷ OTHER ratios")
    parser.add_argument("--by", choices=("device", "type"), default="device",
                        help="break counts down by device (default) or by op type")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout instead of tables")
    parser.add_argument("--short-kernel-us", type=non_negative_us, default=10.0, metavar="US",
                        help="kernel launch statistics count kernels shorter than US as short (default: %(default)g)")
    step_flags.add_arguments(parser)
    parser.add_argument("--plot", metavar="FILE", help="also write the chart of kernels per device per step (graph ops "
                                                       "per device without a trace) to FILE, .png or .svg")
    limits.add_argument(parser)
    job_flags.add_arguments(parser)


def analyze_input(paths: list[str], args: argparse.Namespace | None = None, notes: list[str] | None = None,
                  left_out: list | None = None):
    """Count what the input holds (graphs and/or events, the events of the selected steps), saying why a part
    is missing; a job's rank files are counted one rank per worker process (``args.jobs``, ``args.scheduler``).
    What the loaders left out for impossible times is appended to ``left_out`` (tables' metadata)."""
    import dataclasses

    notes = [] if notes is None else notes

    job = job_flags.rank_job(paths) if args is not None else None
    if job is not None:
        (kernels, launches, copies), job_notes, dropped = job_flags.run_job(job_kernels, job, args, selection=step_flags.selection(args),
                                                     short_kernel_us=args.short_kernel_us)
        notes += job_notes
        if left_out is not None:
            left_out.append(dropped)
        counts = with_kernels(count_ops(", ".join(map(str, paths)), None, None, None, user_reason=MERGED_TRACES,
                                        runtime_reason=MERGED_TRACES), kernels, launches, source_format="kineto")
        return dataclasses.replace(counts, copies=copies)
    inputs = read_inputs(paths)
    if left_out is not None:
        left_out.append(inputs.events)
    graphs = inputs.graph_set
    events = step_flags.select(inputs.events, args) if args is not None else inputs.events
    extra = {"short_kernel_us": args.short_kernel_us} if args is not None else {}
    return count_ops(inputs.label, events, graphs.user if graphs else None, graphs.runtime if graphs else None,
                     user_reason=inputs.user_graph_reason, runtime_reason=inputs.runtime_graph_reason,
                     events_reason=inputs.events_reason, **extra)


def run(args: argparse.Namespace, console: Console) -> int:
    plot = check_plot_path(args.plot)
    result = analyze(args)
    result.render(console, args.json, lambda: report.render_comparison(result.comparison, by=args.by, console=console)
                  if result.comparison is not None else report.render_table(result.report, by=args.by, console=console),
                  plot, lambda: opcount_chart(result.report))
    return 0


def analyze(args: argparse.Namespace) -> CountOpsResult:
    """count-ops' result for ``args`` (with ``--vs``, the comparison too): what the command renders and
    ``rnnprof.open(...).count_ops()`` gives."""
    notes = run_notes([*args.paths, *([args.vs] if args.vs else [])])
    if job_flags.rank_job(args.paths) is None and (not args.vs or job_flags.rank_job([args.vs]) is None):
        job_flags.refuse_job_options(args)
    dropped: list = []
    result = analyze_input(args.paths, args, notes, dropped)
    comparison = compare(result, analyze_input([args.vs], args, notes, dropped)) if args.vs else None
    notes += left_out_notes.notes(args, *dropped)
    return CountOpsResult(tuple(notes), result, left_out_notes.counts(*dropped), comparison)
