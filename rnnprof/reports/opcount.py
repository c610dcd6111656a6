"""Rendering of ``count-ops`` results: rich tables or one JSON document."""

from __future__ import annotations

import dataclasses

from rich.console import Console
from rich.table import Table
from rich.text import Text

from rnnprof.analyzers.copies import CopyCount, CopyReport, GraphCount
from rnnprof.analyzers.launches import LaunchStats
from rnnprof.analyzers.opcount import GraphOpCounts, KernelCounts, OpCountComparison, OpCountReport
from rnnprof.reports.fit import Column, fit_table
from rnnprof.reports.layout import compact_table, cut_head, distinct_names, outside_note
from rnnprof.reports.units import fmt_mb, fmt_ms

TOP_TYPES = 15
TOP_LAUNCHED = 10


MAX_DEVICE_COLUMNS = 6  # more devices than this: --by type shows the busiest ones and "other devices"


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
    for op, shown in zip(names[:TOP_TYPES], distinct_names(names[:TOP_TYPES], 60, cut_head)):
        row(Text(shown), [op])
    if len(names) > TOP_TYPES:
        row(Text(f"... {len(names) - TOP_TYPES} more types"), names[TOP_TYPES:])
    return table


def _ran_as_note(ran_as: dict) -> list:
    """One line: the ops counted as the user's op that ran as oneDNN kernels (``Conv2D as _MklNativeConv2D``);
    a graph's lists how many nodes each (``{kernel: nodes}``), a trace's the names only."""
    if not ran_as:
        return []
    listed = []
    for op, kernels in ran_as.items():
        names = [f"{k} ({n:,})" for k, n in kernels.items()] if isinstance(kernels, dict) else list(kernels)
        listed.append(f"{op} as {', '.join(names)}")
    return [Text(f"ran as oneDNN kernels (counted as the op the graph holds): {'; '.join(listed)}", style="dim")]


def _graph_table(title: str, counts: GraphOpCounts, by: str) -> list:
    if not counts.available:
        return [Text.assemble((title, "bold"), f": not available ({counts.reason})")]
    if by == "type":
        totals = {op: (n,) for op, n in counts.by_type.items()}
        return [_heading(title, counts) + " — ops per op type and device",
                _by_type_table(totals, counts.by_device_type, ("all",)), *_ran_as_note(counts.ran_as)]
    table = compact_table("device", ("ops",))
    table.add_column("most common op types", overflow="fold")
    for device, n in counts.by_device.items():
        common = ", ".join(f"{op} {k}" for op, k in list(counts.by_device_type[device].items())[:4])
        table.add_row(Text(device), f"{n:,}", Text(common))
    return [_heading(title, counts) + " — ops per device", table, *_ran_as_note(counts.ran_as)]


def _kernel_table(kernels: KernelCounts, by: str) -> list:
    if not kernels.available:
        return [Text.assemble(("Kernel invocations", "bold"), f": not available ({kernels.reason})")]
    steps = ("[no step markers: whole trace = 1 step]" if kernels.steps == (-1,) else
             f"[{len(kernels.steps)} steps ({kernels.steps[0]}..{kernels.steps[-1]})]")
    n = kernels.n_steps
    outside = sum(d.outside_steps for d in kernels.devices)
    note = [f"[dim]{outside:,} kernels outside step markers are not counted[/dim]"] if outside else []
    gpu_outside = outside_note(kernels.gpu_outside_steps, selected=False, counted="not counted in any step")
    note += [Text(gpu_outside, style="dim")] if gpu_outside else []
    if by == "type":
        table = _by_type_table(kernels.by_type, kernels.by_device_type, ("CPU\nkernels", "GPU\nkernels"), n)
        return [Text.assemble(("Kernel invocations per step by op type and device", "bold"), " ", steps),
                table, *_ran_as_note(kernels.ran_as), *note]
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
    return [Text.assemble(("Kernel invocations per device per step", "bold"), " ", steps), table,
            *_ran_as_note(kernels.ran_as), *note]


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _launch_parts(launches: LaunchStats | None, width: int) -> list:
    """The launch statistics: a summary, the kernels with the most time, and the launch-bound note."""
    if launches is None:
        return []
    if not launches.available:
        return [Text(f"Kernel launches: no statistics: {launches.reason}", style="yellow")]
    summary = Text.assemble(
        ("Kernel launches", "bold"),
        f": {launches.kernels:,} GPU kernels, {launches.launched:,} with their launch call; launch delay median "
        f"{_us(launches.delay_median_us)} µs, p95 {_us(launches.delay_p95_us)} µs; "
        f"{100 * launches.short_share:.1f}% shorter than {launches.short_kernel_us:g} µs; "
        f"{100 * launches.shorter_than_launch / max(launches.launched, 1):.1f}% ran shorter than their launch call")
    columns = [Column("kernel", "name"), *(Column(head) for head in ("kernels", "kernel\nµs", "call\nµs",
                                                                     "delay\nµs", "delay\np95 µs", "short\n%"))]
    shown = launches.by_name[:TOP_LAUNCHED]
    caption = ("medians: kernel = its duration, call = the runtime call that launched it, delay = kernel start - "
               "that call's start (same correlation id); p95 = 95th percentile of the delay; short = kernels under "
               f"{launches.short_kernel_us:g} µs (--short-kernel-us); long names are shortened (--json has them "
               "whole)")
    if len(launches.by_name) > len(shown):
        caption = f"top {len(shown)} of {len(launches.by_name)} kernels by summed time; " + caption
    rows = [[Text(k.name), f"{k.kernels:,}", _us(k.kernel_median_us), _us(k.launch_call_median_us),
             _us(k.delay_median_us), _us(k.delay_p95_us), f"{100 * k.short / k.kernels:.1f}"] for k in shown]
    parts: list = [summary, fit_table(width, columns, rows, title="kernel launches, kernels with the most time first",
                                      caption=caption)]
    if launches.by_host_op:
        ops = launches.by_host_op[:TOP_LAUNCHED]
        caption = ("per execution of a host operator that launched kernels (the innermost op around the launch "
                   "call): host = its duration, kernels = the summed duration of the kernels it launched, medians; "
                   "longer on host = executions that took longer on the host than their kernels on the GPU")
        if len(launches.by_host_op) > len(ops):
            caption = f"top {len(ops)} of {len(launches.by_host_op)} host ops by summed host time; " + caption
        columns = [Column("host op", "name"), *(Column(head) for head in ("ops", "kernels", "host\nµs",
                                                                          "kernels\nµs", "longer\non host %"))]
        rows = [[Text(o.name), f"{o.ops:,}", f"{o.kernels:,}", _us(o.host_median_us), _us(o.kernels_median_us),
                 f"{100 * o.longer_on_host / o.ops:.1f}"] for o in ops]
        parts.append(fit_table(width, columns, rows, title="host ops against the kernels they launched",
                               caption=caption))
    for device in launches.launch_bound:
        share = (launches.host_wait_share or {}).get(device, 0.0)
        parts.append(Text(f"note: {device} is launch-bound: it waits on the host for its next kernel's launch "
                          f"{100 * share:.0f}% of its span", style="bold yellow"))
    return parts


def _graph_line(graphs: GraphCount, n: int, names: tuple[str, ...]) -> Text:
    share = graphs.kernel_share
    return Text.assemble(
        ("Graph launches", "bold"), f" ({', '.join(names) or 'cudaGraphLaunch, hipGraphLaunch'}): ",
        f"{_fmt(graphs.launches / n, 2)} per step ({graphs.launches:,} in all), launching "
        f"{_fmt(graphs.kernels / n, 2)} GPU kernels per step ({graphs.kernels:,} in all, "
        f"{'n/a' if share is None else f'{100 * share:.1f}%'} of the GPU kernels; "
        f"{fmt_ms(graphs.kernel_us / n)} ms of kernel time per step) and {graphs.other_work:,} copies "
        f"and memsets")


def copy_parts(copies: CopyReport | None, per_step: bool = True) -> list:
    """Copies by kind (per device, mean per step, and each step) and graph launches, as rich renderables."""
    if copies is None:
        return []
    if not copies.available:
        return [Text.assemble(("Copies and graph launches", "bold"), f": not available ({copies.reason})")]
    n = copies.n_steps
    steps = ("[no step markers: whole trace = 1 step]" if copies.steps == (-1,) else
             f"[{len(copies.steps)} steps ({copies.steps[0]}..{copies.steps[-1]})]")
    parts: list = []
    if copies.copies:
        table = compact_table("device", ("copies", "MB", "ms", "copies\nin all", "MB\nin all", "ms\nin all"),
                              text_columns=("kind",),
                              caption="per step: figures over the steps ÷ their number; MB: 10^6 bytes, over the "
                                      "copies that record a size")
        rows: list[tuple[str, str, CopyCount]] = [(d.device, k, c) for d in copies.devices for k, c in d.copies.items()]
        if len(copies.devices) > 1:
            rows += [("all devices", k, c) for k, c in copies.copies.items()]
        for device, kind, c in rows:
            table.add_row(Text(device), kind, _fmt(c.count / n, 2), fmt_mb(c.bytes / n), fmt_ms(c.time_us / n),
                          f"{c.count:,}", fmt_mb(c.bytes), fmt_ms(c.time_us))
        parts += [Text.assemble(("Copies by kind per step", "bold"), " ", steps), table]
        unknown = sum(c.unknown_bytes for c in copies.copies.values())
        if unknown:
            parts.append(Text(f"{unknown:,} copies record no size: counted, not in the MB", style="dim"))
    else:
        parts.append(Text.assemble(("Copies", "bold"), ": none in the counted steps"))
    graphs = copies.graphs
    if graphs.launches or graphs.kernels:
        parts.append(_graph_line(graphs, n, copies.graph_launch_names))
    else:
        parts.append(Text.assemble(("Graph launches", "bold"), ": none (no cudaGraphLaunch or hipGraphLaunch)"))
    kinds = list(copies.copies)
    if per_step and copies.steps != (-1,) and (kinds or graphs.launches):
        table = compact_table("step", (*(f"{k}\ncopies" for k in kinds), *(f"{k}\nms" for k in kinds),
                                       *(("graph\nlaunches", "graph\nkernels") if graphs.launches else ())),
                              title="Copies and graph launches in each step")
        for step in copies.steps:
            of_step, g = copies.step_copies(step), copies.step_graphs(step)
            table.add_row(str(step), *(f"{of_step.get(k, CopyCount()).count:,}" for k in kinds),
                          *(fmt_ms(of_step.get(k, CopyCount()).time_us) for k in kinds),
                          *((f"{g.launches:,}", f"{g.kernels:,}") if graphs.launches else ()))
        parts.append(table)
    if copies.outside_steps:
        parts.append(Text(f"{copies.outside_steps:,} copies, graph launches and GPU kernels lie outside the step "
                          f"markers: not counted above", style="dim"))
    return parts


def render_table(report: OpCountReport, *, by: str, console: Console) -> None:
    console.print(Text.assemble((report.source, "bold"), f" ({report.source_format})"))
    parts = [*_graph_table("User graph (as built; requested devices)", report.user_graph, by),
             *_graph_table("Runtime graph (partitions after optimization; assigned devices)",
                           report.runtime_graph, by),
             *_kernel_table(report.kernels, by),
             *copy_parts(report.copies),
             *_launch_parts(report.launches, console.width)]
    for part in parts:
        console.print(part)
    render_definitions({**report.definitions, **(report.copies.definitions if report.copies else {})}, console)


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
    if report.copies is None:
        doc.pop("copies")
    else:
        doc["copies"] = report.copies.as_dict()
    if report.launches is None:
        doc.pop("launches")
    else:
        doc["launches"] = report.launches.as_dict()
    return doc


def comparison_document(comparison: OpCountComparison) -> dict:
    return {
        "left": to_document(comparison.left),
        "right": to_document(comparison.right),
        "ratios": [{"metric": r.metric, "left": r.left, "right": r.right, "ratio": r.ratio}
                   for r in comparison.ratios],
    }
