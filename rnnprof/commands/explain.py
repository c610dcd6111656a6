"""rnnprof explain: why a sweep's speedup falls short of linear, from one traced run per device count."""

from __future__ import annotations

import argparse
import os

from rich.console import Console

from rnnprof.commands.flags import INPUT, parse_int_list
from rnnprof.errors import UsageError
from rnnprof.analyzers.explain import ExplainError, explain_sweep
from rnnprof.analyzers.scale import shared_cores_note
from rnnprof.commands import left_out_notes
from rnnprof.inputs.explained import load_inputs
from rnnprof.reports.charts import check_plot_path, save_chart
from rnnprof.reports.explain import lost_speedup_chart, render_table, to_document
from rnnprof.reports.layout import render_json, render_notes

SCALING_CHOICES = ("weak", "strong")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar=INPUT,
                        help="a sweep directory made by rnnprof scale --explain, or one run directory, Kineto rank "
                             "folder or trace file per device count")
    parser.add_argument("--devices", default=None, metavar="N,N,...",
                        help="the device count of each run, in order, where the run does not record it")
    parser.add_argument("--scaling", choices=SCALING_CHOICES, default=None,
                        help="weak: fixed batch per device (ideal step time = the 1-device step); strong: fixed "
                             "total batch (ideal = the 1-device step / N) (default: from the runs' batch "
                             "setting, --batch-scaling per-device or total)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout instead of a table")
    parser.add_argument("--plot", metavar="FILE", help="also write the stacked lost-speedup chart to FILE, .png "
                                                       "or .svg")


def run(args: argparse.Namespace, console: Console) -> int:
    plot = check_plot_path(args.plot)
    devices = parse_int_list(args.devices, "--devices") if args.devices is not None else None
    document, report = explain_paths(args.paths, devices, args.scaling, args)
    show(document, report, args.json, plot, console)
    return 0


def explain_paths(paths, devices, scaling: str | None, args=None):
    """The explanation of ``paths`` as (JSON document, report); also what ``scale --explain`` runs."""

    loaded = load_inputs(paths, devices)
    scaling, source = _scaling(scaling, loaded.scalings)
    notes = [n for n in (shared_cores_note(kind, os.cpu_count()) for kind in sorted(loaded.device_kinds)) if n]
    try:
        report = explain_sweep(loaded.inputs, scaling, source, notes)
    except ExplainError as exc:
        raise UsageError(f"{', '.join(map(str, paths))}: {exc}") from None
    left_notes = left_out_notes.notes(args, *loaded.tables) if args is not None else []
    document = to_document(report, left_notes, left_out_notes.counts(*loaded.tables))
    return document, report


def show(document: dict, report, as_json: bool, plot, console: Console) -> None:
    if plot is not None:
        save_chart(lost_speedup_chart(document), plot)
    if as_json:
        render_notes(document["notes"])
        render_json(document, console)
        return

    render_table(report, console)
    render_notes(document["notes"])


def _scaling(flag: str | None, from_config: set) -> tuple[str, str]:
    if flag is not None:
        return flag, "--scaling"
    if len(from_config) == 1:
        return next(iter(from_config)), "from the runs' batch setting"
    if len(from_config) > 1:
        raise UsageError("the runs mix fixed batch per device and fixed total batch; explain runs of one kind, or "
                         "state the ideal with --scaling weak|strong")
    raise UsageError("the runs do not record their batch setting: state the ideal with --scaling weak (fixed batch "
                     "per device) or --scaling strong (fixed total batch)")
