"""rnnprof audit: what to fix first, ranked by the step time each finding costs, judged against the run's jitter."""

from __future__ import annotations

import argparse

from rich.console import Console

from rnnprof import limits
from rnnprof.commands import audit_inputs, fail_on_flag, job_flags, left_out_notes, step_flags
from rnnprof.commands.flags import INPUT
from rnnprof.analyzers.audit import audit
from rnnprof.analyzers.replay.audit_savings import audit_replayer, replayed_savings
from rnnprof.inputs.dependencies import read_dependencies
from rnnprof.job.audit import job_audit
from rnnprof.reports.audit import render_text
from rnnprof.reports.results.audit import AuditFindings
from rnnprof.rundir.manifest import run_notes

FAIL_ON = ("error", "warning", "info", "never")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar=INPUT,
                        help="one run: its run directory, trace files (several Kineto files are the ranks of one "
                             "job, on their common clock), a folder of rank files, and/or graph files")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout instead of text")
    fail_on_flag.add_arguments(parser, FAIL_ON)
    step_flags.add_arguments(parser)
    limits.add_argument(parser)
    job_flags.add_arguments(parser)


def run(args: argparse.Namespace, console: Console) -> int:
    result = analyze(args)
    result.render(console, args.json, lambda: render_text(result.audit, list(args.paths), console))
    fail_on_flag.raise_if_failing(result.audit, args.fail_on, lambda f: f.rule)
    return 0


def analyze(args: argparse.Namespace) -> AuditFindings:
    """The audit of ``args.paths`` (savings replayed where the input has events), with its notes: what the command
    renders and ``rnnprof.open(...).audit()`` gives. A job's ranks (rank files, a PyTorch run directory's rank
    traces) are read a rank per worker."""
    job = job_flags.ranks_of(args.paths)
    if job is not None:
        return _job(args, *job)
    job_flags.refuse_job_options(args)
    paths = list(args.paths)
    notes = run_notes(args.paths)
    given = audit_inputs.read_audit_input(paths, args)
    result = audit(given)
    if given.events is not None and len(given.events):
        result = replayed_savings(result, audit_replayer(given.events, read_dependencies(paths), given.classes))
    notes += left_out_notes.notes(args, given.events)
    return AuditFindings(tuple(notes), result, left_out_notes.counts(given.events))


def _job(args: argparse.Namespace, folder, manifest) -> AuditFindings:
    """The audit of a job's rank files, a rank per worker (``job.audit``)."""
    paths = [str(f.path) for f in folder.files] if manifest is None else list(args.paths)
    result, notes, left_out = job_flags.run_job(job_audit, folder, args, manifest=manifest,
                                                dependencies=read_dependencies(paths),
                                                selection=step_flags.selection(args))
    notes = [*run_notes(args.paths), *notes, *left_out_notes.notes(args, left_out)]
    return AuditFindings(tuple(notes), result, left_out_notes.counts(left_out))
