"""rnnprof pipeline: a pipeline's bubble, rank by rank, against its schedule's theory, and the stage that sets its
pace."""

from __future__ import annotations

import argparse

from rich.console import Console

from rnnprof import limits
from rnnprof.analyzers.pipeline import Given, analyze_pipeline
from rnnprof.commands import job_flags, left_out_notes, step_flags
from rnnprof.commands.flags import INPUT, positive_int
from rnnprof.errors import InputError
from rnnprof.events.names import PIPELINE_SCHEDULES
from rnnprof.job.pipeline import job_pipeline
from rnnprof.reports.charts import check_plot_path
from rnnprof.reports.pipeline import pipeline_chart, render_pipeline
from rnnprof.reports.results.pipeline import PipelineResult
from rnnprof.rundir.manifest import run_notes
from rnnprof.traces import load_events
from rnnprof.traces.rank_folder import job_notes

NO_PIPELINE = ("holds no pipeline: no two ranks send to each other and work in the same steps",
               "the Kineto traces of a pipeline's ranks (torch.distributed.pipelining), e.g. a run directory of "
               "rnnprof trace --framework torch --parallel pp")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar=INPUT,
                        help="a run directory, one Kineto trace per rank, or a folder of rank files (a whole job, "
                             "one rank per worker process)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout instead of tables")
    schedule = parser.add_argument_group("the schedule, where the run's manifest does not record it (the trace "
                                         "tells what is not given, and the output says so)")
    schedule.add_argument("--schedule", choices=PIPELINE_SCHEDULES, default=None,
                          help="the schedule the pipeline ran (default: the manifest's, else told by the trace)")
    schedule.add_argument("--micro-batches", type=positive_int, default=None, metavar="M",
                          help="micro-batches per step (default: the manifest's, else told by the trace)")
    schedule.add_argument("--stages-per-rank", type=positive_int, default=None, metavar="V",
                          help="stages each rank runs, interleaved schedules (default: the manifest's, else told "
                               "by the trace)")
    step_flags.add_arguments(parser)
    parser.add_argument("--plot", metavar="FILE", help="also write the stage x time chart of the step whose bubble "
                                                       "is the median to FILE, .png or .svg")
    limits.add_argument(parser)
    job_flags.add_arguments(parser)


def run(args: argparse.Namespace, console: Console) -> int:
    plot = check_plot_path(args.plot)
    result = analyze(args)
    result.render(console, args.json, lambda: render_pipeline(result.report, console), plot,
                  lambda: pipeline_chart(result.report))
    return 0


def analyze(args: argparse.Namespace) -> PipelineResult:
    """pipeline's result for ``args``: what the command renders and ``rnnprof.open(...).pipeline()`` gives."""
    given = Given(args.schedule, args.micro_batches, args.stages_per_rank)
    notes = run_notes(args.paths)
    job = job_flags.rank_job(args.paths)
    if job is not None:
        report, job_said, left_out = job_flags.run_job(job_pipeline, job, args, given=given,
                                                       selection=step_flags.selection(args))
        notes = [*notes, *job_said]
    else:
        job_flags.refuse_job_options(args)
        left_out = load_events(args.paths[0]) if len(args.paths) == 1 else load_events(args.paths)
        report = analyze_pipeline(step_flags.select(left_out, args), given)
        notes = [*notes, *job_notes(left_out)]
    if report is None:
        raise InputError(", ".join(args.paths), *NO_PIPELINE)
    notes = [*notes, *report.notes, *left_out_notes.notes(args, left_out)]
    return PipelineResult(tuple(notes), report, left_out_notes.counts(left_out))
