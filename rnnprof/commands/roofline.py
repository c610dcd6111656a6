"""rnnprof roofline: FLOPs, bytes and achieved rates per op, family and step, MFU and collectives' bus bandwidth."""

from __future__ import annotations

import argparse

from rich.console import Console

from rnnprof.commands import left_out_notes, step_flags
from rnnprof.commands.flags import INPUT, positive_int
from rnnprof.errors import InputError, UsageError
from rnnprof.analyzers.peaks import lookup, override
from rnnprof.analyzers.roofline import analyze_roofline
from rnnprof.inputs.roofline_inputs import NotAvailable, load_source, sources, without_shapes
from rnnprof.reports.charts import check_plot_path, roofline_chart, save_chart
from rnnprof.reports.roofline import not_available, render
from rnnprof.reports.results.roofline import RooflineResult
from rnnprof.rundir.manifest import run_notes
from rnnprof.traces.rank_folder import folder_notes, job_of
from rnnprof.training.cpu_peaks import measure_cpu_peaks, this_host

EXPECTED = "a PyTorch profiler (Kineto) trace, several, a folder of rank traces, or a run directory"
ONE_PROCESS = "the report shows one process's roofline; run rnnprof roofline on the ranks"  # for a job's


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar=INPUT,
                        help="a Kineto trace (.json or .json.gz), several (one per rank), a folder of rank traces, or a "
                             "run directory (TensorFlow or PyTorch)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout instead of tables")
    parser.add_argument("--peak-tflops", type=_positive, metavar="X",
                        help="the device's peak TFLOP/s, for every dtype (default: the table's figure for the "
                             "device the trace names; a CPU run recorded on this machine: measured now)")
    parser.add_argument("--peak-tbps", type=_positive, metavar="Y",
                        help="the device's peak memory bandwidth in TB/s (default: the table's figure, or measured "
                             "as for --peak-tflops)")
    parser.add_argument("--top", type=positive_int, default=15, metavar="N",
                        help="operators shown in the text report (default: %(default)s; --json has them all)")
    parser.add_argument("--plot", metavar="FILE", help="also write the roofline chart to FILE, .png or .svg")
    step_flags.add_arguments(parser)


def _peaks(loaded, args, notes: list[str]):
    """The table's peaks for the device the trace names; for a CPU run recorded on this machine, measured now;
    the flags over either. A note says where they come from, or that there are none."""

    label = loaded.worker or str(loaded.path)
    tflops, tbps = getattr(args, "peak_tflops", None), getattr(args, "peak_tbps", None)
    found = next((p for p in map(lookup, loaded.devices) if p is not None), None)
    if found is None and loaded.cpu_only and (tflops is None or tbps is None) and loaded.host == this_host():
        found = measure_cpu_peaks()
        notes.append(f"{label}: a CPU run recorded on this machine ({loaded.host}): its peaks are measured now "
                     f"(numpy FP32 matmul {found.vector_tflops * 1e3:,.1f} GFLOP/s, array copy "
                     f"{found.tbps * 1e3:,.1f} GB/s); --peak-tflops and --peak-tbps override them")
    peaks = override(found, tflops, tbps)
    if peaks is None:
        where = ", ".join(loaded.devices) or (f"a CPU of {loaded.host or 'an unnamed host'}, not this machine"
                                              if loaded.cpu_only else "(the trace names none)")
        notes.append(f"{label}: no peaks for device {where}: rates are given, bounds and MFU are not "
                     f"(give --peak-tflops and --peak-tbps)")
    return peaks


def for_report(paths: list[str], table, selected, args, notes: list[str], with_peaks: bool = True):
    """(RooflineReport, "") of the report's input when it is one process (one Kineto trace, one run directory),
    else (None, why); ``table`` is its event table as loaded, ``selected`` the steps the report analyses;
    ``with_peaks`` False: rates only (no peaks looked up or measured)."""

    if table is None:
        return None, "no trace events"
    try:
        found = sources(paths, loaded=True)
    except NotAvailable as exc:
        return None, exc.reason
    except InputError as exc:
        return None, str(exc)
    if len(found) != 1:
        return None, ONE_PROCESS
    no_shapes = "no operator shapes (a PyTorch trace needs record_shapes=True)"
    try:
        if without_shapes(found[0]):
            return None, no_shapes
        loaded = load_source(found[0], table)
    except InputError as exc:
        return None, str(exc)
    if not len(loaded.shapes):
        return None, no_shapes
    peaks = _peaks(loaded, args, notes) if with_peaks else None
    return analyze_roofline(selected, loaded.shapes, peaks), ""


def run(args: argparse.Namespace, console: Console) -> int:
    plot = check_plot_path(args.plot)
    result = analyze(args)
    if not result.available:
        not_available(result.reason, args.json, console)
        return 0
    result.render(console, args.json, lambda: render(list(result.reports), console, top=args.top))
    if plot is not None:
        save_chart(roofline_chart(list(result.reports)), plot)
    return 0


def analyze(args: argparse.Namespace) -> RooflineResult:
    """roofline's result for ``args`` (where the input records no shapes, one saying why): what the command
    renders and ``rnnprof.open(...).roofline()`` gives."""
    try:
        found = sources(args.paths)
    except NotAvailable as exc:
        return RooflineResult((), reason=exc.reason)
    reports, notes, tables = [], [*run_notes(args.paths), *folder_notes(job_of(args.paths))], []
    for source in found:
        loaded = load_source(source)
        table, label = loaded.table, loaded.worker or str(loaded.path)
        tables.append(table)
        selected = step_flags.select(table, args)
        report = analyze_roofline(selected, loaded.shapes, _peaks(loaded, args, notes),
                                  step_flags.selection(args).describe())
        if not report.has_shapes:
            notes.append(f"{label}: no operator shapes: FLOPs and bytes need the trace recorded with "
                         f"record_shapes=True; still given: GPU time per step and the collectives' bandwidth "
                         f"where their messages are recorded")
        reports.append((source.worker, report))
    if not any(r.counts["gpu_activities"] or r.counts["operator_us_modeled"] for _, r in reports):
        raise InputError(", ".join(args.paths), "no GPU activity and no operator with a FLOPs model",
                         "a PyTorch profiler trace (GPU, or CPU with shapes) or a TensorFlow run directory")
    notes += left_out_notes.notes(args, *tables)
    return RooflineResult(tuple(notes), tuple(reports), left_out_notes.counts(*tables))


__all__ = ["add_arguments", "run", "UsageError"]
