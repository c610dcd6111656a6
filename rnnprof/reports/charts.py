"""Charts as Vega-Lite specs (altair), and ``--plot`` files rendered by vl-convert (PNG or SVG).

Each builder takes an analysis' result and returns a ``Figure``: an altair chart and its data as
named datasets, so a spec is data: the HTML report embeds it, ``save_chart`` renders it without a
browser, and tests count its marks. Charts never compute figures of their own beyond arranging the result's
(e.g. compute alone = compute - overlap, for stacking).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from rnnprof.analyzers.comm_result import CommReport
from rnnprof.analyzers.critical_path import StepPath
from rnnprof.analyzers.opcount import OpCountReport
from rnnprof.analyzers.roofline import RooflineReport
from rnnprof.analyzers.timeline import Timeline
from rnnprof.analyzers.topops import TimedOp
from rnnprof.errors import UsageError
from rnnprof.files import atomic_write_bytes

PLOT_SUFFIXES = (".png", ".svg")

# Stacked segments of a device's span, in stacking order. They add up to the span:
# compute alone + compute with communication + communication alone = compute ∪ communication;
# copies/other = busy - (compute ∪ communication); idle = span - busy.
SEGMENTS = ("compute", "compute + communication", "communication", "copies, other", "idle")
SEGMENT_COLORS = ("#4c78a8", "#b279a2", "#e45756", "#f58518", "#d9d9d9")
CLASS_DOMAIN = ("compute", "communication", "memcpy", "memset")
CLASS_COLORS = ("#4c78a8", "#e45756", "#f58518", "#72b7b2")
HOST_COLOR = "#9d755d"
MAX_STEP_BARS = 60  # steps drawn in the per-step breakdown
PATH_CLASSES = ("compute", "comm", "copy", "host")  # the classes of a critical path's events
PATH_COLORS = (CLASS_COLORS[0], CLASS_COLORS[1], CLASS_COLORS[2], HOST_COLOR)
MAX_PATH_BARS = 5000  # events of a critical path drawn (its first ones)


# jsonschema's optional format checkers, each imported when installed: ``rfc3987_syntax`` (``iri``) builds a
# grammar at import (about 2 s), ``rfc3986_validator`` (``uri``) a large regular expression (0.15 s), and
# ``isoduration`` (``duration``) imports arrow and dateutil (0.1 s). altair never checks these formats.
_UNUSED_FORMAT_CHECKERS = ("rfc3987_syntax", "rfc3986_validator", "isoduration")


def altair():
    """altair, imported without jsonschema's optional checkers of formats it never checks.

    Only when jsonschema is not loaded yet: a program that already uses it keeps its own set-up.
    """
    if "jsonschema" not in sys.modules:
        for name in _UNUSED_FORMAT_CHECKERS:
            sys.modules.setdefault(name, None)  # None: ``import NAME`` raises ImportError
    import altair as alt

    return alt


def check_plot_path(path: str | None) -> Path | None:
    """Refuse a ``--plot`` that cannot be written, before any work."""
    if path is None:
        return None
    plot = Path(path)
    if plot.suffix.lower() not in PLOT_SUFFIXES:
        raise UsageError(f"--plot {path}: the file name must end in .png or .svg (the image format)")
    if plot.is_dir():
        raise UsageError(f"--plot {path} is a directory; expected an image file name ending in .png or .svg")
    if not plot.parent.is_dir():
        raise UsageError(f"--plot {path}: the folder {plot.parent} does not exist")
    return plot


@dataclass(frozen=True)
class Figure:
    """An altair chart whose data are named datasets, kept apart: altair walks inline values item by item
    when it builds and converts a chart, which costs seconds for a few thousand bars."""

    chart: object
    datasets: dict[str, list[dict]] = field(default_factory=dict)


def spec(figure: Figure) -> dict:
    """The Vega-Lite spec, datasets inline."""
    vega_lite = figure.chart.to_dict(validate=False)
    vega_lite["datasets"] = {**vega_lite.get("datasets", {}), **figure.datasets}
    return vega_lite


def save_chart(figure: Figure, path: str | Path) -> Path:
    """Render ``figure`` to ``path`` (.png or .svg), written atomically."""
    import vl_convert

    path = Path(path)
    vega_lite = spec(figure)
    if path.suffix.lower() == ".svg":
        data = vl_convert.vegalite_to_svg(vega_lite).encode()
    else:
        data = vl_convert.vegalite_to_png(vega_lite, scale=2)
    return atomic_write_bytes(path, data)


def _segments(total) -> list[tuple[str, float]]:
    """A ``comm.Breakdown`` as stacked segments in µs (see ``SEGMENTS``)."""
    either = total.compute_us + total.communication_us - total.overlap_us
    values = (total.compute_us - total.overlap_us, total.overlap_us, total.communication_us - total.overlap_us,
              max(total.busy_us - either, 0.0), total.idle_us)
    return list(zip(SEGMENTS, values))


def _segment_rows(device: str, breakdown, **extra) -> list[dict]:
    return [{"device": device, "segment": name, "order": k, "ms": round(us / 1000.0, 6),
             "share": round(breakdown.pct(us), 2), **extra}
            for k, (name, us) in enumerate(_segments(breakdown))]


def _segment_color(alt):
    return alt.Color("segment:N", title=None, scale=alt.Scale(domain=list(SEGMENTS), range=list(SEGMENT_COLORS)),
                     sort=list(SEGMENTS), legend=alt.Legend(orient="bottom"))


def breakdown_chart(comm: CommReport) -> Figure:
    """Per device, one bar of its whole span: compute, overlap, communication, copies, idle."""
    alt = altair()
    rows = [r for d in comm.devices for r in _segment_rows(d.device.label, d.total)]
    chart = alt.Chart(alt.Data(name="breakdown"), title="Time per device (whole trace)").mark_bar().encode(
        y=alt.Y("device:N", title=None, sort=None),
        x=alt.X("sum(ms):Q", title="ms (span of the device's activity)", stack="zero"),
        color=_segment_color(alt),
        order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("device:N"), alt.Tooltip("segment:N"), alt.Tooltip("ms:Q", format=",.3f"),
                 alt.Tooltip("share:Q", title="% of span")],
    ).properties(width=640, height=alt.Step(28))
    return Figure(chart, {"breakdown": rows})


def step_breakdown_chart(comm: CommReport, max_steps: int = MAX_STEP_BARS) -> Figure:
    """Per step, one bar per device, stacked like ``breakdown_chart``; the first ``max_steps`` steps."""
    alt = altair()
    steps = list(comm.steps[:max_steps])
    rows = [r for d in comm.devices for s in steps if s in d.steps
            for r in _segment_rows(d.device.label, d.steps[s], step=s)]
    title = "Time per device and step" + (f" (first {max_steps} of {len(comm.steps)} steps)"
                                          if len(comm.steps) > max_steps else "")
    chart = alt.Chart(alt.Data(name="step_breakdown"), title=title).mark_bar().encode(
        x=alt.X("step:O", title="step"),
        xOffset=alt.XOffset("device:N", sort=None),
        y=alt.Y("sum(ms):Q", title="ms", stack="zero"),
        color=_segment_color(alt),
        order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("step:O"), alt.Tooltip("device:N"), alt.Tooltip("segment:N"),
                 alt.Tooltip("ms:Q", format=",.3f"), alt.Tooltip("share:Q", title="% of span")],
    ).properties(width=alt.Step(max(10, 48 // max(1, len(comm.devices)))), height=260)
    return Figure(chart, {"step_breakdown": rows})


def timeline_chart(timeline: Timeline) -> Figure:
    """A Gantt of one step: a row per device and class, a bar per event (or merged events); zoom with the wheel."""
    alt = altair()
    rows = [{"device": b.device, "class": b.cls, "start_ms": round(b.start_us / 1000.0, 6),
             "end_ms": round(b.end_us / 1000.0, 6), "name": b.name, "events": b.events,
             "us": round(b.end_us - b.start_us, 3)} for b in timeline.bars]
    what = f"step {timeline.step}" if timeline.step is not None else "the whole trace"
    zoom = alt.selection_interval(bind="scales", encodings=["x"])
    chart = alt.Chart(alt.Data(name="timeline"), title=f"Timeline of {what}").mark_bar().encode(
        x=alt.X("start_ms:Q", title="ms from the step's first device activity"),
        x2=alt.X2("end_ms:Q"),
        y=alt.Y("device:N", title=None, sort=None),
        yOffset=alt.YOffset("class:N", sort=list(CLASS_DOMAIN)),
        color=alt.Color("class:N", title=None, scale=alt.Scale(domain=list(CLASS_DOMAIN), range=list(CLASS_COLORS)),
                        legend=alt.Legend(orient="bottom")),
        tooltip=[alt.Tooltip("device:N"), alt.Tooltip("class:N"), alt.Tooltip("name:N"), alt.Tooltip("events:Q"),
                 alt.Tooltip("us:Q", title="µs", format=",.1f")],
    ).add_params(zoom).properties(width=760, height=alt.Step(12))
    return Figure(chart, {"timeline": rows})


def critical_path_chart(step: StepPath, max_bars: int = MAX_PATH_BARS) -> Figure:
    """The chain of one step's critical path as a Gantt: a bar per event of the path (the first ``max_bars``),
    a row per device, coloured by class; zoom with the wheel."""
    alt = altair()
    rows = [{"position": k, "name": link.name, "device": link.device, "class": link.event_class,
             "edge": link.edge or "end", "start_ms": round(link.start_us / 1000.0, 6),
             "end_ms": round((link.start_us + link.dur_us) / 1000.0, 6), "us": round(link.dur_us, 3),
             "wait_us": round(link.wait_us, 3)} for k, link in enumerate(step.links[:max_bars])]
    what = "the whole trace" if step.step < 0 else f"step {step.step}"
    zoom = alt.selection_interval(bind="scales", encodings=["x"])
    chart = alt.Chart(alt.Data(name="critical_path"), title=f"Critical path of {what}").mark_bar().encode(
        x=alt.X("start_ms:Q", title="ms from the step's first event"),
        x2=alt.X2("end_ms:Q"),
        y=alt.Y("device:N", title=None, sort=None),
        color=alt.Color("class:N", title=None, scale=alt.Scale(domain=list(PATH_CLASSES), range=list(PATH_COLORS)),
                        legend=alt.Legend(orient="bottom")),
        tooltip=[alt.Tooltip("position:Q", title="#"), alt.Tooltip("name:N"), alt.Tooltip("device:N"),
                 alt.Tooltip("class:N"), alt.Tooltip("us:Q", title="µs", format=",.1f"),
                 alt.Tooltip("wait_us:Q", title="wait before, µs", format=",.1f"),
                 alt.Tooltip("edge:N", title="edge to next")],
    ).add_params(zoom).properties(width=760, height=alt.Step(18))
    return Figure(chart, {"critical_path": rows})


def top_chart(entries: Sequence[TimedOp], title: str) -> Figure:
    """Horizontal bars of summed time per op or kernel name, longest first."""
    alt = altair()
    rows = [{"name": e.name, "class": e.cls, "ms": round(e.total_us / 1000.0, 6), "events": e.events,
             "devices": e.devices, "share": round(100 * e.share, 2)} for e in entries]
    chart = alt.Chart(alt.Data(name="top"), title=title).mark_bar().encode(
        y=alt.Y("name:N", title=None, sort="-x", axis=alt.Axis(labelLimit=360)),
        x=alt.X("ms:Q", title="ms, summed over devices and steps"),
        color=alt.Color("class:N", title=None, legend=alt.Legend(orient="bottom"),
                        scale=alt.Scale(domain=[*CLASS_DOMAIN, "host"], range=[*CLASS_COLORS, HOST_COLOR])),
        tooltip=[alt.Tooltip("name:N"), alt.Tooltip("class:N"), alt.Tooltip("ms:Q", format=",.3f"),
                 alt.Tooltip("events:Q"), alt.Tooltip("devices:Q"),
                 alt.Tooltip("share:Q", title="% of the time listed")],
    ).properties(width=480, height=alt.Step(18))
    return Figure(chart, {"top": rows})


def opcount_chart(report: OpCountReport) -> Figure:
    """Kernels per device per step (CPU and GPU kernels stacked); graph ops per device when there is no trace."""
    alt = altair()
    kernels = report.kernels
    if kernels.available:
        rows = [{"device": d.device, "kind": kind, "count": round(value / kernels.n_steps, 3)}
                for d in kernels.devices for kind, value in (("CPU kernels", d.cpu_kernels),
                                                              ("GPU kernels", d.gpu_kernels))]
        title, axis = "Kernels per device per step", "kernels per step"
    else:
        graph = report.runtime_graph if report.runtime_graph.available else report.user_graph
        rows = [{"device": device or "(none)", "kind": "graph ops", "count": n}
                for device, n in graph.by_device.items()]
        title = "Graph ops per device (" + ("runtime" if graph is report.runtime_graph else "user") + " graph)"
        axis = "ops"
    chart = alt.Chart(alt.Data(name="opcount"), title=title).mark_bar().encode(
        y=alt.Y("device:N", title=None, sort=None),
        x=alt.X("count:Q", title=axis, stack="zero"),
        color=alt.Color("kind:N", title=None, legend=alt.Legend(orient="bottom")),
        tooltip=[alt.Tooltip("device:N"), alt.Tooltip("kind:N"), alt.Tooltip("count:Q", format=",.1f")],
    ).properties(width=560, height=alt.Step(24))
    return Figure(chart, {"opcount": rows})


def _mode(row: dict) -> str:
    if row.get("variable_update") == "replicated" and row.get("all_reduce"):
        return f"replicated, {row['all_reduce']}"
    return str(row.get("variable_update"))


def scaling_chart(rows: list[dict], words: str = "words/s"):
    """Throughput against devices per variable update (points and lines), with each mode's ideal line.

    ``rows`` are ``scale --json`` rows; ideal = the baseline's words/s x devices / baseline devices.
    """
    alt = altair()
    measured, ideal = [], []
    for row in rows:
        mode = _mode(row)
        measured.append({"mode": mode, "devices": row["devices"], "words_per_second": row["words_per_second"],
                         "speedup": row["speedup"]})
    for mode in dict.fromkeys(r["mode"] for r in measured):
        group = sorted((r for r in measured if r["mode"] == mode), key=lambda r: r["devices"])
        base = group[0]
        ideal += [{"mode": mode, "devices": r["devices"],
                   "ideal": base["words_per_second"] * r["devices"] / base["devices"]} for r in group]
    counts = sorted({r["devices"] for r in measured})
    x = alt.X("devices:Q", title="devices", axis=alt.Axis(values=counts, format="d"))
    color = alt.Color("mode:N", title="variable update", legend=alt.Legend(orient="bottom"))
    ideal_line = alt.Chart(alt.Data(name="ideal")).mark_line(strokeDash=[6, 4], opacity=0.6).encode(
        x=x, y=alt.Y("ideal:Q"), color=color,
        tooltip=[alt.Tooltip("mode:N"), alt.Tooltip("devices:Q"), alt.Tooltip("ideal:Q", format=",.0f")])
    base = alt.Chart(alt.Data(name="measured")).encode(
        x=x, y=alt.Y("words_per_second:Q", title=words), color=color,
        tooltip=[alt.Tooltip("mode:N"), alt.Tooltip("devices:Q"), alt.Tooltip("words_per_second:Q", format=",.0f"),
                 alt.Tooltip("speedup:Q", format=".2f")])
    chart = alt.layer(ideal_line, base.mark_line(), base.mark_point(filled=True, size=70)).properties(
        title=f"{words} against devices (dashed: ideal, linear from the baseline)", width=520, height=300)
    return Figure(chart, {"measured": measured, "ideal": ideal})


def step_times_chart(series: list[tuple[str, list[float], list[float]]], title: str):
    """Step time per step: ``(label, warm-up seconds, timed seconds)`` per configuration; warm-up marked."""
    alt = altair()
    rows = []
    for label, warmup, timed in series:
        rows += [{"config": label, "step": k, "phase": "warm-up", "ms": s * 1000.0} for k, s in enumerate(warmup)]
        rows += [{"config": label, "step": len(warmup) + k, "phase": "timed", "ms": s * 1000.0}
                 for k, s in enumerate(timed)]
    chart = alt.Chart(alt.Data(name="step_times"), title=title).mark_point(filled=True).encode(
        x=alt.X("step:Q", title="step (warm-up first)"),
        y=alt.Y("ms:Q", title="step time (ms)", scale=alt.Scale(type="log")),
        color=alt.Color("config:N", title=None, legend=alt.Legend(orient="bottom")),
        shape=alt.Shape("phase:N", title=None, scale=alt.Scale(domain=["warm-up", "timed"])),
        tooltip=[alt.Tooltip("config:N"), alt.Tooltip("phase:N"), alt.Tooltip("step:Q"),
                 alt.Tooltip("ms:Q", format=",.2f")],
    ).properties(width=520, height=260)
    return Figure(chart, {"step_times": rows})


def comm_chart(comm: CommReport, per_step: bool = False) -> Figure:
    """``comm --plot``: time per device, with the per-step bars below when asked for and the trace has steps."""
    alt = altair()
    whole = breakdown_chart(comm)
    if per_step and comm.steps:
        steps = step_breakdown_chart(comm)
        return Figure(alt.vconcat(whole.chart, steps.chart), {**whole.datasets, **steps.datasets})
    return whole


def roofline_chart(reports: Sequence[tuple[str, RooflineReport]]) -> Figure:
    """Log-log roofline of ``[(worker, RooflineReport)]``: each operator row a point (intensity, achieved TFLOP/s),
    the device's roofs (one per dtype) as lines."""
    alt = altair()
    points, roofs = [], []
    for worker, report in reports:
        for row in report.ops:
            r = row.rates
            if r.intensity and r.tflops_per_s:
                points.append({"worker": worker, "op": row.name, "family": row.family, "dtype": row.dtype,
                               "shapes": row.shapes, "intensity": r.intensity, "tflops": r.tflops_per_s,
                               "kernel_ms": r.kernel_us / 1e3})
        peaks = report.peaks
        if peaks is not None and peaks.tbps:
            for dtype, top in sorted(peaks.matrix_tflops.items()):
                ridge = top / peaks.tbps
                for x in (0.01, ridge, max(1e4, 10 * ridge)):
                    roofs.append({"roof": f"{peaks.device} {dtype}", "intensity": x, "tflops": min(top, x * peaks.tbps)})
    base = alt.Chart(alt.Data(name="ops"), title="roofline: achieved TFLOP/s vs FLOP/byte per operator")
    dots = base.mark_circle(opacity=0.7).encode(
        x=alt.X("intensity:Q", scale=alt.Scale(type="log"), title="arithmetic intensity, FLOP/byte"),
        y=alt.Y("tflops:Q", scale=alt.Scale(type="log"), title="achieved TFLOP/s"),
        color=alt.Color("family:N"), size=alt.Size("kernel_ms:Q", title="kernel ms"),
        tooltip=["op:N", "dtype:N", "shapes:N", alt.Tooltip("intensity:Q", format=",.1f"),
                 alt.Tooltip("tflops:Q", format=",.2f"), alt.Tooltip("kernel_ms:Q", format=",.3f")])
    chart = dots
    if roofs:
        lines = alt.Chart(alt.Data(name="roofs")).mark_line(strokeDash=[4, 2]).encode(
            x="intensity:Q", y="tflops:Q", detail="roof:N", tooltip=["roof:N"])
        chart = alt.layer(lines, dots)
    return Figure(chart.properties(width=520, height=360), {"ops": points, "roofs": roofs})
