"""Rendering of ``diff`` results: the top rows of each section as rich tables, or one JSON document."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from rnnprof.analyzers.diff import CopyKindChange, DiffReport, GraphLaunchChange, Headline, OpChange, StepTime
from rnnprof.reports.fit import Column, fit_table
from rnnprof.reports.opcount import render_definitions
from rnnprof.reports.units import fmt_ms

_ALWAYS = ("run", "all devices")  # time rows shown whatever --top says


def _top(rows, top: int) -> list:
    return list(rows) if top <= 0 else list(rows)[:top]


def _num(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "n/a"
    if float(value).is_integer():
        return f"{value:+,.0f}" if signed else f"{value:,.0f}"
    return f"{value:+,.2f}" if signed else f"{value:,.2f}"


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.2f}x"


def _more(shown: int, total: int, what: str) -> str:
    return f"top {shown} of {total} {what}" if total > shown else ""


def _titled(title: str, more: str) -> str:
    return f"{title} ({more})" if more else title


def _time_rows(report: DiffReport, top: int) -> list:
    rows = report.time.rows
    fixed = [r for r in rows if r.device in _ALWAYS]
    changed = sorted((r for r in rows if r.device not in _ALWAYS and r.changed),
                     key=lambda r: -abs(r.delta if r.delta is not None else float("inf")))
    chosen = set(map(id, _top(changed, top)))
    return fixed + [r for r in rows if id(r) in chosen]


SUMMARY_ROWS = 6  # rows per list in the summary (without --all)
JSON_ROWS = 10  # rows per list with --all and in --json, unless --top says otherwise


def render_table(report: DiffReport, *, top: int | None, console: Console, every: bool = False) -> None:
    """What fits a screen: the step time, what changed most, time per device, the counts that changed, the
    largest changes in time by name, the rates and the configuration; ``every`` (--all): every section and
    list, and the definitions. ``top``: rows per list (None: SUMMARY_ROWS, with ``every`` JSON_ROWS; 0: all)."""
    console.print(Text.assemble(("A: ", "bold"), report.a, f" ({report.kind_a})"))
    console.print(Text.assemble(("B: ", "bold"), report.b, f" ({report.kind_b})"))
    if report.identical:
        console.print("[bold green]No differences[/bold green]: device time, ops and kernels, graphs and "
                      "configuration are the same on both sides.")
        return
    rows = top if top is not None else JSON_ROWS if every else SUMMARY_ROWS
    if every:
        console.print("[dim]Δ = B − A, ratio = B ÷ A[/dim]")
    _render_headline(report, console)
    _render_notable(report, console)
    _render_time(report, rows, console)
    _render_copies(report, console, every)
    _render_ops(report, rows, console, every)
    _render_rates(report, console)
    _render_graphs(report, rows, console, every)
    _render_config(report, rows, console)
    if every:
        render_definitions(report.definitions, console)
    else:
        console.print(Text("Δ = B − A, ratio = B ÷ A, figures per step (mean); --all: every section and list, "
                           "and the definitions; --json: everything", style="dim"))


def _unavailable(title: str, reason: str, console: Console) -> None:
    console.print(Text.assemble((title, "bold"), f": not compared ({reason})"))


def _step_text(t: StepTime) -> str:
    if t.us is None:
        return "n/a"
    return f"{fmt_ms(t.us)} ms"


def _render_headline(report: DiffReport, console: Console) -> None:
    top = report.time.headline
    if top is None:
        return
    ratio = f" ({_ratio(top.ratio)}, Δ {fmt_ms(top.delta, signed=True)} ms)" if top.ratio is not None else ""
    if not top.comparable:
        ratio = " (no ratio: the sides' step times are not measured alike)"
    console.print(Text.assemble(("Step time: ", "bold"), f"A {_step_text(top.a)}, B {_step_text(top.b)}", (ratio, "bold")))
    bases = {top.a.detail, top.b.detail} - {""}
    if len(bases) == 1:
        console.print(Text(f"  per step: {bases.pop()} (A: {top.a.steps}, B: {top.b.steps})", style="dim"))
    else:
        console.print(Text(f"  per step: A: {top.a.detail or 'none'}; B: {top.b.detail or 'none'}", style="dim"))


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _times(a: float, b: float) -> str:
    if a == 0:
        return "new in B" if b else "none"
    return f"{b / a:,.1f}x"


def _change_text(row: CopyKindChange | GraphLaunchChange) -> str:
    if isinstance(row, CopyKindChange):
        return (f"{row.kind} copies: {_num(row.count_a)} -> {_num(row.count_b)} per step "
                f"({_times(row.count_a, row.count_b)}), {fmt_ms(row.time_a_us)} -> {fmt_ms(row.time_b_us)} ms "
                f"per step, {row.bytes_a / 1e6:,.1f} -> {row.bytes_b / 1e6:,.1f} MB per step")
    names = ", ".join(row.names) or "graph launches"
    return (f"{names}: {_num(row.launches_a)} -> {_num(row.launches_b)} per step, launching "
            f"{_num(row.kernels_a)} -> {_num(row.kernels_b)} GPU kernels per step ({_share(row.share_a)} -> "
            f"{_share(row.share_b)} of the GPU kernels), {fmt_ms(row.kernel_a_us)} -> {fmt_ms(row.kernel_b_us)} ms "
            f"of their kernels per step")


def _render_notable(report: DiffReport, console: Console) -> None:
    rows = report.copies.notable if report.copies.available else ()
    if not rows:
        return
    console.print(Text("Changed most (copies by kind, graph launches):", style="bold"))
    for row in rows:
        console.print(Text(f"  {_change_text(row)}", style="bold yellow"))


def _copy_rows(section) -> list[list[str]]:
    rows = []
    for k in section.kinds:
        for what, a, b, scale in ((f"{k.kind} copies", k.count_a, k.count_b, 1), (f"{k.kind} ms", k.time_a_us,
                                  k.time_b_us, 1000), (f"{k.kind} MB", k.bytes_a, k.bytes_b, 1e6)):
            rows.append([what, _num(a / scale), _num(b / scale), _num((b - a) / scale, signed=True),
                         _ratio(b / a if a else None)])
    g = section.graphs
    if g is not None:
        for what, a, b, scale in (("graph launches", g.launches_a, g.launches_b, 1),
                                  ("GPU kernels launched by graphs", g.kernels_a, g.kernels_b, 1),
                                  ("their kernel ms", g.kernel_a_us, g.kernel_b_us, 1000)):
            rows.append([what, _num(a / scale), _num(b / scale), _num((b - a) / scale, signed=True),
                         _ratio(b / a if a else None)])
        rows.append(["share of GPU kernels launched by graphs", _share(g.share_a), _share(g.share_b), "", ""])
    return rows


def _render_copies(report: DiffReport, console: Console, every: bool) -> None:
    section = report.copies
    if not section.available:
        return _unavailable("Copies and graph launches", section.reason, console) if every else None
    if not section.changed:
        console.print(Text.assemble(("Copies and graph launches", "bold"), ": the same per step"))
        return
    if not every:
        console.print(Text.assemble(("Copies by kind and graph launches", "bold"), ": changed (--all: the table)"))
        return
    columns = [Column("per step", "label"), Column("A"), Column("B"), Column("Δ"), Column("ratio")]
    console.print(fit_table(console.width, columns, _copy_rows(section),
                            title="Copies by kind and graph launches (per step)"))


def _render_time(report: DiffReport, top: int, console: Console) -> None:
    section = report.time
    if not section.available:
        return _unavailable("Time per device", section.reason, console)
    if section.paired_by_role:
        console.print(Text.assemble(("Devices", "bold"), " paired by role: "
                                    + ", ".join(f"{a} ~ {b}" for a, b in section.paired_by_role)
                                    + " (their labels differ: A's device ~ B's device)"))
    changed = [r for r in section.rows if r.device not in _ALWAYS and r.changed]
    rows = _time_rows(report, top)
    columns = [Column("device", "text", least=12), Column("per step", "label"), Column("A ms"), Column("B ms"),
               Column("Δ ms")]
    console.print(fit_table(console.width, columns,
                            [[Text(r.device), r.metric, fmt_ms(r.a), fmt_ms(r.b), fmt_ms(r.delta, signed=True)]
                             for r in rows],
                            title=_titled("Time per device or rank (mean per step)",
                                          _more(len(rows) - len([r for r in rows if r.device in _ALWAYS]),
                                                len(changed), "changed device figures"))))


def _op_table(width: int, title: str, first: str, rows: list[OpChange], total: int, what: str):
    columns = [Column(first, "name"), Column("A"), Column("B"), Column("A ms"), Column("B ms"), Column("Δ ms")]
    more = _more(len(rows), total, what)
    return fit_table(width, columns, [[Text(r.key), _num(r.count_a), _num(r.count_b), fmt_ms(r.time_a_us),
                                       fmt_ms(r.time_b_us), fmt_ms(r.time_delta_us, signed=True)] for r in rows],
                     title=_titled(title, more))


def _render_counts(section, console: Console, every: bool) -> None:
    shown = [f for f in section.counts if every or (f.changed and (f.a, f.b) != (None, None))]
    left = len(section.counts) - len(shown)
    columns = [Column("count (count-ops)", "label"), Column("A"), Column("B"), Column("Δ"), Column("ratio")]
    console.print(fit_table(console.width, columns, [[Text(f.key), _num(f.a), _num(f.b), _num(f.delta, signed=True),
                                                      _ratio(f.ratio)] for f in shown],
                            title="Ops and kernels" + ("" if every or not left else
                                                       f": the counts that changed ({left} more with --all)")))


def _render_ops(report: DiffReport, top: int, console: Console, every: bool) -> None:
    section = report.ops
    _render_counts(section, console, every)
    if not section.available:
        return _unavailable("Kernels by name and op type", section.reason, console)
    changed = [r for r in section.by_name if r.status != "same"]
    by_type = [r for r in section.by_type if r.status != "same"]
    if not every:
        if changed:
            console.print(_op_table(console.width, "Largest changes in time per step", "name",
                                    _top(changed, top), len(changed), "changed names"))
        counts = (f"{len(section.of_status('appeared'))} names appeared in B, "
                  f"{len(section.of_status('vanished'))} vanished, {len(by_type)} op types changed")
        console.print(Text(f"{counts} (--all lists them)", style="dim"))
        return
    lists = (("Took more time in B, per step (by normalized name)", section.gainers),
             ("Took less time in B, per step (by normalized name)", section.losers),
             ("Appeared in B", section.of_status("appeared")),
             ("Vanished from B", section.of_status("vanished")))
    for title, rows in lists:
        if rows:
            console.print(_op_table(console.width, title, "name", _top(rows, top), len(rows), "names"))
    if by_type:
        console.print(_op_table(console.width, "By op type, per step (largest change in time first)", "op type",
                                _top(by_type, top), len(by_type), "op types"))


def _render_rates(report: DiffReport, console: Console) -> None:
    section = report.rates
    if not section.available:
        _unavailable("Achieved rates per op family", section.reason, console)
        return
    columns = [Column("op family", "label"), Column("A\nTFLOP/s"), Column("B\nTFLOP/s"), Column("ratio"),
               Column("A\nTB/s"), Column("B\nTB/s"), Column("A kernel\nms/step", drop=1),
               Column("B kernel\nms/step", drop=1)]
    rows = [[r.family, _rate(r.tflops_a), _rate(r.tflops_b), _ratio(r.ratio), _rate(r.tbps_a), _rate(r.tbps_b),
             fmt_ms(r.kernel_us_per_step_a), fmt_ms(r.kernel_us_per_step_b)] for r in section.rows]
    console.print(fit_table(console.width, columns, rows, title="achieved rates per op family (rnnprof roofline)"))


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.3f}"


def _render_graph_counts(section, top: int, console: Console) -> None:
    rows = _top(section.counts, top)
    columns = [Column("graph", "label"), Column("device", "text", least=12), Column("op type", "text", least=12),
               Column("A"), Column("B"), Column("Δ")]
    console.print(fit_table(console.width, columns,
                            [[r.view, Text(r.device), Text(r.op_type or "(all types)"), _num(r.a), _num(r.b),
                              _num(r.delta, signed=True)] for r in rows],
                            title=_titled("Graph op counts by device and op type (largest change first)",
                                          _more(len(rows), len(section.counts), "changed counts"))))


def _render_graphs(report: DiffReport, top: int, console: Console, every: bool) -> None:
    section = report.graphs
    if not every and not section.available and not section.placement_available:
        console.print(Text.assemble(("Graph op counts and placement", "bold"), ": not compared (--all says why)"))
        return
    if not section.available:
        _unavailable("Graph op counts", section.reason, console)
    elif section.counts:
        _render_graph_counts(section, top, console)
    else:
        console.print(Text.assemble(("Graph op counts", "bold"), ": the same by device and op type"
                                    + (f" ({section.reason})" if section.reason else "")))
    if not section.placement_available:
        return _unavailable("Placement", section.placement_reason, console)
    if not section.moved:
        console.print(Text.assemble(("Placement", "bold"), ": no op moved device"))
        return
    groups = section.moved_by_scope
    shown = _top(groups, top)
    assigned = sum(m.basis == "assigned" for m in section.moved)
    columns = [Column("scope", "text"), Column("A device", "text", least=12), Column("B device", "text", least=12),
               Column("ops")]
    console.print(fit_table(console.width, columns,
                            [[Text(scope), Text(device_a), Text(device_b), _num(n)]
                             for scope, device_a, device_b, n in shown],
                            title=_titled(f"Ops that moved device: {len(section.moved)} ({assigned} as assigned, "
                                          f"{len(section.moved) - assigned} as requested, not assigned on either "
                                          f"side)", _more(len(shown), len(groups), "scopes"))))


# settings whose key alone would be misread
_SETTING_LABELS = {"distributed.rank": "rank id (distributed.rank)"}


def _render_config(report: DiffReport, top: int, console: Console) -> None:
    section = report.config
    if not section.available:
        return _unavailable("Configuration", section.reason, console)
    if not section.changes:
        console.print(Text.assemble(("Configuration", "bold"), f": the same ({section.compared} settings)"))
        return
    rows = _top(section.changes, top)
    columns = [Column("setting", "text"), Column("A", "text"), Column("B", "text")]
    console.print(fit_table(console.width, columns,
                            [[Text(_SETTING_LABELS.get(c.key, c.key)), Text("(not recorded)" if c.a is None else c.a),
                              Text("(not recorded)" if c.b is None else c.b)] for c in rows],
                            title=_titled("Configuration", _more(len(rows), len(section.changes),
                                                                 "changed settings"))))


def _op_dict(r: OpChange) -> dict:
    return {"key": r.key, "status": r.status, "count_a_per_step": r.count_a, "count_b_per_step": r.count_b,
            "time_a_us_per_step": r.time_a_us, "time_b_us_per_step": r.time_b_us,
            "time_delta_us_per_step": r.time_delta_us}


def _kind_dict(k: CopyKindChange) -> dict:
    return {"kind": k.kind, "notable": k.notable, "count_a_per_step": k.count_a, "count_b_per_step": k.count_b,
            "time_a_us_per_step": k.time_a_us, "time_b_us_per_step": k.time_b_us, "bytes_a_per_step": k.bytes_a,
            "bytes_b_per_step": k.bytes_b}


def _graph_dict(g: GraphLaunchChange) -> dict:
    return {"names": list(g.names), "notable": g.notable, "launches_a_per_step": g.launches_a,
            "launches_b_per_step": g.launches_b, "kernels_a_per_step": g.kernels_a,
            "kernels_b_per_step": g.kernels_b, "kernel_a_us_per_step": g.kernel_a_us,
            "kernel_b_us_per_step": g.kernel_b_us, "kernel_share_a": g.share_a, "kernel_share_b": g.share_b}


def _copies_dict(report: DiffReport) -> dict:
    section = report.copies
    return {"available": section.available, "reason": section.reason or None,
            "notable": [r.kind if isinstance(r, CopyKindChange) else "graph launches" for r in section.notable],
            "kinds": [_kind_dict(k) for k in section.kinds],
            "graphs": _graph_dict(section.graphs) if section.graphs is not None else None,
            "a": section.a.as_dict() if section.a is not None else None,
            "b": section.b.as_dict() if section.b is not None else None}


def _step_dict(t: StepTime) -> dict:
    return {"us_per_step": t.us, "basis": t.basis or None, "detail": t.detail or None, "periods": t.steps}


def _headline_dict(top: Headline | None) -> dict | None:
    if top is None:
        return None
    return {"a": _step_dict(top.a), "b": _step_dict(top.b), "comparable": top.comparable, "ratio": top.ratio,
            "delta_us": top.delta}


def _listed(name: str, rows: list, top: int, as_dict) -> dict:
    return {name: [as_dict(r) for r in _top(rows, top)], f"{name}_total": len(rows)}


def to_document(report: DiffReport, top: int | None) -> dict:
    """The report as JSON; each list holds its first ``top`` rows (None: 10; 0: all) and says how many there are."""
    top = JSON_ROWS if top is None else top
    time, ops, graphs, config = report.time, report.ops, report.graphs, report.config
    return {
        "a": {"source": report.a, "kind": report.kind_a},
        "b": {"source": report.b, "kind": report.kind_b},
        "identical": report.identical,
        "top": top,
        "step_time": _headline_dict(time.headline),
        "time": {"available": time.available, "reason": time.reason, "steps_a": list(time.steps_a),
                 "steps_b": list(time.steps_b),
                 "paired_by_role": [{"a": a, "b": b} for a, b in time.paired_by_role],
                 "rows": [{"device": r.device, "device_a": r.device_a or None, "device_b": r.device_b or None,
                           "metric": r.metric, "a_us_per_step": r.a, "b_us_per_step": r.b,
                           "delta_us_per_step": r.delta} for r in time.rows]},
        "ops": {"available": ops.available, "reason": ops.reason,
                "counts": [{"metric": f.key, "a": f.a, "b": f.b, "delta": f.delta, "ratio": f.ratio}
                           for f in ops.counts],
                **_listed("gainers", list(ops.gainers), top, _op_dict),
                **_listed("losers", list(ops.losers), top, _op_dict),
                **_listed("appeared", list(ops.of_status("appeared")), top, _op_dict),
                **_listed("vanished", list(ops.of_status("vanished")), top, _op_dict),
                **_listed("by_type", [r for r in ops.by_type if r.status != "same"], top, _op_dict)},
        "graphs": {"available": graphs.available, "reason": graphs.reason,
                   **_listed("counts", list(graphs.counts), top,
                             lambda r: {"view": r.view, "device": r.device, "op_type": r.op_type, "a": r.a,
                                        "b": r.b, "delta": r.delta}),
                   "placement_available": graphs.placement_available, "placement_reason": graphs.placement_reason,
                   **_listed("moved", list(graphs.moved), top,
                             lambda m: {"name": m.name, "op": m.op, "tower": m.tower, "scope": m.scope,
                                        "device_a": m.device_a, "device_b": m.device_b, "basis": m.basis}),
                   "moved_by_scope": [{"scope": s, "device_a": a, "device_b": b, "ops": n}
                                      for s, a, b, n in graphs.moved_by_scope]},
        "copies": _copies_dict(report),
        "rates": {"available": report.rates.available, "reason": report.rates.reason,
                  "families": [{"family": r.family, "tflops_a": r.tflops_a, "tflops_b": r.tflops_b, "ratio": r.ratio,
                                "tbps_a": r.tbps_a, "tbps_b": r.tbps_b, "kernel_us_a": r.kernel_us_a,
                                "kernel_us_b": r.kernel_us_b, "flops_a": r.flops_a, "flops_b": r.flops_b,
                                "steps_a": r.steps_a, "steps_b": r.steps_b,
                                "kernel_us_per_step_a": r.kernel_us_per_step_a,
                                "kernel_us_per_step_b": r.kernel_us_per_step_b}
                               for r in report.rates.rows]},
        "config": {"available": config.available, "reason": config.reason, "compared": config.compared,
                   **_listed("changes", list(config.changes), top,
                             lambda c: {"key": c.key, "a": c.a, "b": c.b})},
        "definitions": report.definitions,
    }
