"""rnnprof roofline: FLOPs, bytes and achieved rates per op, family and step, MFU and collectives' bus bandwidth."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from rnnprof.commands import _left_out, _steps
from rnnprof.config import positive_int
from rnnprof.errors import InputError, UsageError

NAME = "roofline"
HELP = "FLOPs, bytes and achieved TFLOP/s and TB/s per op, op family and step against the GPU's roofline, MFU, " \
       "and collectives' bus bandwidth (PyTorch traces recorded with record_shapes=True)"
EXPECTED = "a PyTorch profiler (Kineto) trace, several, or a folder of rank traces"


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="TRACE_OR_FOLDER",
                        help="a Kineto trace (.json or .json.gz), several (one per rank), or a folder of rank traces")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout instead of tables")
    parser.add_argument("--peak-tflops", type=_positive, metavar="X",
                        help="the device's peak TFLOP/s, for every dtype (default: the table's figure for the "
                             "device the trace names)")
    parser.add_argument("--peak-tbps", type=_positive, metavar="Y",
                        help="the device's peak memory bandwidth in TB/s (default: the table's figure)")
    parser.add_argument("--top", type=positive_int, default=15, metavar="N",
                        help="operators shown in the text report (default: %(default)s; --json has them all)")
    parser.add_argument("--plot", metavar="FILE", help="also write the roofline chart to FILE, .png or .svg")
    _steps.add_arguments(parser)


def _files(paths: list[str]) -> list[tuple[str, Path]]:
    """(worker label, file) per Kineto trace given; TensorFlow and other formats are refused by the caller."""
    from rnnprof.profiler.loaders import detect_format
    from rnnprof.profiler.loaders.rank_folder import job_of

    job = job_of(paths)
    if job is not None:
        return [(f"rank{f.rank}", f.path) for f in job.files]
    files = []
    for path in paths:
        kind = detect_format(path)
        if kind != "kineto":
            from rnnprof.profiler.loaders import load_events

            load_events(path)  # input that is not a trace at all is a one-line error, not "not available"
            raise _NotAvailable(path, kind)
        files.append(("" if len(paths) == 1 else Path(path).name, Path(path)))
    return files


class _NotAvailable(Exception):
    def __init__(self, path, kind):
        self.path, self.kind = path, kind
        super().__init__(path)

    @property
    def reason(self) -> str:
        if self.kind in ("rundir", "chrome-json", "xplane", "xplane-dir", "run-metadata", "tf-chrome"):
            return (f"{self.path}: roofline is not available for TensorFlow traces ({self.kind}): they record no "
                    f"input shapes per op event, and FLOPs from the graph's cost model are not read yet")
        return f"{self.path}: roofline is not available for {self.kind} input: it reads Kineto traces' recorded shapes"


def run(args: argparse.Namespace, console: Console) -> int:
    from rnnprof.analyzers.peaks import lookup, override
    from rnnprof.analyzers.roofline import analyze_roofline
    from rnnprof.profiler.loaders import load_events
    from rnnprof.profiler.loaders.shapes import load_shapes
    from rnnprof.reports.charts import check_plot_path
    from rnnprof.reports.layout import render_json, render_notes
    from rnnprof.reports.roofline import not_available, render, to_document

    plot = check_plot_path(args.plot)
    try:
        files = _files(args.paths)
    except _NotAvailable as exc:
        not_available(exc.reason, args.json, console)
        return 0
    reports, notes, tables = [], [], []
    for worker, path in files:
        table = load_events(str(path))
        tables.append(table)
        selected = _steps.select(table, args)
        names = [p.get("name", "") for p in selected.metadata.get("devices_properties") or [] if isinstance(p, dict)]
        found = next((p for p in map(lookup, names) if p is not None), None)
        peaks = override(found, args.peak_tflops, args.peak_tbps)
        if peaks is None:
            notes.append(f"{worker or path}: no peaks for device {', '.join(names) or '(the trace names none)'}: "
                         f"rates are given, bounds and MFU are not (give --peak-tflops and --peak-tbps)")
        report = analyze_roofline(selected, load_shapes(path, table), peaks, _steps.selection(args).describe())
        if not report.has_shapes:
            notes.append(f"{worker or path}: no operator shapes: FLOPs and bytes need the trace recorded with "
                         f"record_shapes=True; still given: GPU time per step and the collectives' bandwidth "
                         f"where their messages are recorded")
        reports.append((worker, report))
    if not any(r.counts["gpu_activities"] for _, r in reports):
        raise InputError(", ".join(args.paths), "no GPU activity (no kernel, memcpy or memset)",
                         "a PyTorch profiler trace of a GPU run")
    notes += _left_out.notes(args, *tables)
    render_notes(notes)
    if args.json:
        document = to_document(reports)
        document["left_out"] = _left_out.counts(*tables)
        render_json(document, console)
    else:
        render(reports, console, top=args.top)
    if plot is not None:
        from rnnprof.reports.charts import save_chart
        from rnnprof.reports.roofline import roofline_chart

        save_chart(roofline_chart(reports), plot)
    return 0


__all__ = ["NAME", "HELP", "add_arguments", "run", "UsageError"]
