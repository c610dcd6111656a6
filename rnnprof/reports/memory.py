"""Formatting of ``rnnprof memory``: text tables, one JSON document, and a chart of each device's memory over
time stacked by category."""

from __future__ import annotations

import dataclasses

from rich.console import Console
from rich.text import Text

from rnnprof.analyzers.memory import BASELINE_TOTAL, CATEGORIES, DeviceMemory, Imbalance, MemoryReport, PipelineMemory
from rnnprof.reports.charts import Figure, altair
from rnnprof.reports.fit import Column, fit_table
from rnnprof.reports.units import fmt_mb

TOP = 5  # operators shown per device in the text tables
WINDOW_START = {"process_rss": "the process's resident memory: more than tensors, not in the series",
                "cuda_allocator": "the CUDA allocator's count"}
CATEGORY_COLORS = ("#54a24b", "#eeca3b", "#4c4c4c", "#b279a2", "#e45756", "#4c78a8", "#72b7b2", "#bab0ac",
                   "#d9d9d9")
DEFINITIONS = {
    "allocated": "bytes the allocator handed out and not yet freed: its baseline plus the running sum of the "
                 "trace's allocations and frees",
    "reserved": "bytes the allocator holds from the device (the caching allocator's Total Reserved)",
    "fragmentation": "reserved minus allocated at the peak: held by the allocator, not by any tensor",
    "categories": "PyTorch memory profiler's, told from each allocation's phase and lifetime (docs/commands/"
                  "memory.md); before_window: allocated before the trace began",
    "growth": "median step-to-step change of allocated bytes at each step's end; a leak when above 3x its median "
              "absolute deviation and 0.1% of the peak, over 4 steps or more",
    "missing frees": "blocks whose address is allocated again before the records free them: their free went "
                     "unrecorded (made on a thread without the profiler's state); growth and step peaks leave out "
                     "every block of their sizes, and a leak or an imbalance must exceed the most bytes a step lost",
    "imbalance": "a peak above the median of the other devices' of its kind by more than 5% of it, in the median "
                 "step and above them in every step, or in every step from the one it starts at to the last (3 "
                 "steps or more, having taken more than 5% at that step: from_step, taken); where each step is "
                 "recorded apart (TensorFlow), the device also allocates more than 5% above their median in a step; "
                 "in a pipeline, only ranks of the same stage are compared",
    "unsharded": "FSDP2's gathered parameters live at a device's peak, by module: the bytes allocated inside "
                 "its FSDP::all_gather_copy_out (<module>) range (each parameter's unsharded storage, padded to a "
                 "multiple of the shard group) and inside FSDP::all_gather (<module>) (the all-gather's flat input "
                 "and output buffers)",
    "pipeline": "a pipeline's stages hold different layers and, under 1F1B, the activations of min(p - stage, m) "
                "micro-batches at once (GPipe: all m): their peaks are compared as the schedule explains them, not "
                "as replicas; explained: the highest peak is on a stage that holds more micro-batches than another",
}


def to_document(report: MemoryReport) -> dict:
    return {"source": report.source, "steps": report.steps, "unusable": report.unusable,
            "categories": list(CATEGORIES),
            "devices": [dataclasses.asdict(d) for d in report.devices],
            "imbalances": [dataclasses.asdict(i) for i in report.imbalances],
            "pipeline": None if report.pipeline is None else dataclasses.asdict(report.pipeline),
            "definitions": DEFINITIONS}


def _mb(value: int | None) -> str:
    return "-" if value is None else fmt_mb(value)


def render_memory(report: MemoryReport, console: Console) -> None:
    width = console.width
    rows = [[Text(d.device), fmt_mb(d.peak.allocated), _mb(d.peak.reserved), _mb(d.peak.fragmentation),
             str(d.peak.step) if d.peak.step >= 0 else "-", Text(d.peak.operator or "-")] for d in report.devices]
    console.print(fit_table(width, [Column("device", "label"), Column("peak MB"), Column("reserved\nMB", drop=2),
                                     Column("unused\nMB", drop=1), Column("step"), Column("operator at the peak",
                                                                                          "name")],
                            rows, title=f"memory of {report.source} (MB = 10^6 bytes)"))
    for device in report.devices:
        _render_device(device, width, console)
    if report.pipeline is not None:
        console.print(Text(pipeline_note(report.pipeline)))
    for imbalance in report.imbalances:
        ops = ", ".join(f"{s.name} {fmt_mb(s.bytes)}" for s in imbalance.operators[:3])
        more = f", allocates {fmt_mb(imbalance.allocates_more)} MB more a step" if imbalance.allocates_more > 0 else ""
        console.print(Text(f"imbalance: {imbalance.device} peaks {fmt_mb(imbalance.excess)} MB above the others' "
                           f"median ({fmt_mb(imbalance.others_median)} MB){_since(imbalance)}{more}"
                           + (f"; most of it: {ops}" if ops else "")))
        if imbalance.other_replicas:
            held = sum(s.bytes for s in imbalance.other_replicas)
            names = ", ".join(s.name for s in imbalance.other_replicas[:3])
            console.print(Text(f"  {imbalance.device} holds {fmt_mb(held)} MB for other replicas: {names}"))
    if report.unusable:
        console.print(Text(f"left out: {report.unusable:,} memory events without a number for Bytes"))


def pipeline_note(pipeline: PipelineMemory) -> str:
    """One sentence on a pipeline's stages' peaks: the highest against the lowest, and whether the schedule explains
    the difference."""
    top = max(pipeline.peaks, key=lambda p: p.peak)
    low = min(pipeline.peaks, key=lambda p: p.peak)
    schedule = {"1f1b": "1F1B", "gpipe": "GPipe"}.get(pipeline.schedule, pipeline.schedule or "its schedule")
    said = (f"pipeline ({schedule}, {pipeline.ranks} stages, {pipeline.micro_batches} micro-batches): {top.device} "
            f"(stage {top.position}) peaks {fmt_mb(top.peak - low.peak)} MB above {low.device} (stage {low.position})")
    if pipeline.explained:
        return (f"{said}: expected, {schedule} has stage {top.position} hold the activations of up to "
                f"{top.in_flight} micro-batches at once (at its peak {fmt_mb(top.activation)} MB of activations) "
                f"and stage {low.position} of {low.in_flight} ({fmt_mb(low.activation)} MB); ranks of different "
                f"stages are not compared as replicas")
    return (f"{said}; the stages hold different layers, so ranks of different stages are not compared as "
            f"replicas")


def _since(imbalance: Imbalance) -> str:
    """Where the imbalance starts mid-window: from which step, and what the device took then and kept."""
    if imbalance.from_step < 0:
        return ""
    return (f" from step {imbalance.from_step} to step {imbalance.last_step}: it took {fmt_mb(imbalance.taken)} MB "
            f"at step {imbalance.from_step} and kept it")


def _render_device(device: DeviceMemory, width: int, console: Console) -> None:
    peak = device.peak
    rows = [[s.name, fmt_mb(s.bytes), f"{100 * s.bytes / peak.allocated:.1f}%" if peak.allocated else "-"]
            for s in peak.by_category]
    rows += [[Text(s.name), fmt_mb(s.bytes), f"{100 * s.bytes / peak.allocated:.1f}%" if peak.allocated else "-"]
             for s in peak.by_operator[:TOP]]
    split = len(peak.by_category)
    table_rows = [["by category", "", ""], *rows[:split], ["by allocating operator", "", ""], *rows[split:]]
    console.print(fit_table(width, [Column("", "name", least=24), Column("MB"), Column("share")], table_rows,
                            title=f"{device.device}: live at the peak"))
    if device.unsharded:
        _render_unsharded(device, width, console)
    growth = device.growth
    if growth.reason:
        line = f"{device.device}: growth per step not judged: {growth.reason}"
    else:
        verdict = "a leak" if growth.leak else "within the steps' jitter" if growth.per_step > 0 else "none"
        line = (f"{device.device}: growth {fmt_mb(growth.per_step)} MB/step over {len(growth.step_end)} steps "
                f"(jitter {fmt_mb(growth.jitter)} MB): {verdict}")
    console.print(Text(line))
    if device.missing_frees:
        where = ", ".join(f"{s.name} {fmt_mb(s.bytes)} MB" for s in device.missing_operators[:2])
        sizes = ", ".join(f"{b:,}" for b in device.left_out_sizes[:4])
        console.print(Text(f"{device.device}: {device.missing_frees} free(s) missing from the records (an address "
                           f"allocated again while they held it; allocated in {where}): growth and step peaks leave "
                           f"out blocks of {sizes} bytes, and a leak or an imbalance must exceed "
                           f"{fmt_mb(device.missing_step_bytes)} MB"))
    known = device.baseline_source == BASELINE_TOTAL
    console.print(Text(f"{device.device}: baseline " + (f"{fmt_mb(device.baseline)} MB: " if known else "")
                       + device.baseline_source))
    if device.window_start is not None:
        what = WINDOW_START.get(device.window_start_source, device.window_start_source)
        console.print(Text(f"{device.device}: {fmt_mb(device.window_start)} MB in use when the window began "
                           f"({what})"))
    if device.allocator_max is not None:
        console.print(Text(f"{device.device}: the CUDA allocator's peak over the process: "
                           f"{fmt_mb(device.allocator_max)} MB"))
    console.print(Text(""))


def _render_unsharded(device: DeviceMemory, width: int, console: Console) -> None:
    """What FSDP had gathered at the peak, by module."""
    rows = [[Text(u.module), fmt_mb(u.parameters), fmt_mb(u.buffers)] for u in device.unsharded]
    total = sum(u.parameters + u.buffers for u in device.unsharded)
    share = f"{100 * total / device.peak.allocated:.1f}%" if device.peak.allocated else "-"
    console.print(fit_table(width, [Column("module", "label"), Column("unsharded\nparameters MB"),
                                    Column("all-gather\nbuffers MB")], rows,
                            title=f"{device.device}: FSDP's gathered parameters live at the peak ({share} of it)"))


def memory_chart(report: MemoryReport) -> Figure:
    """Each device's allocated memory over time, stacked by category, one panel per device."""
    alt = altair()
    rows = []
    for device in report.devices:
        start = device.timeline[0].ts_us if device.timeline else 0.0
        used = [k for k in range(len(CATEGORIES)) if any(p.bytes[k] for p in device.timeline)]
        rows += [{"device": device.device, "ms": (point.ts_us - start) / 1000, "category": CATEGORIES[k],
                  "MB": point.bytes[k] / 1e6} for point in device.timeline for k in used]
    chart = alt.Chart(alt.Data(name="memory"), title="Allocated memory by category").mark_area().encode(
        x=alt.X("ms:Q", title="ms from the device's first allocator record"),
        y=alt.Y("sum(MB):Q", title="MB", stack="zero"),
        color=alt.Color("category:N", title=None, sort=list(CATEGORIES),
                        scale=alt.Scale(domain=list(CATEGORIES), range=list(CATEGORY_COLORS)),
                        legend=alt.Legend(orient="bottom")),
        tooltip=[alt.Tooltip("device:N"), alt.Tooltip("category:N"), alt.Tooltip("MB:Q", format=",.2f")],
    ).properties(width=640, height=160).facet(row=alt.Row("device:N", title=None))
    return Figure(chart, {"memory": rows})
