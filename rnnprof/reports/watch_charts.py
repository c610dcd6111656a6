"""The charts of a watched job (``rnnprof report RUN`` of a ``rnnprof watch`` run), as ``charts.Figure``s: each
rank's step time, its split into parts and its memory along the job's steps, the capture windows marked on each as
bands and the anomalies as rules (charts only arrange the summary's figures)."""

from __future__ import annotations

import math

from rnnprof.analyzers.watch.summary import SPLIT, WatchSummary
from rnnprof.events.series import PART_NAMES
from rnnprof.reports.charts import Figure, altair

PART_COLORS = ("#72b7b2", "#4c78a8", "#f58518", "#54a24b", "#bab0ac")
MAX_SPLIT_RANKS = 8  # ranks drawn in the split chart (the slowest first)
WIDTH = 640


def _value(x: float, scale: float) -> float | None:
    return round(x * scale, 6) if x is not None and math.isfinite(x) else None


def _marks(summary: WatchSummary, alt, height: int):
    """The windows as bands and the anomalies as rules, over a chart ``height`` high."""
    bands = alt.Chart(alt.Data(name="windows")).mark_rect(opacity=0.18, color="#e45756").encode(
        x="first:Q", x2="last:Q",
        tooltip=[alt.Tooltip("window:N"), alt.Tooltip("reason:N"), alt.Tooltip("verdict:N")])
    rules = alt.Chart(alt.Data(name="anomalies")).mark_rule(color="#e45756", strokeDash=[4, 3]).encode(
        x="step:Q", tooltip=[alt.Tooltip("kind:N"), alt.Tooltip("step:Q"), alt.Tooltip("ranks:N")])
    return bands, rules


def _mark_rows(summary: WatchSummary) -> dict[str, list[dict]]:
    windows = [{"window": w.name, "reason": w.reason, "first": w.first_step, "last": w.first_step + w.steps - 1,
                "verdict": w.verdict[:300]} for w in summary.windows]
    anomalies = [{"kind": a.kind, "step": a.step, "ranks": ", ".join(map(str, a.ranks))} for a, _ in summary.anomalies]
    return {"windows": windows, "anomalies": anomalies}


def step_series_chart(summary: WatchSummary) -> Figure:
    """Each rank's step time along the job, windows and anomalies marked."""
    alt = altair()
    rows = [{"rank": f"rank {p.rank}", "step": p.step, "ms": _value(p.step_s, 1e3),
             "wait_ms": _value(p.comm_wait_s, 1e3)} for p in summary.points]
    line = alt.Chart(alt.Data(name="steps")).mark_line(strokeWidth=1.2).encode(
        x=alt.X("step:Q", title="step"), y=alt.Y("ms:Q", title="step time (ms)"),
        color=alt.Color("rank:N", title=None, legend=alt.Legend(orient="bottom")),
        tooltip=[alt.Tooltip("rank:N"), alt.Tooltip("step:Q"), alt.Tooltip("ms:Q", format=",.3f"),
                 alt.Tooltip("wait_ms:Q", title="collective wait ms", format=",.3f")])
    bands, rules = _marks(summary, alt, 260)
    chart = alt.layer(bands, line, rules).properties(
        title="Step time by rank (bands: capture windows; dashed: anomalies)", width=WIDTH, height=260)
    return Figure(chart, {"steps": rows, **_mark_rows(summary)})


def split_series_chart(summary: WatchSummary) -> Figure:
    """Each rank's steps split into data wait, forward, backward, optimizer and the rest, stacked along the job
    (the ``MAX_SPLIT_RANKS`` slowest ranks)."""
    alt = altair()
    shown = {r.rank for r in sorted(summary.ranks, key=lambda r: -(r.step_s if math.isfinite(r.step_s) else 0))
             [:MAX_SPLIT_RANKS]}
    names = [PART_NAMES[p] for p in SPLIT]
    rows = [{"rank": f"rank {p.rank}", "step": p.step, "part": PART_NAMES[name], "order": k,
             "ms": _value(p.parts[name], 1e3)} for p in summary.points if p.rank in shown
            for k, name in enumerate(SPLIT) if _value(p.parts[name], 1e3) is not None]
    area = alt.Chart(alt.Data(name="split")).mark_area().encode(
        x=alt.X("step:Q", title="step"), y=alt.Y("ms:Q", title="ms", stack="zero"),
        color=alt.Color("part:N", title=None, scale=alt.Scale(domain=names, range=list(PART_COLORS)), sort=names,
                        legend=alt.Legend(orient="bottom")),
        order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("rank:N"), alt.Tooltip("step:Q"), alt.Tooltip("part:N"),
                 alt.Tooltip("ms:Q", format=",.3f")])
    chart = area.properties(width=WIDTH, height=120).facet(
        row=alt.Row("rank:N", title=None), title="Each rank's step split into its parts")
    return Figure(chart, {"split": rows})


def memory_series_chart(summary: WatchSummary, what: str) -> Figure:
    """Each rank's memory along the job (``what``: resident memory or CUDA allocated), windows and anomalies
    marked."""
    alt = altair()
    rows = [{"rank": f"rank {p.rank}", "step": p.step, "mb": _value(p.memory, 1e-6)} for p in summary.points
            if _value(p.memory, 1e-6) is not None]
    line = alt.Chart(alt.Data(name="memory")).mark_line(strokeWidth=1.2).encode(
        x=alt.X("step:Q", title="step"), y=alt.Y("mb:Q", title=f"{what} (MB)", scale=alt.Scale(zero=False)),
        color=alt.Color("rank:N", title=None, legend=alt.Legend(orient="bottom")),
        tooltip=[alt.Tooltip("rank:N"), alt.Tooltip("step:Q"), alt.Tooltip("mb:Q", format=",.2f")])
    bands, rules = _marks(summary, alt, 200)
    chart = alt.layer(bands, line, rules).properties(title=f"{what} by rank", width=WIDTH, height=200)
    return Figure(chart, {"memory": rows, **_mark_rows(summary)})
