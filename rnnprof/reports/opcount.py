"""Rendering of ``count-ops`` results: rich tables or one JSON document."""

from __future__ import annotations

import dataclasses

from rich.console import Console
from rich.table import Table
from rich.text import Text

from rnnprof.analyzers.opcount import GraphOpCounts, KernelCounts, OpCountComparison, OpCountReport
from rnnprof.reports.layout import compact_table

TOP_TYPES = 15


MAX_DEVICE_COLUMNS = 6  # more devices than this: --by type shows the busiest ones and "other devices"


def _short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.{digits}f}"


def _heading(title: str, counts: GraphOpCounts) -> Text:
    return Text.assemble((title, "bold"), f": {counts.total:,} ops ({counts.top_level:,} top level, "
                                          f"{counts.in_functions:,} in {len(counts.functions)} function bodies)")


def _device_columns(per_device: dict[str, dict[str, int]]) -> tuple[list[str], bool]:
    """The devices that get a column (most ops first, then by name), and whether others are folded."""
    totals = {d: sum(ops.values()) for d, ops in per_device.items()}
    ranked = sorted(per_device, key=lambda d: (-totals[d], d))
    shown = sorted(ranked[:MAX_DEVICE_COLUMNS]) if len(ranked) > MAX_DEVICE_COLUMNS else sorted(ranked)
    return shown, len(ranked) > len(shown)


def _by_type_table(totals: dict[str, tuple[int, ...]], per_device: dict[str, dict[str, int]],
                   total_headers: tuple[str, ...], scale: float = 1.0) -> Table:
    """Rows: op types (most first) with their totals, then one column per device; counts ÷ ``scale``."""
    devices, folded = _device_columns(per_device)
    others = [d for d in per_device if d not in devices]
    headers = [*total_headers, *map(Text, devices), *(["other\ndevices"] if folded else [])]
    table = compact_table("op type", headers)

    def row(label: Text, ops: list[str]) -> None:
        sums = [sum(totals[op][i] for op in ops) for i in range(len(total_headers))]
        cells = [sum(per_device[d].get(op, 0) for op in ops) for d in devices]
        if folded:
            cells.append(sum(per_device[d].get(op, 0) for d in others for op in ops))
        table.add_row(label, *(_fmt(v / scale) for v in (*sums, *cells)))

    names = list(totals)
    for op in names[:TOP_TYPES]:
        row(Text(_short(op)), [op])
    if len(names) > TOP_TYPES:
        row(Text(f"... {len(names) - TOP_TYPES} more types"), names[TOP_TYPES:])
    return table


def _graph_table(title: str, counts: GraphOpCounts, by: str) -> list:
    if not counts.available:
        return [Text.assemble((title, "bold"), f": not available ({counts.reason})")]
    if by == "type":
        totals = {op: (n,) for op, n in counts.by_type.items()}
        return [_heading(title, counts) + " — ops per op type and device",
                _by_type_table(totals, counts.by_device_type, ("all",))]
    table = compact_table("device", ("ops",))
    table.add_column("most common op types", overflow="fold")
    for device, n in counts.by_device.items():
        common = ", ".join(f"{op} {k}" for op, k in list(counts.by_device_type[device].items())[:4])
        table.add_row(Text(device), f"{n:,}", Text(common))
    return [_heading(title, counts) + " — ops per device", table]


def _kernel_table(kernels: KernelCounts, by: str) -> list:
    if not kernels.available:
        return [Text.assemble(("Kernel invocations", "bold"), f": not available ({kernels.reason})")]
    steps = ("[no step markers: whole trace = 1 step]" if kernels.steps == (-1,) else
             f"[{len(kernels.steps)} steps ({kernels.steps[0]}..{kernels.steps[-1]})]")
    n = kernels.n_steps
    outside = sum(d.outside_steps for d in kernels.devices)
    note = [f"[dim]{outside:,} kernels outside step markers are not counted[/dim]"] if outside else []
    if by == "type":
        table = _by_type_table(kernels.by_type, kernels.by_device_type, ("CPU\nkernels", "GPU\nkernels"), n)
        return [Text.assemble(("Kernel invocations per step by op type and device", "bold"), " ", steps),
                table, *note]
    table = compact_table("device", ("CPU\nkernels", "GPU\nkernels", "GPU\nlaunches", "copies"),
                          caption="per step; [CPU kernels / GPU kernels] is the split, launches and "
                                  "copies are not kernels (see Definitions)")
    for d in kernels.devices:
        table.add_row(Text(d.device), _fmt(d.cpu_kernels / n), _fmt(d.gpu_kernels / n),
                      _fmt(d.gpu_launches / n), _fmt(d.copies / n))
    for task, t in kernels.by_task().items():
        table.add_row(Text(f"{task} total", style="bold"), _fmt(t["cpu_kernels"] / n),
                      _fmt(t["gpu_kernels"] / n), _fmt(t["gpu_launches"] / n), _fmt(t["copies"] / n))
    table.add_row("[bold]all devices[/bold]", _fmt(kernels.cpu_kernels / n), _fmt(kernels.gpu_kernels / n),
                  _fmt(kernels.gpu_launches / n), _fmt(sum(d.copies for d in kernels.devices) / n))
    return [Text.assemble(("Kernel invocations per device per step", "bold"), " ", steps), table, *note]


def render_table(report: OpCountReport, *, by: str, console: Console) -> None:
    console.print(Text.assemble((report.source, "bold"), f" ({report.source_format})"))
    parts = [*_graph_table("User graph (as built; requested devices)", report.user_graph, by),
             *_graph_table("Runtime graph (partitions after optimization; assigned devices)",
                           report.runtime_graph, by),
             *_kernel_table(report.kernels, by)]
    for part in parts:
        console.print(part)
    render_definitions(report.definitions, console)


def render_definitions(definitions: dict[str, str], console: Console) -> None:
    console.print("[dim]Definitions:[/dim]")
    for term, text in definitions.items():
        console.print(Text(f"  {term}: {text}", style="dim"), highlight=False)


def render_comparison(comparison: OpCountComparison, *, by: str, console: Console) -> None:
    left, right = comparison.left, comparison.right
    console.print(Text(f"{left.source} ÷ {right.source}", style="bold"))
    table = compact_table("metric", ("left", "right", "ratio"),
                          caption=Text(f"left = {left.source}, right = {right.source}; ratio = left ÷ right; "
                                       "n/a: that side has no such graph or trace, or the divisor is 0",
                                       style="table.caption"))
    for r in comparison.ratios:
        ratio = r.ratio
        table.add_row(Text(r.metric), _fmt(r.left), _fmt(r.right), "n/a" if ratio is None else f"{ratio:,.2f}x")
    console.print(table)
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
    if k.by_task():
        kernels["by_task"] = k.by_task()
    return doc


def comparison_document(comparison: OpCountComparison) -> dict:
    return {
        "left": to_document(comparison.left),
        "right": to_document(comparison.right),
        "ratios": [{"metric": r.metric, "left": r.left, "right": r.right, "ratio": r.ratio}
                   for r in comparison.ratios],
    }
