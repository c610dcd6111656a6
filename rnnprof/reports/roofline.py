"""Formatting of ``rnnprof roofline``: text tables, one JSON document, and a log-log roofline chart."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from rnnprof.analyzers.roofline import RooflineReport, per_group
from rnnprof.reports.fit import Column, fit_table
from rnnprof.reports.layout import render_json


def _f(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def not_available(reason: str, as_json: bool, console: Console) -> None:
    if as_json:
        render_json({"available": False, "reason": reason}, console, [])  # nothing was said about the input
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
        console.print(_collectives_table(groups, "collectives per process group, all ranks", console.width))


def _render_one(worker: str, report: RooflineReport, console: Console, top: int) -> None:
    """One rank's figures: its peaks, what the time is, and its tables."""
    heading = _heading(worker, report)
    if heading is not None:
        console.print(Text(heading))
    console.print(Text(_time_basis(report.counts)))
    if report.families:
        console.print(_families_table(report, console.width))
        console.print(_ops_table(report, top, console.width))
    if report.steps:
        console.print(_steps_table(report, console.width))
    if report.collectives:
        console.print(_collectives_table(report.collectives, "collectives (NCCL's bus bandwidth)", console.width))
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


def _families_table(report: RooflineReport, width: int):
    """Figures per op family, each against its roofline."""
    columns = [Column("family", "label"), Column("bound", "label"), Column("ops", drop=2), Column("GFLOP"),
               Column("GB", drop=3), Column("kernel\nms"), Column("TFLOP/s"), Column("TB/s", drop=1),
               Column("FLOP/B"), Column("of\nroof-\nline")]
    rows = [[Text(name), row.bound or "-", str(row.count), _f(row.rates.flops / 1e9, 3),
             _f(row.rates.bytes / 1e9, 4), _f(row.rates.kernel_us / 1e3, 3), _f(row.rates.tflops_per_s),
             _f(row.rates.tb_per_s, 3), _f(row.rates.intensity, 1), _pct(row.of_roofline)]
            for name, row in report.families.items()]
    return fit_table(width, columns, rows, title="per op family")


def _ops_table(report: RooflineReport, top: int, width: int):
    """The ``top`` operators by kernel time."""
    columns = [Column("operator", "name", least=22), Column("dtype", "label", drop=2),
               Column("shapes", "text", least=18),
               Column("bound", "label"), Column("count", drop=3), Column("kernel\nms"), Column("TFLOP/s"),
               Column("FLOP/B", drop=1), Column("of\nroof-\nline")]
    rows = [[Text(row.name), row.dtype, Text(row.shapes), row.bound or "-", str(row.count),
             _f(row.rates.kernel_us / 1e3, 3), _f(row.rates.tflops_per_s), _f(row.rates.intensity, 1),
             _pct(row.of_roofline)] for row in report.ops[:top]]
    return fit_table(width, columns, rows,
                     title=f"operators by kernel time (top {min(top, len(report.ops))} of {len(report.ops)})")


def _steps_table(report: RooflineReport, width: int):
    """Figures per step, with its MFU."""
    columns = [Column("step", "label"), Column("dtype", "label", drop=1), Column("wall\nms"),
               Column("kernel\nms"), Column("GFLOP"), Column("matrix\nGFLOP"), Column("TFLOP/s"), Column("MFU")]
    rows = [[str(s.step), s.dtype or "-", _f(s.wall_us / 1e3, 3), _f(s.kernel_us / 1e3, 3), _f(s.flops / 1e9, 3),
             _f(s.matrix_flops / 1e9, 3), _f(s.tflops_per_s), _pct(s.mfu)] for s in report.steps]
    return fit_table(width, columns, rows, title="per step (MFU: matrix FLOPs / wall time / peak)")


def _collectives_table(groups, title: str, width: int):
    """Collectives by process group: their message sizes, time and NCCL's algorithm and bus bandwidths."""
    columns = [Column("process group", "text", least=14), Column("collective", "label"), Column("size"),
               Column("count"), Column("MB"), Column("ms"), Column("algbw\nGB/s", drop=1), Column("busbw\nGB/s")]
    rows = [[Text(g.group or "-"), Text(g.collective), str(g.group_size), str(g.count), _f(g.bytes / 1e6),
             _f(g.time_us / 1e3, 3), _f(g.algbw_gbps), _f(g.busbw_gbps)] for g in groups]
    return fit_table(width, columns, rows, title=title)
