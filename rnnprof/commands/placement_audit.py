"""rnnprof placement-audit: did the graph run where it should, which ops are to blame, what it costs."""

from __future__ import annotations

import argparse

from rich.console import Console

from rnnprof import limits
from rnnprof.commands import audit_inputs, fail_on_flag, left_out_notes, step_flags
from rnnprof.commands.flags import INPUT, percentage
from rnnprof.analyzers.placement import audit_placement, configured_rules
from rnnprof.reports.layout import render_json, render_notes
from rnnprof.reports.placement import render_table, to_document
from rnnprof.rundir.manifest import run_notes
from rnnprof.traces.rank_folder import job_notes

FAIL_ON = ("error", "warning", "never")
DEFAULT_IMBALANCE_PERCENT = 20.0  # analyzers.placement.imbalance.WARNING_SPREAD; not imported so --help stays light


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar=INPUT,
                        help="one run: its run directory, trace files (any format rnnprof reads) and/or graph "
                             "files (GraphDef or RunMetadata, .pb/.pbtxt)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout instead of tables")
    fail_on_flag.add_arguments(parser, FAIL_ON)
    parser.add_argument("--imbalance-threshold", type=percentage, default=DEFAULT_IMBALANCE_PERCENT,
                        metavar="PERCENT",
                        help="PA004 flags steps whose busy-time spread across devices, (max - min) / max, is above "
                             "PERCENT (default: %(default)g)")
    step_flags.add_arguments(parser)
    limits.add_argument(parser)


def run(args: argparse.Namespace, console: Console) -> int:
    notes = run_notes(args.paths)
    rules = configured_rules(imbalance_threshold=args.imbalance_threshold / 100)
    given = audit_inputs.read_audit_input(args.paths, args)
    result = audit_placement(given, rules)
    notes += [*job_notes(given.events), *left_out_notes.notes(args, given.events)]
    render_notes(notes)
    if args.json:
        render_json({**to_document(result, list(args.paths), args.fail_on), "left_out": left_out_notes.counts(given.events)},
                    console, notes)
    else:
        render_table(result, list(args.paths), console)
    fail_on_flag.raise_if_failing(result, args.fail_on, lambda f: f.rule_id)
    return 0
