"""Rendering of ``count-ops`` results: rich tables or one JSON document."""

from __future__ import annotations

import dataclasses
import json

from rich.console import Console
from rich.table import Table

from rnnprof.analyzers.opcount import GraphOpCounts, KernelCounts, OpCountComparison, OpCountReport

TOP_TYPES = 15


def _short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.{digits}f}"


def _graph_table(title: str, counts: GraphOpCounts, by: str) -> Table | str:
    if not counts.available:
        return f"[bold]{title}[/bold]: not available ({counts.reason})"
    if by == "type":
        table = Table(title=f"{title}: {counts.total:,} ops ({counts.top_level:,} top level, "
                            f"{counts.in_functions:,} in {len(counts.functions)} function bodies)")
        table.add_column("op type")
        table.add_column("ops", justify="right")
        for op, n in list(counts.by_type.items())[:TOP_TYPES]:
            table.add_row(_short(op), f"{n:,}")
        if len(counts.by_type) > TOP_TYPES:
            table.add_row(f"... {len(counts.by_type) - TOP_TYPES} more types",
                          f"{sum(list(counts.by_type.values())[TOP_TYPES:]):,}")
        return table
    table = Table(title=f"{title}: {counts.total:,} ops ({counts.top_level:,} top level, "
                        f"{counts.in_functions:,} in {len(counts.functions)} function bodies)")
    table.add_column("device")
    table.add_column("ops", justify="right")
    table.add_column("most common op types")
    for device, n in counts.by_device.items():
        common = ", ".join(f"{op} {k}" for op, k in list(counts.by_device_type[device].items())[:4])
        table.add_row(device, f"{n:,}", common)
    return table


def _kernel_table(kernels: KernelCounts, by: str) -> Table | str:
    if not kernels.available:
        return f"[bold]Kernel invocations[/bold]: not available ({kernels.reason})"
    steps = "no step markers: whole trace = 1 step" if kernels.steps == (-1,) else \
        f"{len(kernels.steps)} steps ({kernels.steps[0]}..{kernels.steps[-1]})"
    n = kernels.n_steps
    if by == "type":
        table = Table(title=f"Kernel invocations per step by op type [{steps}]")
        table.add_column("op type")
        table.add_column("CPU kernels/step", justify="right")
        table.add_column("GPU kernels/step", justify="right")
        for op, (c, g) in list(kernels.by_type.items())[:TOP_TYPES]:
            table.add_row(_short(op), _fmt(c / n), _fmt(g / n))
        return table
    table = Table(title=f"Kernel invocations per device per step [{steps}]")
    for column in ("device", "CPU kernels/step", "GPU kernels/step", "GPU launches/step", "copies/step"):
        table.add_column(column, justify="left" if column == "device" else "right")
    for d in kernels.devices:
        table.add_row(d.device, _fmt(d.cpu_kernels / n), _fmt(d.gpu_kernels / n),
                      _fmt(d.gpu_launches / n), _fmt(d.copies / n))
    table.add_row("[bold]all devices[/bold]", _fmt(kernels.cpu_kernels / n), _fmt(kernels.gpu_kernels / n),
                  _fmt(kernels.gpu_launches / n), _fmt(sum(d.copies for d in kernels.devices) / n))
    return table


def render_table(report: OpCountReport, *, by: str, console: Console) -> None:
    console.print(f"[bold]{report.source}[/bold] ({report.source_format})")
    console.print(_graph_table("User graph (as built; requested devices)", report.user_graph, by))
    console.print(_graph_table("Runtime graph (partitions after optimization; assigned devices)",
                               report.runtime_graph, by))
    console.print(_kernel_table(report.kernels, by))
    render_definitions(report.definitions, console)


def render_definitions(definitions: dict[str, str], console: Console) -> None:
    console.print("[dim]Definitions:[/dim]")
    for term, text in definitions.items():
        console.print(f"[dim]  {term}: {text}[/dim]", highlight=False)


def render_comparison(comparison: OpCountComparison, *, by: str, console: Console) -> None:
    left, right = comparison.left, comparison.right
    table = Table(title=f"{left.source} ÷ {right.source}")
    table.add_column("metric")
    table.add_column("left", justify="right")
    table.add_column("right", justify="right")
    table.add_column("ratio", justify="right")
    for r in comparison.ratios:
        ratio = r.ratio
        table.add_row(r.metric, _fmt(r.left), _fmt(r.right), "n/a" if ratio is None else f"{ratio:.2f}x")
    console.print(table)
    console.print("[dim]n/a: the input on that side has no such graph or trace, or the divisor is 0[/dim]")
    render_definitions(left.definitions, console)


def to_document(report: OpCountReport) -> dict:
    doc = dataclasses.asdict(report)
    kernels = doc["kernels"]
    k = report.kernels
    if k.available:
        kernels["per_step"] = {
            "cpu_kernels": k.per_step(k.cpu_kernels),
            "gpu_kernels": k.per_step(k.gpu_kernels),
            "gpu_launches": k.per_step(k.gpu_launches),
        }
    for d in kernels["devices"]:
        d["per_step"] = {str(s): {"cpu_kernels": c, "gpu_kernels": g} for s, (c, g) in d["per_step"].items()}
    kernels["by_type"] = {op: {"cpu_kernels": c, "gpu_kernels": g} for op, (c, g) in k.by_type.items()}
    return doc


def comparison_document(comparison: OpCountComparison) -> dict:
    return {
        "left": to_document(comparison.left),
        "right": to_document(comparison.right),
        "ratios": [{"metric": r.metric, "left": r.left, "right": r.right, "ratio": r.ratio}
                   for r in comparison.ratios],
    }


def render_json(document: dict, console: Console) -> None:
    console.print(json.dumps(document, indent=2), markup=False, highlight=False, soft_wrap=True, emoji=False)
