"""rnnprof count-ops: graph operators (user and runtime graphs) and kernel invocations per device and step."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from rich.console import Console
from rnnprof import limits

NAME = "count-ops"
HELP = "count graph operators and kernel invocations per device and step; --vs compares two runs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="RUN_OR_FILE",
                        help="run directory, trace file (several: merged, e.g. one Kineto file per rank), "
                             "GraphDef or RunMetadata")
    parser.add_argument("--vs", metavar="OTHER", help="a second input; prints RUN_OR_FILE ÷ OTHER ratios")
    parser.add_argument("--by", choices=("device", "type"), default="device",
                        help="break counts down by device (default) or by op type")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout instead of tables")
    limits.add_argument(parser)


def analyze_input(paths: list[str]):
    """Load what the input holds (graphs and/or events) and count it."""
    from rnnprof.analyzers.opcount import count_ops
    from rnnprof.errors import InputError
    from rnnprof.profiler.loaders import graphs
    from rnnprof.profiler.loaders import detect_format, load_events

    single = Path(paths[0]) if len(paths) == 1 else None
    graph_set, graph_reason, fmt, unknown_format = None, "", None, False
    if single is not None and single.exists():
        try:
            fmt = detect_format(single)
        except InputError as exc:
            # maybe a graph file; any other reason (empty, too big, corrupt gzip) is kept as it is
            unknown_format = exc.problem.startswith("matches no known trace format")
        if fmt in (None, "rundir", "run-metadata"):
            try:
                graph_set = graphs.load_graph_set(single)
            except InputError as exc:
                graph_reason = str(exc)
    elif single is None:
        graph_reason = "graphs are read from one run directory or graph file, not from merged traces"
    table, events_error = None, None
    try:
        table = load_events(paths if single is None else single)
    except InputError as exc:
        events_error = exc
    has_graph = graph_set is not None and (graph_set.user is not None or graph_set.runtime is not None)
    if table is None and not has_graph:
        if single is not None and unknown_format and graph_reason:
            # Neither a trace nor a graph: name both families of formats that were tried.
            from rnnprof.profiler.loaders import EXPECTED

            raise InputError(single, "matches no known trace format and is not a TensorFlow graph",
                             f"{EXPECTED}, or a GraphDef (.pb, .pbtxt)")
        raise events_error
    if graph_set is None and not graph_reason and table is not None:
        graph_reason = f"{table.source_format} traces carry no TensorFlow graph"
    label = ", ".join(paths)
    missing = "; ".join(graph_set.warnings) if graph_set is not None and graph_set.warnings else ""
    result = count_ops(
        label, table,
        graph_set.user if graph_set else None,
        graph_set.runtime if graph_set else None,
        graph_reason=graph_reason,
        events_reason=str(events_error) if events_error else "",
    )
    if graph_set is not None:
        # Say which graph is absent, and why, per view.
        if graph_set.user is None:
            result = dataclasses.replace(result, user_graph=dataclasses.replace(
                result.user_graph, reason=missing or f"{label} holds no user-level graph (graph.pb)"))
        if graph_set.runtime is None:
            result = dataclasses.replace(result, runtime_graph=dataclasses.replace(
                result.runtime_graph, reason=missing or f"{label} holds no partition graphs"))
    return result


def run(args: argparse.Namespace, console: Console) -> int:
    from rnnprof.analyzers.opcount import compare
    from rnnprof.reports import opcount as report
    from rnnprof.profiler.rundir.manifest import run_notes
    from rnnprof.reports.layout import render_json, render_notes

    notes = run_notes([*args.paths, *([args.vs] if args.vs else [])])
    result = analyze_input(args.paths)
    comparison = compare(result, analyze_input([args.vs])) if args.vs else None
    render_notes(notes)
    if comparison is not None:
        if args.json:
            render_json(report.comparison_document(comparison), console)
        else:
            report.render_comparison(comparison, by=args.by, console=console)
    elif args.json:
        render_json(report.to_document(result), console)
    else:
        report.render_table(result, by=args.by, console=console)
    return 0
