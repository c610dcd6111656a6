"""The explanation of a sweep (``rnnprof.analyzers.explain``): a table per mode that fits 80 columns, the JSON
document, and the stacked "lost speedup" chart."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from rnnprof.analyzers.explain import BETTER_THAN_IDEAL, PART_LABELS, PARTS, ExplainReport
from rnnprof.reports.charts import Figure, altair

# Short column heads (the table's caption names them in full).
_HEADS = {"compute_not_scaled": "not\nscaled", "exposed_communication": "exposed\ncomm", "waiting": "wait",
          "host_overhead": "host,\nlaunch", "input": "input,\ncopies"}
PART_COLORS = ("#4c78a8", "#e45756", "#b279a2", "#9d755d", "#f58518", "#bab0ac")  # the last: NOT_SPLIT
NOT_SPLIT = "not split: tracing changed the step"


def to_document(report: ExplainReport, notes: list[str], left_out: dict) -> dict:
    """The JSON document: the report, the loaders' notes after its own, and what the loaders left out (counts by
    reason, ``commands._left_out.counts``)."""
    return {"format": "rnnprof-explain", **report.as_dict(), "notes": list(report.notes) + list(notes),
            "left_out": left_out}


def render_table(report: ExplainReport, console: Console) -> None:
    console.print(Text(f"ideal: {report.ideal_definition}"
                       + (f" ({report.scaling_source})" if report.scaling_source else "")))
    for mode in dict.fromkeys(r.mode for r in report.rows):
        rows = [r for r in report.rows if r.mode == mode]
        table = Table(title=Text(mode or "the sweep", style="bold"), title_justify="left", box=box.SIMPLE_HEAD,
                      collapse_padding=True, pad_edge=False)
        table.add_column("N", justify="right")
        table.add_column("step\nms", justify="right")
        table.add_column("ideal\nms", justify="right")
        table.add_column("speed\nup", justify="right")
        table.add_column("lost", justify="right")
        for part in PARTS:
            table.add_column(_HEADS[part], justify="right")
        for r in rows:
            cells = [str(r.devices), f"{r.step_us / 1000:.1f}", f"{r.ideal_step_us / 1000:.1f}",
                     f"{r.speedup:.2f}x", f"{r.lost_speedup:.2f}"]
            table.add_row(*cells, *(_part_cell(r, part, r.devices == rows[0].devices) for part in PARTS))
        console.print(table)
    console.print(Text("lost = ideal speedup - measured speedup; a part that added time: its share of the time "
                       "the parts added (they add up to 100%); a part that took time off: the ms per step it took "
                       "off (negative), named below; -: not split (the base run, or no cause ranked: see the "
                       "notes); " + "; ".join(f"{_HEADS[p].replace(chr(10), ' ')} = {PART_LABELS[p]}"
                                             for p in PARTS), style="dim"))
    for r in report.rows:
        if r.devices == min(x.devices for x in report.rows if x.mode == r.mode):
            continue
        where = f"{r.mode + ' ' if r.mode else ''}N={r.devices}"
        if r.bound_by:
            console.print(Text(f"{where}: compute left on {r.bound_by} "
                               f"({r.parts.left_on_one_device / 1000:.1f} ms/step above the devices' mean, "
                               f"{r.parts.left_on_one_device / r.step_us:.0%} of the step) bounds the step"))
        if r.causes_ranked:
            for part in PARTS:
                if r.gap_us[part] < 0:
                    console.print(Text(f"{where}: {BETTER_THAN_IDEAL[part]}, {-r.gap_us[part] / 1000:.1f} ms per "
                                       f"step off the step time"))


def _part_cell(row, part: str, base: bool) -> str:
    """A part's cell: its share of the time the parts added, the ms it took off, or "-" (the base run, no
    ranked causes)."""
    if base or not row.causes_ranked:
        return "-"
    share = row.added_share(part)
    if share is not None:
        return f"{100 * share:.0f}%"
    return f"{row.gap_us[part] / 1000:.1f}ms" if row.gap_us[part] < 0 else "0%"


def lost_speedup_chart(document: dict):
    """Per mode and N, the lost speedup stacked by part (negative parts: below zero), from the JSON document."""
    alt = altair()
    rows = []
    for row in document.get("rows", []):
        by_part = row.get("lost_speedup_by_part") or {}
        if row.get("causes_ranked") is False:  # one bar, not split into causes
            by_part = {NOT_SPLIT: row.get("lost_speedup", 0.0)}
        for k, part in enumerate((*PARTS, NOT_SPLIT)):
            if part not in by_part:
                continue
            rows.append({"mode": row.get("mode") or "-", "devices": row["devices"],
                         "part": PART_LABELS.get(part, part), "order": k,
                         "lost_speedup": round(float(by_part[part]), 6),
                         "speedup": row.get("speedup"), "ideal_speedup": row.get("ideal_speedup")})
    domain = [PART_LABELS[p] for p in PARTS] + [NOT_SPLIT]
    chart = alt.Chart(alt.Data(name="lost")).mark_bar().encode(
        x=alt.X("devices:O", title="devices"),
        y=alt.Y("sum(lost_speedup):Q", title="lost speedup (ideal - measured)", stack="zero"),
        color=alt.Color("part:N", title=None, scale=alt.Scale(domain=domain, range=list(PART_COLORS)),
                        sort=domain, legend=alt.Legend(orient="bottom", columns=3)),
        order=alt.Order("order:Q"),
        column=alt.Column("mode:N", title=None),
        tooltip=[alt.Tooltip("mode:N"), alt.Tooltip("devices:O"), alt.Tooltip("part:N"),
                 alt.Tooltip("lost_speedup:Q", format=".3f"), alt.Tooltip("speedup:Q", format=".2f"),
                 alt.Tooltip("ideal_speedup:Q", format=".2f")],
    ).properties(width=260, height=260, title=f"Lost speedup by cause ({document.get('scaling', '?')} scaling)")
    return Figure(chart, {"lost": rows})
