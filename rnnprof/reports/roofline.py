"""Formatting of ``rnnprof roofline``: text tables, one JSON document, and a log-log roofline chart."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from rnnprof.analyzers.roofline import RooflineReport, per_group
from rnnprof.reports.layout import compact_table, render_json


def _f(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def not_available(reason: str, as_json: bool, console: Console) -> None:
    if as_json:
        render_json({"available": False, "reason": reason}, console)
    else:
        console.print(Text(f"roofline not available: {reason}"))


def to_document(reports: list[tuple[str, RooflineReport]]) -> dict:
    ranks = [{"worker": worker, **report.as_dict()} for worker, report in reports]
    groups = per_group([c for _, r in reports for c in r.collectives])
    return {"available": True, "ranks": ranks, "collectives_per_group": [g.as_dict() for g in groups]}


def render(reports: list[tuple[str, RooflineReport]], console: Console, top: int = 15) -> None:
    for worker, report in reports:
        _render_one(worker, report, console, top)
    groups = per_group([c for _, r in reports for c in r.collectives])
    if len(reports) > 1 and groups:
        console.print(_collectives_table(groups, "collectives per process group, all ranks"))


def _render_one(worker: str, report: RooflineReport, console: Console, top: int) -> None:
    """One rank's figures: its peaks, what the time is, and its tables."""
    heading = _heading(worker, report)
    if heading is not None:
        console.print(Text(heading))
    console.print(Text(_time_basis(report.counts)))
    if report.families:
        console.print(_families_table(report))
        console.print(_ops_table(report, top))
    if report.steps:
        console.print(_steps_table(report))
    if report.collectives:
        console.print(_collectives_table(report.collectives, "collectives (NCCL's bus bandwidth)"))
    c = report.counts
    if c["collectives"]:
        console.print(Text(f"collectives: {c['collectives']} on the GPU, {c['collectives_without_message']} with no "
                           f"recorded message size (left out of the bandwidths)"))


def _heading(worker: str, report: RooflineReport) -> str | None:
    """The rank's name and the device's peaks (None for an unnamed rank with no peaks)."""
    peaks = report.peaks
    head = f"{worker}: " if worker else ""
    if peaks is None:
        return head.rstrip(": ") if head else None
    matrix = ", ".join(f"{k} {v:g}" for k, v in sorted(peaks.matrix_tflops.items()) if not k.startswith("vector"))
    return (f"{head}{peaks.device} ({peaks.source}): {peaks.tbps:g} TB/s; matrix TFLOP/s {matrix}; "
            f"vector fp32 {peaks.vector_tflops:g}")


def _time_basis(c: dict) -> str:
    """What an operator's time is (its kernels', or its own without GPU work) and how many operators count."""
    if c.get("time_basis") == "operator":
        return (
            f"no GPU work: each operator's own duration is its time ('kernel ms'), "
            f"{_f(c['operator_us_modeled'] / 1e3, 3)} ms for the modeled operators; operators: {c['operators']} "
            f"seen, {c['operators_with_shapes']} with shapes, {c['operators_modeled']} modeled "
            f"({c['operators_modeled_outermost']} outermost"
            + (f", {c['operators_modeled_outside_selected_steps']} outside the selected steps"
               if c.get("operators_modeled_outside_selected_steps") else "") + ")")
    return (
        f"GPU time attributed to modeled operators: {_f(c['gpu_us_attributed'] / 1e3, 3)} of "
        f"{_f(c['gpu_us'] / 1e3, 3)} ms ({c['gpu_activities_attributed']} of {c['gpu_activities']} kernels, "
        f"memsets and copies; {c['gpu_activities_unlaunched']} with no launch in the trace); operators: "
        f"{c['operators']} seen, {c['operators_with_shapes']} with shapes, {c['operators_modeled']} modeled "
        f"({c['operators_modeled_outermost']} outermost, {c['operators_modeled_without_gpu_work']} ran no GPU "
        f"work)")


def _families_table(report: RooflineReport) -> Table:
    """Figures per op family, each against its roofline."""
    table = compact_table("family", ("ops", "GFLOP", "GB", "kernel ms", "TFLOP/s", "TB/s", "FLOP/B",
                                     "of roofline"), text_columns=("bound",), title="per op family")
    for name, row in report.families.items():
        r = row.rates
        table.add_row(name, row.bound or "-", str(row.count), _f(r.flops / 1e9, 3), _f(r.bytes / 1e9, 4),
                      _f(r.kernel_us / 1e3, 3), _f(r.tflops_per_s), _f(r.tb_per_s, 3), _f(r.intensity, 1),
                      _pct(row.of_roofline))
    return table


def _ops_table(report: RooflineReport, top: int) -> Table:
    """The ``top`` operators by kernel time."""
    table = compact_table("operator", ("count", "kernel ms", "TFLOP/s", "FLOP/B", "of roofline"),
                          text_columns=("dtype", "shapes", "bound"),
                          title=f"operators by kernel time (top {min(top, len(report.ops))} of {len(report.ops)})")
    for row in report.ops[:top]:
        r = row.rates
        table.add_row(Text(row.name), row.dtype, Text(row.shapes), row.bound or "-", str(row.count),
                      _f(r.kernel_us / 1e3, 3), _f(r.tflops_per_s), _f(r.intensity, 1), _pct(row.of_roofline))
    return table


def _steps_table(report: RooflineReport) -> Table:
    """Figures per step, with its MFU."""
    table = compact_table("step", ("wall ms", "kernel ms", "GFLOP", "matrix GFLOP", "TFLOP/s", "MFU"),
                          text_columns=("dtype",), title="per step (MFU: matrix FLOPs / wall time / peak)")
    for s in report.steps:
        table.add_row(str(s.step), s.dtype or "-", _f(s.wall_us / 1e3, 3), _f(s.kernel_us / 1e3, 3),
                      _f(s.flops / 1e9, 3), _f(s.matrix_flops / 1e9, 3), _f(s.tflops_per_s), _pct(s.mfu))
    return table


def _collectives_table(groups, title: str) -> Table:
    """Collectives by process group: their message sizes, time and NCCL's algorithm and bus bandwidths."""
    table = compact_table("process group", ("size", "count", "MB", "ms", "algbw GB/s", "busbw GB/s"),
                          text_columns=("collective",), title=title)
    for g in groups:
        table.add_row(Text(g.group or "-"), g.collective, str(g.group_size), str(g.count), _f(g.bytes / 1e6),
                      _f(g.time_us / 1e3, 3), _f(g.algbw_gbps), _f(g.busbw_gbps))
    return table
