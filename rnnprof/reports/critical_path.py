"""Rendering of ``rnnprof critical-path``: the chain per step, shares per device and class, the what-if,
as rich tables or one JSON document, and the Chrome trace overlay of the path (Perfetto)."""

from __future__ import annotations

import dataclasses
import operator
import textwrap

from rich.console import Console
from rich.text import Text

from rnnprof.analyzers.critical_path import CriticalPathReport, Link, StepPath
from rnnprof.analyzers.critical_path.result import WINDOW
from rnnprof.reports.abbrev import Legend
from rnnprof.reports.fit import Column, fit_table
from rnnprof.reports.json_text import Lazy
from rnnprof.reports.layout import short_name, shown_links
from rnnprof.reports.units import fmt_ms_narrow

CHAIN_ROWS = 30  # links shown per step in the table; the shorter ones in between are folded into one row
STEP_ROWS = 10  # steps in the summary table: the ones with the longest paths, in step order
TOP_OPS = 8  # operators in the summary's list of where the median step's path spends its time
WHAT_IFS = 5  # what-ifs in the summary (--links: all, for every step)

DEFINITIONS = (
    "critical path = the longest chain of the step's DAG (edges: lane order, launch, data inputs, transfers, "
    "collective joins, gloo enqueue and completion), from the step's window start (where the previous step's work "
    "ended, or its first event) to its last event; events weigh their duration within the window and each edge the "
    "wait of its target after the last of its predecessors ended; it runs through the dependency each event waited "
    "for. wait = time on the path in which its device ran nothing; other lanes = time the device ran other events "
    "(other streams or threads); untraced = a host thread's time outside every traced operator (a sleep, data "
    "loading); previous-step work = another step's events the device ran in this window; start = ms from the "
    "window's start; what-if = estimated step shrink if that op took no time, waits unchanged (bounded by the "
    "next-longest path); long kernel names are shortened (template arguments and parameters as …; --json has them whole)"
)
SUMMARY = (
    "path = the longest chain of events and waits that sets the step's time (docs/commands/critical-path.md); "
    "wait = time on the path in which its device ran nothing; what-if = estimated step shrink if that op took no "
    "time, waits unchanged; names are shortened (--json has them whole). --links: every step's path, link by link"
)


def _step_label(step: StepPath) -> str:
    return "whole trace (no step markers)" if step.step < 0 else f"step {step.step}"


def median_step(report: CriticalPathReport) -> StepPath:
    """The step whose path length is the median (the lower of two)."""
    ranked = sorted(report.steps, key=lambda s: (s.length_us, s.step))
    return ranked[(len(ranked) - 1) // 2]


def _classes(report: CriticalPathReport) -> list[str]:
    total: dict[str, float] = {}
    for step in report.steps:
        for cls, us in step.by_class.items():
            total[cls] = total.get(cls, 0.0) + us
    return sorted(total, key=lambda c: -total[c])


def steps_table(report: CriticalPathReport, width: int):
    """One row per step (the longest paths, at most STEP_ROWS): the path, the window and the share per class."""
    classes = _classes(report)
    times = report.step_time
    columns = [Column("step", "label"), *([Column("step\nms", drop=len(classes) + 1)] if times else []),
               Column("path\nms"), Column("window\nms"), Column("links"),
               *(Column("\n".join([*textwrap.wrap(c, 9), "%"]), drop=k + 1) for k, c in enumerate(classes))]
    shown = sorted(sorted(report.steps, key=lambda s: -s.length_us)[:STEP_ROWS], key=lambda s: s.step)
    rows = [[str(s.step) if s.step >= 0 else "whole trace",
             *([fmt_ms_narrow(us) if (us := times.of(s.step)) is not None else "-"] if times else []),
             fmt_ms_narrow(s.length_us), fmt_ms_narrow(s.span_us),
             f"{len(s.links):,}", *(f"{100 * s.by_class.get(c, 0.0) / (s.length_us or 1.0):.1f}" for c in classes)]
            for s in shown]
    more = f"the {len(shown)} longest paths of {len(report.steps)} steps" if len(shown) < len(report.steps) else ""
    if times:
        more = (f"{more}; " if more else "") + (f"step = the step's time as every command gives it "
                                                f"({times.short}); window = {WINDOW}")
    return fit_table(width, columns, rows, title="critical path per step (ms; % of the path per class)",
                     caption=more)


def shares_table(step: StepPath, width: int, legend: Legend, title: str = ""):
    """Where the path spends its time: per class and per device, side by side."""
    total = step.length_us or 1.0
    by_class = sorted(step.by_class.items(), key=lambda kv: -kv[1])
    by_device = sorted(step.by_device.items(), key=lambda kv: -kv[1])
    rows = []
    for k in range(max(len(by_class), len(by_device))):
        row = []
        for pairs, shorten in ((by_class, str), (by_device, legend.short)):
            key, us = pairs[k] if k < len(pairs) else ("", None)
            row += [Text(shorten(key)), "" if us is None else fmt_ms_narrow(us),
                    "" if us is None else f"{100 * us / total:.1f}"]
        rows.append(row)
    columns = [Column("class", "label"), Column("ms"), Column("%"), Column("device", "label"), Column("ms"),
               Column("%")]
    return fit_table(width, columns, rows, title=title or f"{_step_label(step)}: where the path spends its time")


def top_ops_table(step: StepPath, width: int, legend: Legend, top: int = TOP_OPS):
    """The operators (by shortened name and device) with the most time on the path."""
    total: dict[tuple[str, str], list[float]] = {}
    for link in step.links:
        if link.event >= 0:
            entry = total.setdefault((short_name(link.name, 1 << 20), link.device), [0, 0.0])
            entry[0] += 1
            entry[1] += link.dur_us
    ranked = sorted(total.items(), key=lambda kv: -kv[1][1])
    rows = [[Text(name), Text(legend.short(device)), f"{n:,}", fmt_ms_narrow(us),
             f"{100 * us / (step.length_us or 1.0):.1f}"] for (name, device), (n, us) in ranked[:top]]
    columns = [Column("op", "name"), Column("device", "label"), Column("links"), Column("ms"), Column("%")]
    return fit_table(width, columns, rows, title=f"{_step_label(step)}: the ops with the most time on the path",
                     caption=f"top {len(rows)} of {len(ranked)} ops" if len(ranked) > len(rows) else "")


def what_if_table(step: StepPath, width: int, legend: Legend, top: int | None = None):
    rows = [[Text(w.name), Text(legend.short(w.device)), fmt_ms_narrow(w.dur_us), fmt_ms_narrow(w.saving_us)]
            for w in step.what_if[:top]]
    columns = [Column("op", "name"), Column("device", "label"), Column("dur\nms"),
               Column("step shrinks\nms (estimate)")]
    return fit_table(width, columns, rows,
                     title=f"{_step_label(step)}: what if one op on the path took no time (estimate)")


def _link_class(step: StepPath, link) -> str:
    if link.of_step == step.step or link.event == -1:
        return link.event_class
    return f"{link.event_class} (step {link.of_step})" if link.of_step >= 0 else f"{link.event_class} (no step)"


def chain_table(step: StepPath, width: int, legend: Legend, rows: int = CHAIN_ROWS):
    """The path link by link: the longest links, every change of device and the ends; the rest folded."""
    keep, table_rows = shown_links(step, rows), []
    folded, folded_us = 0, 0.0
    for k, link in enumerate(step.links):
        if k not in keep:
            folded, folded_us = folded + 1, folded_us + link.dur_us + max(link.wait_us, 0)
            continue
        if folded:
            table_rows.append([Text(f"… {folded} shorter events", style="dim"), "", "", "", "",
                               fmt_ms_narrow(folded_us), ""])
            folded, folded_us = 0, 0.0
        table_rows.append([Text(link.name), Text(legend.short(link.device)), _link_class(step, link),
                           link.edge or "end", fmt_ms_narrow(link.start_us), fmt_ms_narrow(link.dur_us),
                           fmt_ms_narrow(link.wait_us) if link.wait_us else ""])
    columns = [Column("op", "name"), Column("device", "label"), Column("class", "label"),
               Column("edge to\nnext", "label"), Column("start\nms"), Column("dur\nms"), Column("wait\nms")]
    return fit_table(width, columns, table_rows,
                     title=(f"{_step_label(step)}: critical path {fmt_ms_narrow(step.length_us)} ms of a "
                            f"{fmt_ms_narrow(step.span_us)} ms step window, {len(step.links)} links"))


def render_table(report: CriticalPathReport, console: Console, overlay: str | None = None,
                 links: bool = False) -> None:
    """A screen's worth: the steps, then the median step's shares, top ops and what-ifs; ``links``: then every
    step's path link by link, its shares and all its what-ifs."""
    width, legend = console.width, Legend()
    console.print(steps_table(report, width))
    median = median_step(report)
    which = f"{_step_label(median)}" + (f" (the median path of {len(report.steps)} steps)"
                                         if len(report.steps) > 1 else "")
    console.print(shares_table(median, width, legend, title=f"{which}: where the path spends its time"))
    console.print(top_ops_table(median, width, legend))
    if median.what_if:
        console.print(what_if_table(median, width, legend, WHAT_IFS))
    for step in report.steps if links else ():
        console.print(chain_table(step, width, legend))
        console.print(shares_table(step, width, legend))
        if step.what_if:
            console.print(what_if_table(step, width, legend))
    for line in (*report.notes, *report.lacks):
        console.print(Text.assemble(("note: ", "bold yellow"), line))
    if overlay:
        console.print(Text.assemble("overlay (open in Perfetto): ", (overlay, "bold")))
    legend.render(console)
    console.print(Text(DEFINITIONS if links else SUMMARY, style="dim"))


def to_document(report: CriticalPathReport, overlay: str | None = None, lazy: bool = False) -> dict:
    """The ``--json`` document; ``lazy``: its steps built one at a time as ``layout.render_json`` writes them."""
    steps = Lazy(report.steps, _step_document) if lazy else [_step_document(step) for step in report.steps]
    return {"steps": steps, "lacks": list(report.lacks), "workers": list(report.workers), "overlay": overlay,
            "step_time": report.step_time.as_dict() if report.step_time is not None else None,
            "notes": list(report.notes), "definitions": DEFINITIONS, "what_if_is_estimate": True}


_LINK_KEYS = tuple(f.name for f in dataclasses.fields(Link) if f.name != "event")  # the row is no output
_link_values = operator.attrgetter(*_LINK_KEYS)


def _step_document(step: StepPath) -> dict:
    """``dataclasses.asdict(step)`` less each link's ``event``, built field by field (asdict deep-copies every
    value: seconds for a path of 200,000 links)."""
    doc = {}
    for f in dataclasses.fields(StepPath):
        value = getattr(step, f.name)
        if f.name == "links":
            value = [dict(zip(_LINK_KEYS, _link_values(link))) for link in value]
        elif f.name == "what_if":
            value = [dataclasses.asdict(w) for w in value]
        elif isinstance(value, dict):
            value = dict(value)
        elif isinstance(value, tuple):
            value = list(value)
        doc[f.name] = value
    return doc


def overlay_trace(report: CriticalPathReport) -> dict:
    """A Chrome trace of the paths: one process per device, one thread per lane, each path event a red slice,
    and an arrow from each event to the next on its path."""
    trace: list[dict] = []
    pids: dict[str, int] = {}
    tids: dict[tuple[str, str], int] = {}
    for step in report.steps:
        for link in step.links:
            if link.device not in pids:
                pids[link.device] = len(pids) + 1
                trace.append({"ph": "M", "name": "process_name", "pid": pids[link.device], "tid": 0,
                              "args": {"name": f"critical path: {link.device}"}})
            if (link.device, link.lane) not in tids:
                tids[(link.device, link.lane)] = len(tids) + 1
                trace.append({"ph": "M", "name": "thread_name", "pid": pids[link.device],
                              "tid": tids[(link.device, link.lane)], "args": {"name": link.lane}})
    flow_id = 0
    for step in report.steps:
        for k, link in enumerate(step.links):
            pid, tid = pids[link.device], tids[(link.device, link.lane)]
            trace.append({"ph": "X", "cat": "critical_path", "name": link.op_type or link.name, "pid": pid,
                          "tid": tid, "ts": link.ts_us, "dur": link.dur_us, "cname": "terrible",
                          "args": {"name": link.name, "step": step.step, "position": k, "class": link.event_class,
                                   "edge_to_next": link.edge, "wait_us": link.wait_us}})
            if k + 1 < len(step.links):
                nxt = step.links[k + 1]
                flow_id += 1
                leave, land = _arrow(link, nxt)
                trace.append({"ph": "s", "cat": "critical_path", "name": link.edge, "id": flow_id, "pid": pid,
                              "tid": tid, "ts": leave})
                trace.append({"ph": "f", "bp": "e", "cat": "critical_path", "name": link.edge, "id": flow_id,
                              "pid": pids[nxt.device], "tid": tids[(nxt.device, nxt.lane)], "ts": land})
    return {"traceEvents": trace, "displayTimeUnit": "ms",
            "otherData": {"producer": "rnnprof critical-path",
                          "steps": [s.step for s in report.steps]}}


def _arrow(link, nxt) -> tuple[float, float]:
    """Where an arrow leaves ``link`` and lands on ``nxt``: inside each slice, and forward in time where the
    slices allow it (a receive that started before its send ended lands where the send ends, not before)."""
    leave = link.ts_us + link.dur_us - min(link.dur_us / 2, 1.0)
    land = min(max(nxt.ts_us + min(nxt.dur_us / 2, 1.0), leave), nxt.ts_us + nxt.dur_us)
    return min(leave, max(land, link.ts_us)), land
