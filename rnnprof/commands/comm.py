"""rnnprof comm: communication vs compute vs idle per device and step, and stragglers."""

from __future__ import annotations

import argparse
import re

from rich.console import Console

from rnnprof.errors import InputError, UsageError
from rnnprof import limits

NAME = "comm"
HELP = "communication vs compute vs idle time per device (and step), with stragglers"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="FILE_OR_RUN",
                        help="a trace file or run directory; several files (e.g. one Kineto trace per rank) are merged")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout instead of tables")
    parser.add_argument("--comm-pattern", action="append", default=[], metavar="REGEX",
                        help="also count events whose name or op type matches REGEX as communication (repeatable)")
    parser.add_argument("--per-step", action="store_true", help="also break the figures down per step")
    limits.add_argument(parser)


def run(args: argparse.Namespace, console: Console) -> int:
    from rnnprof.analyzers.comm import analyze_comm
    from rnnprof.analyzers.tasks import analyze_tasks
    from rnnprof.profiler.loaders import load_events
    from rnnprof.reports.comm import render_table, render_tasks, to_document
    from rnnprof.profiler.rundir.manifest import run_notes
    from rnnprof.reports.layout import render_json, render_notes

    for pattern in args.comm_pattern:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise UsageError(f"--comm-pattern {pattern!r} is not a valid regular expression: {exc}") from None

    notes = run_notes(args.paths)
    table = load_events(args.paths[0] if len(args.paths) == 1 else args.paths)
    report = analyze_comm(table, args.comm_pattern)
    tasks = analyze_tasks(table, args.comm_pattern)
    if not report.devices:
        problem = ("no device activity: every event is on the host (a CPU-only tf.profiler XSpace, for one, "
                   "names no device for its ops)" if report.host_only
                   else "no device activity (no kernels, memcpys or ops on a device)")
        raise InputError(", ".join(args.paths), problem,
                         "a trace of GPU streams or TF device ops, e.g. an rnnprof run directory")
    render_notes(notes)
    if args.json:
        document = to_document(report, per_step=args.per_step)
        if tasks.tasks:
            document.update(tasks.as_dict())
        render_json(document, console)
    else:
        render_table(report, per_step=args.per_step, console=console)
        render_tasks(tasks, console)
    return 0
