"""Rendering of ``rnnprof scale`` results: a rich table or one JSON document."""

from __future__ import annotations

from typing import Callable

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from rnnprof.analyzers.scale import ScaleResult, TrainerRow, speedup_definition, trainer_ratio_definition

# --framework torch's --parallel modes as a table's title
PARALLEL_TITLES = {
    "fsdp": "fsdp: FSDP2, fully_shard per block and at the root",
    "hsdp": "hsdp: fully_shard on a 2-D mesh, sharded within a group, replicated across groups",
    "tp": "tp: tensor parallel, attention and MLP projections sliced (ColwiseParallel/RowwiseParallel)",
    "pp": "pp: pipeline stages (torch.distributed.pipelining; mb: micro-batches)",
    "fsdp+tp": "fsdp+tp: tensor parallel within a group, fully_shard across groups",
    "pp+dp": "pp+dp: pipeline stages, each replicated, gradients all-reduced (mb: micro-batches)",
}
MIB = 1024 * 1024


def _mode_title(point, parameter_device: str | None) -> Text:
    if point.parallel in PARALLEL_TITLES:
        title = PARALLEL_TITLES[point.parallel]
    elif point.variable_update == "replicated" and point.all_reduce:
        title = f"replicated, {point.all_reduce} all-reduce"
    elif point.variable_update == "parameter_server" and parameter_device:
        title = f"parameter_server, variables on {parameter_device}"
    else:
        title = point.variable_update
    if point.fake_location:
        title += f"; images made on {point.fake_location}"
    if point.trainer:
        title += f"; trained by {point.trainer}"
    return Text(title, style="table.title")  # a Text title does not get the table's title style by itself


def _columns(batches: int, include_warmup: bool, evaluation: bool = False,
             workers: bool = False, unit: str = "words", layout: bool = False,
             memory: bool = False) -> list[tuple[str, Callable]]:
    """(header, cell of a row) for every column of a mode's table, in order."""
    columns = [("workers", lambda row: str(row.point.workers or 1))] if workers else []
    columns += [("devices" if not workers else "devices\nper worker", lambda row: str(row.point.devices))]
    if layout:
        columns.append(("mesh", lambda row: layout_text(row.point.layout)))
    columns += [
        ("batch per\ndevice", lambda row: str(row.point.per_device_batch)),
        ("batch\ntotal", lambda row: str(row.point.total_batch)),
        (f"time (s)\n{batches} batches", lambda row: f"{row.point.timed.total_seconds:.2f}"),
        (f"{unit}/s", lambda row: f"{row.point.timed.words_per_second:,.0f}"),
    ]
    if include_warmup:
        columns.append((f"{unit}/s\nw/ warm-up", lambda row: f"{row.point.with_warmup.words_per_second:,.0f}"
                        if row.point.with_warmup else "-"))
    if evaluation:
        columns.append((f"eval\n{unit}/s", lambda row: f"{row.point.eval_timed.words_per_second:,.0f}"
                        if row.point.eval_timed else "-"))
    columns.append((STEP_HEADER, lambda row: f"{row.point.timed.median_step_seconds:.3f}"
                                             f"±{row.point.timed.std_step_seconds:.3f}"))
    if memory:
        columns.append((MEMORY_HEADER, lambda row: _mib(row.point.memory.largest_peak if row.point.memory else None)))
        columns.append((STATE_HEADER, lambda row: _mib(row.point.memory.largest_model_state
                                                       if row.point.memory else None)))
    columns.append(("speedup", lambda row: f"{row.speedup:.2f}x"))
    return columns


MEMORY_HEADER = "peak mem\nMiB"
STATE_HEADER = "model state\nMiB"


def _mib(value: int | None) -> str:
    return f"{value / MIB:,.1f}" if value is not None else "-"


def layout_text(layout: dict | None) -> str:
    """A run's ``--parallel`` layout (``torch_layout.Layout.to_dict``) in a few words: the mesh (``dp 2``,
    ``replicate 2 x shard 2``) and a pipeline's stages, their blocks and the micro-batches (``pp 2, 4 stages
    2,1,1,1, 8 mb``)."""
    if not layout:
        return "-"
    text = " x ".join(f"{dim} {size}" for dim, size in zip(layout["mesh_dims"], layout["mesh_shape"]))
    if layout.get("stages"):
        text += (f", {layout['stages']} stages {','.join(map(str, layout['stage_layers']))}, "
                 f"{layout['micro_batches']} mb")
    return text


def memory_definition(sources: dict, rows) -> str | None:
    """What the memory columns measured (the ``PEAK_SOURCES`` text of the sources the rows used)."""
    used = list(dict.fromkeys(row.point.memory.source for row in rows if row.point.memory is not None))
    if not used:
        return None
    return ("peak mem = the largest rank's peak memory over the warm-up and timed steps: "
            + "; ".join(sources.get(source, source) for source in used)
            + ". model state = the largest rank's parameters, gradients and optimizer states after the timed steps "
              "(a sharded tensor: the rank's shard)")


STEP_HEADER = "step (s)\nmedian±std"


def _table(rows, columns, title: Text | None) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)
    for header, _ in columns:
        table.add_column(header, justify="right", no_wrap=True)
    for row in rows:
        table.add_row(*(cell(row) for _, cell in columns))
    return table


def _natural_width(table: Table, console: Console) -> int:
    """The width the table needs without shrinking any column (console.measure caps it at the terminal)."""
    return Measurement.get(console, console.options.update_width(10_000), table).maximum


def render_table(result: ScaleResult, *, model: str, words_definition: str, warmup: int, batches: int,
                 include_warmup: bool, notes: list[str], console: Console,
                 parameter_device: str | None = None, unit: str = "words", memory_sources: dict | None = None) -> None:
    """One table per variable-update mode, then the definitions and notes.

    Figures are never cut short: where the table is wider than the terminal, the step
    times move to a table of their own below it.
    """
    console.print(Text(f"rnnprof scale: {model}, {batches} timed batches after {warmup} warm-up", style="bold"))
    columns = _columns(batches, include_warmup, any(row.point.eval_timed for row in result.rows),
                       any(row.point.workers for row in result.rows), unit,
                       layout=any(row.point.parallel not in (None, "ddp") for row in result.rows),
                       memory=any(row.point.memory is not None for row in result.rows))
    modes = list(dict.fromkeys(row.point.mode for row in result.rows))
    for mode in modes:
        rows = [row for row in result.rows if row.point.mode == mode]
        title = _mode_title(rows[0].point, parameter_device)
        table = _table(rows, columns, title)
        if _natural_width(table, console) <= console.width:
            console.print(table)
            continue
        console.print(_table(rows, [c for c in columns if c[0] != STEP_HEADER], title))
        console.print(_table(rows, [c for c in columns if c[0].split("\n")[0] in ("workers", "devices", STEP_HEADER)
                                    or c[0] == STEP_HEADER], None))
    definition = f"{unit} = {words_definition}; " if words_definition != unit else ""
    console.print(Text(f"{definition}{unit}/s = {unit} in the timed batches / their total time", style="dim"))
    console.print(Text(speedup_definition(unit), style="dim"))
    memory = memory_definition(memory_sources or {}, result.rows)
    if memory:
        console.print(Text(memory, style="dim"))
    for note in list(result.notes) + notes:
        console.print(Text(f"note: {note}", style="bold yellow"))


def to_document(result: ScaleResult, *, config: dict, words_definition: str, device_kind: str,
                notes: list[str], step_definition: str, unit: str = "words", memory_sources: dict | None = None) -> dict:
    """The sweep as JSON; throughput keys are named by ``unit`` (``words_per_second``, ``images_per_second``)."""
    rows = [_row_document(row, unit) for row in result.rows]
    memory = memory_definition(memory_sources or {}, result.rows)
    document = {
        "config": config,
        "device_kind": device_kind,
        "unit": unit,
        "rows": rows,
        "definitions": {
            unit: words_definition,
            f"{unit}_per_second": f"{unit} in the timed batches / total time of the timed batches",
            "speedup": speedup_definition(unit),
            "step_seconds": step_definition,
        },
        "notes": list(result.notes) + notes,
    }
    if memory:
        document["definitions"]["peak_memory_bytes"] = memory
    return document


def _row_document(row, unit: str) -> dict:
    """One row of the sweep (one configuration) as JSON."""
    p = row.point
    entry = {
        "variable_update": p.variable_update,
        "all_reduce": p.all_reduce,
        "devices": p.devices,
        "batch_per_device": p.per_device_batch,
        "batch_total": p.total_batch,
        "timed_batches": p.timed.steps,
        "total_seconds": p.timed.total_seconds,
        unit: p.timed.words,
        f"{unit}_per_second": p.timed.words_per_second,
        "mean_step_seconds": p.timed.mean_step_seconds,
        "median_step_seconds": p.timed.median_step_seconds,
        "std_step_seconds": p.timed.std_step_seconds,
        "speedup": row.speedup,
        "baseline_devices": row.baseline_devices,
        "step_seconds": list(p.step_seconds),
        "warmup_step_seconds": list(p.warmup_step_seconds),
    }
    if p.workers:
        entry["workers"] = p.workers
        entry["baseline_workers"] = row.baseline_workers
        entry["processes"] = [dict(task) for task in p.processes]
    if p.fake_location is not None:
        entry["fake_location"] = p.fake_location
    if p.trainer is not None:
        entry["trainer"] = p.trainer
    if p.parallel is not None:
        entry["parallel"], entry["layout"] = p.parallel, p.layout
    if p.memory is not None:
        entry["peak_memory_bytes"] = p.memory.largest_peak
        entry["peak_memory_bytes_per_rank"] = list(p.memory.peak_per_rank)
        entry["peak_memory_source"] = p.memory.source
        entry["model_state_bytes"] = p.memory.largest_model_state
        entry["model_state_bytes_per_rank"] = list(p.memory.model_state_per_rank)
    if p.with_warmup is not None:
        entry[f"{unit}_per_second_including_warmup"] = p.with_warmup.words_per_second
        entry["total_seconds_including_warmup"] = p.with_warmup.total_seconds
    if p.eval_timed is not None:
        entry[f"eval_{unit}_per_second"] = p.eval_timed.words_per_second
        entry["eval_step_seconds_median"] = p.eval_timed.median_step_seconds
    return entry


TRAINER_TITLES = {"rnnprof": "rnnprof", "distribute": "tf.distribute"}


def render_trainer_tables(rows: tuple[TrainerRow, ...], trainers: list[str], *, model: str, warmup: int,
                          batches: int, unit: str, strategies: dict, notes: list[str], console: Console) -> None:
    """The comparison of trainers: one table per mode (variable update, image location), a row per device
    count with each trainer's throughput and their ratio."""
    console.print(Text(f"rnnprof scale: {model}, {batches} timed batches after {warmup} warm-up, "
                       f"trainers side by side", style="bold"))
    modes = list(dict.fromkeys((row.variable_update, row.fake_location) for row in rows))
    for update, location in modes:
        title = update + (f" ({strategies[update]})" if "distribute" in trainers and update in strategies else "")
        title += f"; images made on {location}" if location else ""
        table = Table(title=Text(title, style="table.title"), title_justify="left", box=box.SIMPLE_HEAD,
                      collapse_padding=True, pad_edge=False)
        table.add_column("devices", justify="right", no_wrap=True)
        for trainer in trainers:
            table.add_column(f"{TRAINER_TITLES.get(trainer, trainer)}\n{unit}/s", justify="right", no_wrap=True)
        if len(trainers) > 1:
            table.add_column("ratio", justify="right", no_wrap=True)
        for row in rows:
            if (row.variable_update, row.fake_location) != (update, location):
                continue
            cells = [str(row.devices)] + [f"{row.words_per_second[t]:,.0f}" if t in row.words_per_second else "-"
                                          for t in trainers]
            if len(trainers) > 1:
                cells.append(f"{row.ratio:.3f}" if row.ratio is not None else "-")
            table.add_row(*cells)
        console.print(table)
    console.print(Text(f"{unit}/s = {unit} in the timed batches / their total time (same warm-up and timing "
                       f"for every trainer)", style="dim"))
    if len(trainers) > 1:
        console.print(Text(trainer_ratio_definition(trainers, unit), style="dim"))
    for note in notes:
        console.print(Text(f"note: {note}", style="bold yellow"))


def trainer_document(rows: tuple[TrainerRow, ...], trainers: list[str], unit: str, strategies: dict) -> dict:
    """The comparison of trainers for the JSON document (``to_document``'s rows carry each run's figures)."""
    return {
        "trainers": list(trainers),
        "strategies": dict(strategies),
        "ratio_definition": trainer_ratio_definition(trainers, unit) if len(trainers) > 1 else None,
        "rows": [{"variable_update": row.variable_update, "fake_location": row.fake_location, "devices": row.devices,
                  f"{unit}_per_second": dict(row.words_per_second), unit: dict(row.words), "ratio": row.ratio}
                 for row in rows],
    }
