"""Rendering of ``rnnprof comm`` results: rich tables, or one JSON document.

Tables fit 80 columns: compact tables (``rnnprof.reports.layout``), two-line headers with units,
per-step rows grouped under a step heading.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from rnnprof.analyzers.collectives import CollectivesReport
from rnnprof.analyzers.comm_result import Breakdown, CommReport, Straggler
from rnnprof.analyzers.device_work import BASIS_EXECUTOR, BASIS_HOST_OPS
from rnnprof.analyzers.idle import IdleCauses
from rnnprof.analyzers.steps import STEP_TIME_DEFINITIONS
from rnnprof.analyzers.tasks import TaskReport
from rnnprof.reports.groups import render_groups
from rnnprof.reports.layout import compact_table, outside_note
from rnnprof.reports.opcount import copy_parts
from rnnprof.reports.units import fmt_ms, fmt_ms_narrow

TOP_COMM_OPS = 10
TOP_COLLECTIVES = 10
_ALIGNMENT = {"none": "as recorded (--align none: the files are taken to share a clock)",
              "start": "aligned on the files' first events (--align start)",
              "collectives": "aligned on the end times of collectives matched across the files (--align collectives)"}

DEFINITIONS = (
    "device activity = kernels, memcpy and memset on a GPU's streams / ops executed on a CPU device "
    "(host-side ops and runtime calls excluded); span = first start to last end of that activity; "
    "busy = union of activity; idle = span - busy; compute/comm = union of each class, mem = memcpy + memset "
    "(they can overlap); % columns are shares of the span; overlap = comm time during which compute runs, "
    "as % of comm time; per step, a step's window on a device runs from its first work to the next step's "
    "window (the last step's to its last work's end): the windows never overlap, and a step's figures are the "
    "device's work in its window, cut at the bounds"
)
_BREAKDOWN_COLUMNS = ("span\nms", "busy\n%", "compute\n%", "comm\n%", "mem\n%", "idle\n%", "comm\nms", "overlap\n%")


def _cells(b: Breakdown) -> list[str]:
    overlap = "-" if b.overlap_pct is None else f"{b.overlap_pct:.1f}"
    shares = (b.busy_us, b.compute_us, b.communication_us, b.memcpy_us + b.memset_us, b.idle_us)
    return [fmt_ms_narrow(b.span_us), *(f"{b.pct(us):.1f}" for us in shares), fmt_ms_narrow(b.communication_us),
            overlap]


def _table(title: str, first: str, numeric: tuple[str, ...], caption: str = "") -> Table:
    return compact_table(first, numeric, title=title, caption=caption)


def breakdown_table(report: CommReport, *, per_step: bool) -> Table:
    """Per device (or per step, device rows under each step) in ms and % of span."""
    if not per_step:
        table = _table("per device", "device", _BREAKDOWN_COLUMNS)
        for d in report.devices:
            table.add_row(Text(d.device.label), *_cells(d.total))
        return table
    times = report.step_time
    table = _table("per step", "step / device", _BREAKDOWN_COLUMNS, step_time_caption(times.basis))
    for step in report.steps:
        us = times.of(step)
        table.add_row(Text(f"step {step}", style="bold"), Text("" if us is None else fmt_ms_narrow(us), style="bold"),
                      end_section=False)
        for d in report.devices:
            if step in d.steps:
                table.add_row(Text(f"  {d.device.label}"), *_cells(d.steps[step]))
    return table


def step_time_caption(basis: str) -> str:
    """What a step row's time is, and why a device's window can differ from it."""
    return (f"a step's row: the step's time as every command gives it ({STEP_TIME_DEFINITIONS[basis]}); a "
            "device's rows: its window in the step (from its first work to the next step's window)")


_IDLE_COLUMNS = ("idle\nms", "host\nwait %", "kernel\nwait %", "other\n%")


def idle_caption(report: CommReport) -> str:
    return (f"% = share of the idle time; host wait = the next kernel's launch started after the gap began; "
            f"kernel wait = otherwise a gap under {report.kernel_wait_us:g} µs; other = otherwise (waiting on an "
            "event, another stream, a dependency); a device's gaps are those of the union of its streams")


def _idle_cells(c: IdleCauses) -> list[str]:
    shares = (c.host_wait_us, c.kernel_wait_us, c.other_us)
    return [fmt_ms_narrow(c.idle_us), *(f"{100 * c.share(us):.1f}" for us in shares)]


def idle_table(report: CommReport, *, per_step: bool) -> Table | None:
    """Idle time by cause per device with its streams beneath (or per step, device rows under each step)."""
    devices = [d for d in report.devices if d.idle is not None]
    if not devices:
        return None
    if not per_step:
        table = _table("idle time by cause", "device / stream", _IDLE_COLUMNS, idle_caption(report))
        for d in devices:
            table.add_row(Text(d.device.label), *_idle_cells(d.idle.total))
            for stream in d.idle.streams:
                table.add_row(Text(f"  {stream.stream}"), *_idle_cells(stream.total))
        return table
    table = _table("idle time by cause per step", "step / device", _IDLE_COLUMNS)
    for step in report.steps:
        table.add_row(Text(f"step {step}", style="bold"), end_section=False)
        for d in devices:
            if step in d.idle.steps:
                table.add_row(Text(f"  {d.device.label}"), *_idle_cells(d.idle.steps[step]))
    return table


def comm_ops_table(report: CommReport, top: int = TOP_COMM_OPS) -> Table:
    """The communication ops with the most summed time: which ops the communication time is."""
    ops = report.comm_ops
    caption = ("ms = durations summed over devices and steps; ops run concurrently, "
               "so the sum can exceed the comm time above")
    if len(ops) > top:
        caption = f"top {top} of {len(ops)} ops; " + caption
    shown = ops[:top]
    with_type = any(op.op_type and op.op_type != op.name for op in shown)  # Kineto names are their types
    columns = (("op type",) if with_type else ()) + ("collective", "devices", "events", "ms")
    table = _table("communication ops by time", "op", columns, caption)
    for op in shown:
        type_cell = (op.op_type if op.op_type != op.name else "",) if with_type else ()
        table.add_row(Text(op.name), *map(Text, type_cell), Text(op.collective_type), str(op.devices),
                      f"{op.events:,}", fmt_ms_narrow(op.total_us))
    return table


def straggler_table(stragglers: tuple[Straggler, ...]) -> Table:
    title = "stragglers: per step, the device that finished last and the one that started communication last"
    caption = "+ vs median / earliest: how much later, in ms, than the median / earliest device of that kind"
    table = _table(title, "step", ("finished\nlast", "+ vs\nmedian", "+ vs\nearliest",
                                   "started\ncomm last", "+ vs\nearliest"), caption)
    for s in stragglers:
        table.add_row("all" if s.step is None else str(s.step), Text(s.last_to_finish.label),
                      fmt_ms_narrow(s.finish_lag_vs_median_us), fmt_ms_narrow(s.finish_lag_vs_earliest_us),
                      Text(s.last_comm_start.label if s.last_comm_start is not None else "-"),
                      fmt_ms_narrow(s.comm_start_lag_vs_earliest_us))
    return table


def alignment_text(alignment: dict) -> Text:
    """Which alignment put the files on one clock, and each one's offset against the first."""
    method = alignment.get("method", "none")
    line = Text(f"clocks: {_ALIGNMENT.get(method, method)}")
    offsets = alignment.get("offsets", [])
    if method != "none" and len(offsets) > 1:
        reference = ", ".join(offsets[0]["ranks"]) or offsets[0]["source"]
        parts = []
        for o in offsets[1:]:
            who = ", ".join(o["ranks"]) or o["source"]
            part = f"{who} {fmt_ms(o['offset_us'], signed=True)} ms"
            if o.get("spread_us") is not None:
                part += f" (spread {fmt_ms(o['spread_us'])} ms, {o['collectives']} collectives)"
            parts.append(part)
        line.append(f"; clock offsets against {reference}: " + "; ".join(parts))
    return line


def collectives_table(collectives: CollectivesReport, top: int = TOP_COLLECTIVES) -> Table:
    """The collectives matched across ranks with the largest arrival skew."""
    shown = sorted(collectives.collectives, key=lambda c: -c.skew_us)[:top]
    caption = ("skew = last rank's start - first rank's start; waited = the other ranks' wait for the last one; "
               "# = sequence number (seq) or k-th of its name in its group (order)")
    if len(collectives.collectives) > top:
        caption = f"top {top} of {len(collectives.collectives)} by skew; " + caption
    table = _table("collectives across ranks: who arrived last", "collective",
                   ("collective\ntype", "#", "ranks", "last\nrank", "skew\nms", "waited\nms"), caption)
    for c in shown:
        name = c.name.split("(")[0]
        table.add_row(Text(f"{name} [{c.group}]" if c.group else name), Text(c.collective_type),
                      f"{c.index} {c.matched_by}",
                      str(len(c.arrivals)), Text(c.last.worker), fmt_ms_narrow(c.skew_us),
                      fmt_ms_narrow(c.caused_wait_us))
    return table


def ranks_table(collectives: CollectivesReport) -> Table:
    """Per rank: how often it arrived last at a collective, the waiting it caused and the waiting it did."""
    caption = ("caused = the other ranks' wait at the collectives it arrived last at; waited = its own wait for "
               "the last rank")
    table = _table("ranks at collectives", "rank", ("collectives", "arrived\nlast", "caused\nms", "waited\nms"),
                   caption)
    for r in collectives.ranks:
        table.add_row(Text(r.worker), str(r.collectives), str(r.arrived_last), fmt_ms_narrow(r.caused_wait_us),
                      fmt_ms_narrow(r.waited_us))
    return table


def straggler_text(collectives: CollectivesReport, verdict=None) -> Text:
    """The straggler line; ``verdict`` (``noise.Significance`` of its lateness per step): within the run's
    jitter, no rank is called a straggler."""
    if collectives.straggler is None:
        return Text(f"collectives: none matched across ranks ({collectives.unmatched} seen on one rank only)",
                    style="yellow")
    rank = next(r for r in collectives.ranks if r.worker == collectives.straggler)
    if verdict is not None and not verdict.significant:
        return Text.assemble(("straggler: ", "bold"),
                             f"no straggler beyond the run's jitter ({collectives.straggler} arrived last at "
                             f"{rank.arrived_last} of {rank.collectives} collectives; {verdict.describe()})")
    beyond = f" ({verdict.describe()}, confidence {verdict.confidence:.2f})" if verdict is not None else ""
    return Text.assemble(("straggler: ", "bold"), collectives.straggler,
                         f" arrived last at {rank.arrived_last} of {rank.collectives} collectives, costing the "
                         f"other ranks {fmt_ms_narrow(rank.caused_wait_us)} ms of waiting{beyond}")


def render_collectives(report: CommReport, console: Console) -> None:
    """The collectives matched across ranks, per collective and per rank, and the straggler rank."""
    collectives = report.collectives
    if collectives is None:
        return
    if collectives.collectives:
        console.print(collectives_table(collectives))
        console.print(ranks_table(collectives))
    console.print(straggler_text(collectives, report.straggler_significance))


TASKS_CAPTION = ("busy / comm = union of the task's device activity / communication; from other tasks = union "
                 "of its fetches of tensors (RecvTensor) and collective chunks (RecvBuf) from other tasks")


def tasks_table(tasks: TaskReport) -> Table:
    """Per task of a gRPC cluster."""
    table = _table("per task", "task", ("busy\nms", "comm\nms", "from other\ntasks ms", "fetches"), TASKS_CAPTION)
    for t in tasks.tasks:
        table.add_row(Text(t.task), fmt_ms_narrow(t.busy_us), fmt_ms_narrow(t.communication_us),
                      fmt_ms_narrow(t.cross_task_us), f"{t.cross_task_events:,}")
    return table


def straggler_workers_table(tasks: TaskReport) -> Table:
    caption = "+ vs median / earliest: how much later, in ms, the last worker finished than the median / earliest"
    table = _table("straggler worker: per step, the worker task that finished last", "step",
                   ("worker", "+ vs\nmedian", "+ vs\nearliest"), caption)
    for s in tasks.stragglers:
        table.add_row("all" if s.step is None else str(s.step), Text(s.last_to_finish),
                      fmt_ms_narrow(s.lag_vs_median_us), fmt_ms_narrow(s.lag_vs_earliest_us))
    return table


def render_tasks(tasks, console: Console) -> None:
    """The cluster's per-task tables, when the trace holds several tasks."""
    if tasks is None or not tasks.tasks:
        return
    console.print(tasks_table(tasks))
    if tasks.stragglers:
        console.print(straggler_workers_table(tasks))


def no_idle_causes(report: CommReport) -> list[tuple[list[str], str]]:
    """The devices with idle time but no idle time by cause, by kind of device, each kind's labels with why."""
    without = [d for d in report.devices if d.idle is None and d.total.idle_us > 0]
    why = {BASIS_HOST_OPS: "ranks without a GPU, measured by their host operators: they launch nothing, so no idle "
                           "gap waits on a launch; their idle time is when no traced operator ran (Python, data "
                           "loading, untraced code)",
           "cpu": "CPU devices run their own ops: they launch nothing, so no idle gap waits on a launch",
           "gpu": "the trace links no launch call to this GPU work (a TensorFlow timeline records none; a PyTorch "
                  "profiler trace of GPU work does)"}
    groups: dict[str, list[str]] = {}
    for d in without:
        kind = BASIS_HOST_OPS if d.basis == BASIS_HOST_OPS else "gpu" if d.device.kind == "gpu" else "cpu"
        groups.setdefault(kind, []).append(d.device.label)
    return [(labels, why[kind]) for kind, labels in groups.items()]


def render_table(report: CommReport, *, per_step: bool, console: Console) -> None:
    sources = ", ".join(report.sources) or report.source_format
    console.print(Text(f"rnnprof comm: {sources}", style="bold", overflow="fold"))
    if report.alignment is not None:
        console.print(alignment_text(report.alignment))
    if report.step_selection:
        console.print(Text(f"steps {_step_list(report.steps)} ({report.step_selection})", overflow="fold"))
    console.print(breakdown_table(report, per_step=False))
    idle = idle_table(report, per_step=False)
    if idle is not None:
        console.print(idle)
    without_causes = no_idle_causes(report)
    if without_causes:
        console.print(Text("idle time by cause: " + "; ".join(f"not for {', '.join(labels)}: {why}"
                                                                for labels, why in without_causes),
                           style="dim", overflow="fold"))
    outside = outside_note(report.outside_steps, selected=bool(report.step_selection))
    if outside:
        console.print(Text(outside, style="dim", overflow="fold"))
    if per_step and report.steps:
        console.print(breakdown_table(report, per_step=True))
        idle = idle_table(report, per_step=True)
        if idle is not None:
            console.print(idle)
    elif per_step:
        console.print(Text("no step markers in the trace: per-step figures unavailable", style="yellow"))
    if report.comm_ops:
        console.print(comm_ops_table(report))
    render_copies(report, per_step=per_step, console=console)
    if report.stragglers:
        console.print(straggler_table(report.stragglers))
    elif len(report.devices) > 1:
        console.print(Text("stragglers: no step was seen on two or more devices of one kind", style="yellow"))
    render_collectives(report, console)
    render_groups(report.groups, report.group_stragglers, console)
    fallback = [d.device.label for d in report.devices if d.basis == BASIS_EXECUTOR]
    if fallback:
        console.print(Text(f"note: {', '.join(fallback)}: no GPU stream records in the trace; measured by the "
                           "executor's ops (host-side launches) instead", style="bold yellow"))
    cpu_ranks = _cpu_rank_note(report)
    if cpu_ranks:
        console.print(Text(f"note: {cpu_ranks}", style="bold yellow"))
    if not any(d.total.communication_us > 0 for d in report.devices):
        console.print(Text("note: no communication found; add --comm-pattern REGEX if your collectives have other names",
                           style="bold yellow"))
    console.print(Text(DEFINITIONS, style="dim"))


def _step_list(steps: tuple[int, ...]) -> str:
    if len(steps) > 1 and list(steps) == list(range(steps[0], steps[-1] + 1)):
        return f"{steps[0]} to {steps[-1]}"
    return ", ".join(map(str, steps))


def _cpu_rank_note(report: CommReport) -> str:
    """What the figures of ranks measured by their host operators mean ("" when there are none)."""
    labels = [d.device.label for d in report.devices if d.basis == BASIS_HOST_OPS]
    if not labels:
        return ""
    return (f"{', '.join(labels)}: ranks without a GPU, measured by their host operators: compute = union of "
            "cpu_op time (nested operators once) except while their thread is in a collective, comm = union of "
            "c10d::*/gloo:* collectives; compute here is operator time on the host, not kernel time as on a GPU")


def to_document(report: CommReport, *, per_step: bool) -> dict:
    document = report.as_dict()
    if _cpu_rank_note(report):
        document["notes"] = [_cpu_rank_note(report)]
    if not per_step:
        for device in document["devices"]:
            device.pop("steps")
            idle = device["idle_by_cause"]
            if idle is not None:
                idle.pop("steps")
                for stream in idle["streams"]:
                    stream.pop("steps")
    if not per_step and document.get("copies"):
        document["copies"].pop("per_step")
        for device in document["copies"]["devices"]:
            device.pop("per_step")
    document["definitions"] = DEFINITIONS
    return document


def json_document(report: CommReport, tasks, left_out: dict[str, int], *, per_step: bool) -> dict:
    """``rnnprof comm --json``'s document: the report's, the counts of events the loaders left out, and the
    per-task figures when the trace holds several tasks."""
    document = to_document(report, per_step=per_step)
    document["left_out"] = left_out
    if tasks is not None and tasks.tasks:
        document.update(tasks.as_dict())
    return document


def render_copies(report: CommReport, *, per_step: bool, console: Console) -> None:
    """Copies by kind and graph launches (``analyzers.copies``), as count-ops shows them."""
    for part in copy_parts(report.copies, per_step=per_step):
        console.print(part)


