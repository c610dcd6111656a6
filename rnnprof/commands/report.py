"""rnnprof report: one self-contained HTML file with every analysis of a run, trace files or a saved sweep."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from rich.console import Console
from rich.text import Text

from rnnprof import limits
from rnnprof.commands import audit_inputs, job_flags, left_out_notes, step_flags
from rnnprof.commands.flags import INPUT
from rnnprof.errors import UsageError
from rnnprof.paths import shown
from rnnprof.analyzers.audit import AuditResult
from rnnprof.analyzers.run_report import analyze_run
from rnnprof.commands.roofline import ONE_PROCESS, for_report as roofline_for_report
from rnnprof.inputs.dependencies import read_dependencies
from rnnprof.inputs.read import job_graphs, read_inputs
from rnnprof.job.report import job_run_report
from rnnprof.reports.layout import render_notes
from rnnprof.reports.run_page import run_page
from rnnprof.reports.units import fmt_mb
from rnnprof.reports.sweep_page import sweep_page
from rnnprof.reports.watch_page import watch_page
from rnnprof.inputs.watched import is_watched_run, watched_summary
from rnnprof.rundir.manifest import run_notes
from rnnprof.rundir.sweep import is_sweep_dir, read_sweep
from rnnprof.rundir.writer import atomic_write_bytes
from rnnprof.traces.rank_folder import job_notes



def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar=INPUT,
                        help="a run directory, trace files (several: merged, e.g. one Kineto file per rank), "
                             "or a folder saved by rnnprof scale --out")
    parser.add_argument("-o", "--output", required=True, metavar="FILE", help="the HTML file to write")
    parser.add_argument("--force", action="store_true", help="replace FILE if it exists")
    step_flags.add_arguments(parser)
    limits.add_argument(parser)
    job_flags.add_arguments(parser)


def _check_output(path: str, force: bool) -> Path:
    out = Path(path)
    if out.is_dir():
        raise UsageError(f"-o {path} is a directory; expected the name of the HTML file to write")
    if out.exists() and not force:
        raise UsageError(f"-o {path} exists; pass --force to replace it or choose another file name")
    if not out.parent.is_dir():
        raise UsageError(f"-o {path}: the folder {out.parent} does not exist")
    return out


def _name(paths: list[str]) -> str:
    return ", ".join(Path(os.path.abspath(p)).name or str(p) for p in paths)


def _findings(report) -> tuple[AuditResult | None, str]:
    """The report's audit, for the page's Findings section; ``(None, why)`` when the input holds nothing to
    audit."""
    if report.findings is None:
        return None, report.findings_reason or "the input holds neither graphs nor trace events"
    return report.findings, ""


def run(args: argparse.Namespace, console: Console) -> int:
    out = _check_output(args.output, args.force)
    name = _name(args.paths)
    if len(args.paths) == 1 and is_watched_run(args.paths[0]):
        job_flags.refuse_job_options(args)
        if step_flags.selection(args).active:
            raise UsageError(f"{step_flags.selection(args).describe()} selects steps of a trace's events; "
                             f"{args.paths[0]} is a watched job: report one of its windows for that")
        page = watch_page(watched_summary(args.paths[0]), name, run_notes(args.paths))
    elif len(args.paths) == 1 and is_sweep_dir(args.paths[0]):
        job_flags.refuse_job_options(args)
        if step_flags.selection(args).active:
            raise UsageError(f"{step_flags.selection(args).describe()} selects steps of a trace's events; "
                             f"{args.paths[0]} is a saved sweep (give a run directory or trace files)")
        page = sweep_page(read_sweep(args.paths[0]), name)
    else:
        page = _run_page(args.paths, name, args)
    data = page.encode("utf-8")
    atomic_write_bytes(out, data)
    console.print(Text(f"wrote {out} ({fmt_mb(len(data))} MB)"))
    return 0


def _run_page(paths: list[str], name: str, args: argparse.Namespace) -> str:
    job = job_flags.ranks_of(paths)
    if job is not None:
        return _job_page(paths, name, args, *job)
    job_flags.refuse_job_options(args)
    notes = run_notes(paths)
    inputs = read_inputs(paths)
    notes = [*notes, *job_notes(inputs.events), *left_out_notes.notes(args, inputs.events)]
    graphs = inputs.graph_set
    events = step_flags.select(inputs.events, args)
    audit = audit_inputs.audit_input(inputs, events)
    audit_reason = "" if audit is not None else audit_inputs.NOTHING_TO_AUDIT
    chosen = step_flags.selection(args)
    if chosen.active:
        notes = [*notes, f"steps selected by {chosen.describe()}: {', '.join(map(str, events.steps())) or 'none'}"]
    roofline, roofline_reason = roofline_for_report(paths, inputs.events, events, args, notes)
    report = analyze_run(", ".join(map(shown, paths)), events, inputs.events_reason,
                         user_graph=graphs.user if graphs else None, runtime_graph=graphs.runtime if graphs else None,
                         user_reason=inputs.user_graph_reason, runtime_reason=inputs.runtime_graph_reason,
                         audit_input=audit, audit_reason=audit_reason, manifest=inputs.manifest,
                         dependencies=read_dependencies(paths) if events is not None else None,
                         roofline=roofline, roofline_reason=roofline_reason)
    render_notes(notes)
    findings, findings_reason = _findings(report)
    return run_page(report, name, notes, findings, findings_reason, left_out_notes.counts(events))


def _job_page(paths: list[str], name: str, args: argparse.Namespace, folder, manifest) -> str:
    """The page of a job's rank files, read a rank per worker (``job.report``)."""
    graphs = job_graphs(paths)
    chosen = step_flags.selection(args)
    (report, steps), ran, left_out = job_flags.run_job(
        job_run_report, folder, args, label=", ".join(map(shown, paths)), manifest=manifest,
        dependencies=read_dependencies(paths), selection=chosen, user_reason=graphs.user_graph_reason,
        runtime_reason=graphs.runtime_graph_reason, roofline_reason=ONE_PROCESS)
    notes = [*run_notes(paths), *ran, *left_out_notes.notes(args, left_out)]
    if chosen.active:
        notes = [*notes, f"steps selected by {chosen.describe()}: {', '.join(map(str, steps)) or 'none'}"]
    render_notes(notes)
    findings, findings_reason = _findings(report)
    return run_page(report, name, notes, findings, findings_reason, left_out_notes.counts(left_out))
