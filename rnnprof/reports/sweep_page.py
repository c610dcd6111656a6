"""The HTML report of a saved ``rnnprof scale`` sweep (``scale --out DIR``): speedup table, scaling curve, warm-up."""

from __future__ import annotations

import json
import statistics

from rnnprof.analyzers.explain import PART_LABELS, PARTS
from rnnprof.reports import charts
from rnnprof.reports.explain import lost_speedup_chart
from rnnprof.reports.html import Page


def _f(value, digits: int = 0) -> str:
    return f"{value:,.{digits}f}" if isinstance(value, (int, float)) else "-"


def sweep_page(document: dict, name: str) -> str:
    page = Page(f"rnnprof report: {name}")
    page.heading(f"rnnprof report: {name}", 1)
    rows = document["rows"]
    definitions = document.get("definitions") if isinstance(document.get("definitions"), dict) else {}
    page.paragraph(f"a sweep saved by rnnprof scale --out: {len(rows)} measured configuration(s)", "sub")

    page.heading("The run")
    for note in document.get("notes") or []:
        page.paragraph(f"note: {note}", "note")
    config = document.get("config") if isinstance(document.get("config"), dict) else {}
    page.facts([("device kind", document.get("device_kind"))])
    if config:
        page.table(["setting", "value"], [[k, v if isinstance(v, str) else json.dumps(v)] for k, v in config.items()])

    page.heading("Throughput")
    page.table(["variable update", "all-reduce", "devices", "batch per device", "batch total", "time (s)",
                "words/s", "step median (s)", "step std (s)", "speedup"],
               [[r["variable_update"], r.get("all_reduce") or "-", r["devices"], r.get("batch_per_device", "-"),
                 r.get("batch_total", "-"), _f(r.get("total_seconds"), 2), _f(r["words_per_second"]),
                 _f(r.get("median_step_seconds"), 3), _f(r.get("std_step_seconds"), 3), f"{r['speedup']:.2f}x"]
                for r in rows], numeric=set(range(2, 10)),
               caption="; ".join(str(definitions[k]) if str(definitions[k]).startswith(k) else f"{k} = {definitions[k]}"
                                for k in ("words", "speedup") if k in definitions))
    page.chart("scaling", charts.spec(charts.scaling_chart(rows)))
    if isinstance(document.get("explain"), dict) and document["explain"].get("rows"):
        _explained(page, document["explain"])

    page.heading("Warm-up", 3)
    measured = [r for r in rows if r.get("warmup_step_seconds")]
    if not measured:
        page.missing("The effect of warm-up", "the sweep ran without warm-up batches (--warmup 0)")
        return page.render()
    page.table(["variable update", "devices", "warm-up steps", "warm-up median (s)", "first step (s)",
                "timed median (s)", "words/s with warm-up", "words/s timed"],
               [[r["variable_update"], r["devices"], len(r["warmup_step_seconds"]),
                 _f(statistics.median(r["warmup_step_seconds"]), 3), _f(r["warmup_step_seconds"][0], 3),
                 _f(r.get("median_step_seconds"), 3), _f(r.get("words_per_second_including_warmup")),
                 _f(r["words_per_second"])] for r in measured], numeric=set(range(1, 8)),
               caption="words/s with warm-up is measured with scale --include-warmup")
    page.chart("warmup", charts.spec(charts.step_times_chart(
        [(f"{r['variable_update']}, {r['devices']} dev", r["warmup_step_seconds"], r.get("step_seconds") or [])
         for r in measured], "Step times: warm-up, then timed")))
    return page.render()


def _explained(page: Page, explained: dict) -> None:
    """Why the speedup falls short of linear (``scale --explain``): each part's share of the lost speedup."""
    page.heading("Why the speedup falls short of linear")
    page.paragraph(f"ideal: {explained.get('ideal', '-')}", "sub")
    for note in explained.get("notes") or []:
        page.paragraph(f"note: {note}", "note")
    page.table(["variable update", "devices", "step (ms)", "ideal (ms)", "speedup", "lost speedup",
                *[PART_LABELS[p] for p in PARTS]],
               [[r.get("mode") or "-", r["devices"], _f(r["step_us"] / 1000, 1), _f(r["ideal_step_us"] / 1000, 1),
                 f"{r['speedup']:.2f}x", _f(r["lost_speedup"], 2),
                 *[_f(r["lost_speedup_by_part"][p], 2) if r.get("causes_ranked", True) else "-" for p in PARTS]]
                for r in explained["rows"]],
               numeric=set(range(1, 6 + len(PARTS))),
               caption="each part's share of the lost speedup (ideal - measured); they add up to the lost speedup; "
                       "-: not split, where tracing changed the step as much as the gap (see the notes)")
    page.chart("lost-speedup", charts.spec(lost_speedup_chart(explained)))
