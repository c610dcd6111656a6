"""Rendering of ``rnnprof whatif``: per step the measured and predicted step times, the chain critical after the
change and each rank's waits, as rich tables or one JSON document."""

from __future__ import annotations

import dataclasses
import statistics

from rich.console import Console
from rich.text import Text

from rnnprof.analyzers.replay import StepReplay, WhatIfReport
from rnnprof.analyzers.replay.result import MEASURED
from rnnprof.reports.abbrev import Legend
from rnnprof.reports.fit import Column, fit_table
from rnnprof.reports.units import fmt_ms_narrow

_STEP_ROWS = 12
WAIT_FLOOR_PCT = 1.0  # a rank's wait that changes by less than this share of the step is not listed

WHATIF_SUMMARY = (
    "predicted = the step replayed with the change: each node's own work, earliest start in dependency order, "
    "collectives done at their last member's arrival plus their transfer (docs/commands/whatif.md); replayed = "
    "the same replay unchanged (its distance to measured is the model's own error); waits = a rank's time "
    "waiting for the last member of its collectives and for the GPU at synchronizing calls"
)


def _label(step: StepReplay) -> str:
    return "whole trace" if step.step < 0 else str(step.step)


def _pct(step_us: float, change_us: float) -> str:
    return f"{100 * change_us / step_us:+.1f}" if step_us else "-"


def _steps_table(report: WhatIfReport, width: int):
    shown = report.steps[:_STEP_ROWS]
    times = report.step_time
    rows = [[_label(s), *([_ms(times.of(s.step))] if times else []), fmt_ms_narrow(s.measured_us),
             fmt_ms_narrow(s.replayed_us), fmt_ms_narrow(s.predicted_us), _pct(s.measured_us, s.change_us)]
            for s in shown]
    if len(report.steps) > 1:
        measured, predicted = report.median("measured_us"), report.median("predicted_us")
        step = [_ms(statistics.median(us for s in report.steps if (us := times.of(s.step)) is not None))
                if any(times.of(s.step) is not None for s in report.steps) else "-"] if times else []
        rows.append(["median", *step, fmt_ms_narrow(measured), fmt_ms_narrow(report.median("replayed_us")),
                     fmt_ms_narrow(predicted), _pct(measured, predicted - measured)])
    columns = [Column("step", "label"), *([Column("step\nms", drop=2)] if times else []), Column("measured\nms"),
               Column("replayed\nms", drop=1), Column("predicted\nms"), Column("change\n%")]
    more = f"the first {len(shown)} of {len(report.steps)} steps" if len(shown) < len(report.steps) else ""
    if times:
        more = (f"{more}; " if more else "") + (f"step = the step's time as every command gives it "
                                                f"({times.short}); measured = {MEASURED}")
    return fit_table(width, columns, rows, title="step time: measured, and predicted with the change",
                     caption=more)


def _ms(us: float | None) -> str:
    return "-" if us is None else fmt_ms_narrow(us)


def _median_step(report: WhatIfReport) -> StepReplay:
    ranked = sorted(report.steps, key=lambda s: (s.predicted_us, s.step))
    return ranked[(len(ranked) - 1) // 2]


def _chain_table(step: StepReplay, width: int, legend: Legend):
    rows = [[Text(link.name), Text(legend.short(link.device)), link.node, fmt_ms_narrow(link.start_us),
             fmt_ms_narrow(link.dur_us), fmt_ms_narrow(link.pre_us) if link.pre_us else ""] for link in step.chain]
    columns = [Column("node", "name"), Column("device", "label"), Column("kind", "label", drop=2),
               Column("start\nms", drop=1), Column("work\nms"), Column("host\nms")]
    by_device = ", ".join(f"{legend.short(d)} {fmt_ms_narrow(us)}" for d, us in
                          sorted(step.chain_by_device.items(), key=lambda kv: -kv[1])[:4])
    return fit_table(width, columns, rows,
                     title=f"step {_label(step)}: the chain critical after the change, its longest links",
                     caption=f"{step.chain_links:,} nodes; ms by device: {by_device}")


def _waits_table(step: StepReplay, width: int, legend: Legend):
    floor = WAIT_FLOOR_PCT / 100 * step.measured_us
    rows = []
    for w in step.waits:
        delta = w.predicted_us - w.measured_us
        if abs(delta) < floor:
            continue
        what = "vanishes" if w.predicted_us < floor else "appears" if w.measured_us < floor else (
            "shrinks" if delta < 0 else "grows")
        rows.append([Text(legend.short(w.rank)), fmt_ms_narrow(w.measured_us), fmt_ms_narrow(w.predicted_us), what])
    columns = [Column("rank", "label"), Column("measured\nms"), Column("predicted\nms"), Column("wait", "label")]
    return fit_table(width, columns, rows, title=f"step {_label(step)}: waits that appear or vanish, per rank")


def render_table(report: WhatIfReport, console: Console) -> None:
    width, legend = console.width, Legend()
    for change in report.changes:
        console.print(Text.assemble(("change: ", "bold"), change.describe(),
                                    f" ({report.changed.get(change.describe(), 0):,} nodes)"))
    console.print(_steps_table(report, width))
    median = _median_step(report)
    console.print(_chain_table(median, width, legend))
    if any(abs(w.predicted_us - w.measured_us) >= WAIT_FLOOR_PCT / 100 * median.measured_us for w in median.waits):
        console.print(_waits_table(median, width, legend))
    for step in report.steps:
        for reason in step.reasons:
            console.print(Text.assemble(("note: ", "bold yellow"), f"step {_label(step)}: the unchanged replay is "
                                        f"{step.error_pct:+.1f}% off: {reason}"))
    for line in (*report.notes, *report.lacks):
        console.print(Text.assemble(("note: ", "bold yellow"), line))
    legend.render(console)
    console.print(Text(WHATIF_SUMMARY, style="dim"))


def to_document(report: WhatIfReport) -> dict:
    steps = []
    for s in report.steps:
        doc = dataclasses.asdict(s)
        doc["change_us"] = s.change_us
        doc["replay_error_pct"] = s.error_pct
        doc["step_us"] = report.step_time.of(s.step) if report.step_time is not None else None
        steps.append(doc)
    return {"changes": [dataclasses.asdict(c) | {"description": c.describe()} for c in report.changes],
            "changed_nodes": report.changed, "steps": steps,
            "median": {"measured_us": report.median("measured_us"), "replayed_us": report.median("replayed_us"),
                       "predicted_us": report.median("predicted_us")},
            "step_time": report.step_time.as_dict() if report.step_time is not None else None,
            "notes": list(report.notes), "lacks": list(report.lacks),
            "definitions": f"{WHATIF_SUMMARY}; measured = {MEASURED}; step_us = the step's time as every rnnprof "
                           f"command gives it (step_time), null where the trace has no step markers"}
