"""Rendering of ``rnnprof scale`` results: a rich table or one JSON document."""

from __future__ import annotations

import json

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from rnnprof.analyzers.scale import SPEEDUP_DEFINITION, ScaleResult


def _mode_title(point, parameter_device: str | None) -> str:
    if point.variable_update == "replicated" and point.all_reduce:
        return f"replicated, {point.all_reduce} all-reduce"
    if point.variable_update == "parameter_server" and parameter_device:
        return f"parameter_server, variables on {parameter_device}"
    return point.variable_update


def render_table(result: ScaleResult, *, model: str, words_definition: str, warmup: int, batches: int,
                 include_warmup: bool, notes: list[str], console: Console,
                 parameter_device: str | None = None) -> None:
    """One table per variable-update mode, then the definitions and notes."""
    console.print(Text(f"rnnprof scale: {model}, {batches} timed batches after {warmup} warm-up", style="bold"))
    modes = list(dict.fromkeys(row.point.variable_update for row in result.rows))
    for mode in modes:
        rows = [row for row in result.rows if row.point.variable_update == mode]
        table = Table(title=_mode_title(rows[0].point, parameter_device), title_justify="left",
                      box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)
        table.add_column("devices", justify="right", no_wrap=True)
        table.add_column("batch per\ndevice", justify="right", no_wrap=True)
        table.add_column("batch\ntotal", justify="right", no_wrap=True)
        table.add_column(f"time (s)\n{batches} batches", justify="right", no_wrap=True)
        table.add_column("words/s", justify="right", no_wrap=True)
        if include_warmup:
            table.add_column("words/s\nw/ warm-up", justify="right", no_wrap=True)
        table.add_column("step (s)\nmedian±std", justify="right", no_wrap=True)
        table.add_column("speedup", justify="right", no_wrap=True)
        for row in rows:
            p = row.point
            cells = [str(p.devices), str(p.per_device_batch), str(p.total_batch),
                     f"{p.timed.total_seconds:.2f}", f"{p.timed.words_per_second:,.0f}"]
            if include_warmup:
                cells.append(f"{p.with_warmup.words_per_second:,.0f}" if p.with_warmup else "-")
            cells.append(f"{p.timed.median_step_seconds:.3f}±{p.timed.std_step_seconds:.3f}")
            cells.append(f"{row.speedup:.2f}x")
            table.add_row(*cells)
        console.print(table)
    console.print(Text(f"words = {words_definition}; words/s = words in the timed batches / their total time",
                       style="dim"))
    console.print(Text(SPEEDUP_DEFINITION, style="dim"))
    for note in list(result.notes) + notes:
        console.print(Text(f"note: {note}", style="bold yellow"))


def to_document(result: ScaleResult, *, config: dict, words_definition: str, device_kind: str,
                notes: list[str]) -> dict:
    rows = []
    for row in result.rows:
        p = row.point
        entry = {
            "variable_update": p.variable_update,
            "all_reduce": p.all_reduce,
            "devices": p.devices,
            "batch_per_device": p.per_device_batch,
            "batch_total": p.total_batch,
            "timed_batches": p.timed.steps,
            "total_seconds": p.timed.total_seconds,
            "words": p.timed.words,
            "words_per_second": p.timed.words_per_second,
            "mean_step_seconds": p.timed.mean_step_seconds,
            "median_step_seconds": p.timed.median_step_seconds,
            "std_step_seconds": p.timed.std_step_seconds,
            "speedup": row.speedup,
            "baseline_devices": row.baseline_devices,
            "step_seconds": list(p.step_seconds),
            "warmup_step_seconds": list(p.warmup_step_seconds),
        }
        if p.with_warmup is not None:
            entry["words_per_second_including_warmup"] = p.with_warmup.words_per_second
            entry["total_seconds_including_warmup"] = p.with_warmup.total_seconds
        rows.append(entry)
    return {
        "config": config,
        "device_kind": device_kind,
        "rows": rows,
        "definitions": {
            "words": words_definition,
            "words_per_second": "words in the timed batches / total time of the timed batches",
            "speedup": SPEEDUP_DEFINITION,
            "step_seconds": "wall time of each timed session.run call; warm-up batches are excluded",
        },
        "notes": list(result.notes) + notes,
    }


def render_json(document: dict, console: Console) -> None:
    console.print(json.dumps(document, indent=2), markup=False, highlight=False, soft_wrap=True, emoji=False)
