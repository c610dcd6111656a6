"""Formatting of ``rnnprof pipeline``: the schedule and its theoretical bubble, a table of the ranks' busy time and
bubble per step, the imbalance, one JSON document, and the stage x time chart of one step."""

from __future__ import annotations

import numpy as np
from rich.console import Console
from rich.text import Text

from rnnprof.analyzers.pipeline import BUBBLE_PARTS, WORK_KINDS, PipelineReport, Stage
from rnnprof.reports.charts import Figure, altair, spec
from rnnprof.reports.html import Page
from rnnprof.reports.fit import Column, fit_table
from rnnprof.reports.units import fmt_ms, fmt_ms_narrow

SCHEDULE_NAMES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved-1f1b": "interleaved 1F1B"}
KIND_COLORS = dict(zip((*WORK_KINDS, *BUBBLE_PARTS), ("#4c78a8", "#72b7b2", "#9ecae9", "#eeca3b", "#f58518",
                                                      "#e45756", "#b279a2", "#d9d9d9")))
PARTS = (("warm-up", "warm_up_us"), ("cool-down", "cool_down_us"), ("waiting", "neighbour_us"),
         ("transfer", "transfer_us"), ("other", "other_us"))
DEFINITIONS = {
    "window": "per step, from the first micro-batch work of any rank to the last one's end",
    "busy": "the rank's work in the window: its compute as comm measures it (a GPU's kernels, a CPU rank's "
            "operators; a CPU rank's forward/backward ranges around each micro-batch whole), the optimizer's left out",
    "bubble": "the window less the rank's busy time: warm-up (before its first micro-batch work) + cool-down (after "
              "its last) + waiting on a neighbour (in a send or receive its partner had not posted yet) + transfer "
              "(in a send or receive both sides had posted) + other",
    "theory": "the schedule's bubble with equal stages and free transfers: (p-1)/(m+p-1) for GPipe and 1F1B, "
              "(p-1)/(v*m+p-1) interleaved (p ranks, m micro-batches, v stages per rank)",
    "imbalance": "the busiest stage's busy time per step against the other stages' median; the saving bound is "
                 "(v*m+p-1)/m times its excess over the stages' mean",
}


def schedule_line(report: PipelineReport) -> str:
    """What ran: the schedule, its ranks, micro-batches and stages per rank."""
    s = report.schedule
    name = SCHEDULE_NAMES.get(s.kind, s.kind or "a schedule not told")
    per_rank = f", {s.stages_per_rank} stages per rank" if s.stages_per_rank > 1 else ""
    return f"pipeline: {name}, {s.ranks} ranks, {s.micro_batches or '?'} micro-batches{per_rank}"


def bubble_line(report: PipelineReport) -> str:
    """The measured bubble against the theory's."""
    theory = report.schedule.theory
    said = f"bubble {100 * report.bubble_fraction:.1f}% of the ranks' time over {len(report.steps)} step(s)"
    if theory is None:
        return f"{said}; no theory without the micro-batches"
    return f"{said}; the schedule's theory {100 * theory:.1f}%"


def imbalance_line(report: PipelineReport) -> str | None:
    found = report.imbalance
    if found is None:
        return None
    what = f"stage {found.stage} ({found.worker})"
    return (f"imbalance: {what} busy {fmt_ms(found.busy_us)} ms/step, {100 * found.share:+.1f}% against the other "
            f"stages' median ({fmt_ms(found.others_median_us)} ms); balanced, a step would take at most "
            f"{fmt_ms(found.bound_us)} ms less")


def _waited(stage: Stage, steps: int) -> str:
    if not stage.waited_on:
        return "-"
    return ", ".join(f"{w} {fmt_ms_narrow(us / max(steps, 1))}" for w, us in
                     sorted(stage.waited_on.items(), key=lambda kv: -kv[1]))


def render_pipeline(report: PipelineReport, console: Console) -> None:
    console.print(Text(f"{schedule_line(report)} ({report.schedule.source})"))
    console.print(Text(bubble_line(report)))
    rows = [[Text(s.worker), ",".join(map(str, s.stages)), fmt_ms_narrow(s.per_step("busy_us")),
             f"{100 * s.bubble_fraction:.1f}", *(fmt_ms_narrow(s.per_step(field)) for _, field in PARTS),
             Text(_waited(s, len(s.steps)))] for s in report.stages]
    columns = [Column("rank", "label"), Column("stage", "label"), Column("busy\nms"), Column("bubble\n%"),
               *(Column(f"{name}\nms") for name, _ in PARTS), Column("waited on\n(ms/step)", "text", drop=1)]
    window = fmt_ms_narrow(float(np.median([x.window_us for s in report.stages for x in s.steps])))
    console.print(fit_table(console.width, columns, rows,
                            title=f"each rank per step (median over the steps; the window {window} ms)",
                            caption="bubble = window - busy = warm-up + cool-down + waiting + transfer + other"))
    line = imbalance_line(report)
    if line:
        console.print(Text(line))


def to_document(report: PipelineReport) -> dict:
    return {**report.as_dict(), "definitions": DEFINITIONS}


def pipeline_chart(report: PipelineReport) -> Figure:
    """The stage x time chart of one step (the one whose bubble is the median): a row per rank, its work and its
    bubble's parts in time."""
    alt = altair()
    step = report.segments[0].step if report.segments else -1
    origin = min((s.start_us for s in report.segments), default=0.0)
    label = {s.worker: f"{s.worker} (stage {','.join(map(str, s.stages))})" for s in report.stages}
    rows = [{"rank": label.get(s.worker, s.worker), "kind": s.kind, "start_ms": round((s.start_us - origin) / 1e3, 6),
             "end_ms": round((s.end_us - origin) / 1e3, 6), "us": round(s.end_us - s.start_us, 3),
             "micro_batch": s.micro_batch if s.micro_batch >= 0 else None,
             "stage": s.stage if s.stage >= 0 else None} for s in report.segments]
    kinds = list(KIND_COLORS)
    zoom = alt.selection_interval(bind="scales", encodings=["x"])
    chart = alt.Chart(alt.Data(name="pipeline"), title=f"Pipeline of step {step}: each rank's work and bubble"
                      ).mark_bar().encode(
        x=alt.X("start_ms:Q", title="ms from the step's first micro-batch work"),
        x2=alt.X2("end_ms:Q"),
        y=alt.Y("rank:N", title=None, sort=[label[s.worker] for s in report.stages]),
        color=alt.Color("kind:N", title=None, scale=alt.Scale(domain=kinds, range=[KIND_COLORS[k] for k in kinds]),
                        legend=alt.Legend(orient="bottom")),
        tooltip=[alt.Tooltip("rank:N"), alt.Tooltip("kind:N"), alt.Tooltip("micro_batch:Q", title="micro-batch"),
                 alt.Tooltip("stage:Q"), alt.Tooltip("us:Q", title="µs", format=",.1f")],
    ).add_params(zoom).properties(width=760, height=alt.Step(28))
    return Figure(chart, {"pipeline": rows})


def pipeline_section(page: Page, report: PipelineReport) -> None:
    """The schedule, the bubble against the theory, each rank's figures per step and the stage x time chart."""
    page.paragraph(f"{schedule_line(report)} ({report.schedule.source}); {bubble_line(report)}", "sub")
    page.table(["rank", "stage", "busy ms", "bubble %", *(f"{name} ms" for name, _ in PARTS)],
               [[s.worker, ",".join(map(str, s.stages)), fmt_ms(s.per_step("busy_us")),
                 f"{100 * s.bubble_fraction:.1f}", *(fmt_ms(s.per_step(field)) for _, field in PARTS)]
                for s in report.stages], numeric={2, 3, 4, 5, 6, 7, 8},
               caption="per step, the median over the steps; bubble = window - busy")
    line = imbalance_line(report)
    if line:
        page.paragraph(line, "sub")
    page.chart("pipeline", spec(pipeline_chart(report)))
