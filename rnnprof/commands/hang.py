"""rnnprof hang: why a job hung, from its run directory or from flight-recorder dumps made elsewhere."""

from __future__ import annotations

import argparse

from rich.console import Console

from rnnprof import limits
from rnnprof.analyzers.hang import (analyze_cluster_hang, analyze_hang, analyze_process_hang,
                                    analyze_remote_cluster_hang)
from rnnprof.commands.flags import INPUT
from rnnprof.inputs.hang import read_hang_inputs
from rnnprof.reports.hang import render_hang
from rnnprof.reports.results.hang import HangResult


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar=INPUT,
                        help="a run directory `rnnprof trace` marked hung, or one flight-recorder dump per rank "
                             "(TORCH_FR_DUMP_TEMP_FILE files; the rank is the last number of each name) and "
                             "faulthandler stack files, each a .txt file")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout instead of text")
    limits.add_argument(parser)


def run(args: argparse.Namespace, console: Console) -> int:
    result = analyze(args)
    result.render(console, args.json, lambda: render_hang(result.verdict, console))
    return 0


def analyze(args: argparse.Namespace) -> HangResult:
    """hang's verdict on ``args.paths``: what the command renders and ``rnnprof.open(...).hang()`` gives."""
    given = read_hang_inputs(args.paths)
    if given.process:  # one TensorFlow process: where its main thread is stuck
        verdict = analyze_process_hang(given.stacks.get(0))
    elif given.remote:  # tasks started elsewhere: where the chief is stuck
        verdict = analyze_remote_cluster_hang(list(given.task_names.values()), given.chief)
    elif given.task_names:  # a TensorFlow cluster's tasks: stacks only, judged against where a serving task waits
        verdict = analyze_cluster_hang(given.task_names, given.stacks, given.chief)
    else:
        verdict = analyze_hang(given.recorders, given.stacks, given.world_size)
    return HangResult(tuple(given.notes), verdict)
