"""Rendering of ``rnnprof comm`` results: rich tables and straggler lines, or one JSON document."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table
from rich.text import Text

from rnnprof.analyzers.comm import BASIS_EXECUTOR, Breakdown, CommReport, Straggler

DEFINITIONS = (
    "device activity = kernels, memcpy and memset on a GPU's streams / ops executed on a CPU device "
    "(host-side ops and runtime calls excluded); span = first start to last end of that activity; "
    "busy = union of activity; idle = span - busy; compute/comm = union of each class, mem = memcpy + memset "
    "(they can overlap); % columns are shares of the span; overlap = comm time during which compute runs, "
    "as % of comm time"
)


def _ms(us: float) -> str:
    return f"{us / 1000:,.2f}"


def _cells(b: Breakdown) -> list[str]:
    overlap = "-" if b.overlap_pct is None else f"{b.overlap_pct:.1f}"
    shares = (b.busy_us, b.compute_us, b.communication_us, b.memcpy_us + b.memset_us, b.idle_us)
    return [_ms(b.span_us), *(f"{b.pct(us):.1f}" for us in shares), _ms(b.communication_us), overlap]


def _table(title: str, first_columns: list[str]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in first_columns:
        table.add_column(column, no_wrap=True)
    for column in ("span ms", "busy %", "compute %", "comm %", "mem %", "idle %", "comm ms", "overlap %"):
        table.add_column(column, justify="right")
    return table


def _ms_or_dash(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000:,.3f} ms"


def straggler_line(s: Straggler) -> str:
    where = "whole trace" if s.step is None else f"step {s.step}"
    line = (
        f"{where}: {s.last_to_finish.label} finished last, "
        f"+{_ms_or_dash(s.finish_lag_vs_median_us)} vs median, +{_ms_or_dash(s.finish_lag_vs_earliest_us)} vs earliest"
    )
    if s.last_comm_start is not None:
        line += (
            f"; {s.last_comm_start.label} started communication last, "
            f"+{_ms_or_dash(s.comm_start_lag_vs_earliest_us)} vs earliest"
        )
    return line


def render_table(report: CommReport, *, per_step: bool, console: Console) -> None:
    sources = ", ".join(report.sources) or report.source_format
    table = _table(f"rnnprof comm: {sources}", ["device"])
    for d in report.devices:
        table.add_row(d.device.label, *_cells(d.total))
    console.print(table)
    if per_step and report.steps:
        steps = _table("per step", ["step", "device"])
        for step in report.steps:
            for d in report.devices:
                if step in d.steps:
                    steps.add_row(str(step), d.device.label, *_cells(d.steps[step]))
        console.print(steps)
    elif per_step:
        console.print(Text("no step markers in the trace: per-step figures unavailable", style="yellow"))
    if report.stragglers:
        console.print(Text("stragglers", style="bold"))
        for s in report.stragglers:
            console.print(Text(f"  {straggler_line(s)}"))
    elif len(report.devices) > 1:
        console.print(Text("stragglers: no step was seen on two or more devices", style="yellow"))
    fallback = [d.device.label for d in report.devices if d.basis == BASIS_EXECUTOR]
    if fallback:
        console.print(Text(f"note: {', '.join(fallback)}: no GPU stream records in the trace; measured by the "
                           "executor's ops (host-side launches) instead", style="bold yellow"))
    if not any(d.total.communication_us > 0 for d in report.devices):
        console.print(Text("note: no communication found; add --comm-pattern REGEX if your collectives have other names",
                           style="bold yellow"))
    console.print(Text(DEFINITIONS, style="dim"))


def to_document(report: CommReport, *, per_step: bool) -> dict:
    document = report.as_dict()
    if not per_step:
        for device in document["devices"]:
            device.pop("steps")
    document["definitions"] = DEFINITIONS
    return document


def render_json(document: dict, console: Console) -> None:
    console.print(json.dumps(document, indent=2), markup=False, highlight=False, soft_wrap=True, emoji=False)
