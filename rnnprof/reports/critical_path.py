"""Rendering of ``rnnprof critical-path``: the chain per step, shares per device and class, the what-if,
as rich tables or one JSON document, and the Chrome trace overlay of the path (Perfetto)."""

from __future__ import annotations

import dataclasses

from rich.console import Console
from rich.text import Text

from rnnprof.analyzers.critical_path import CriticalPathReport, StepPath
from rnnprof.reports.comm import _ms
from rnnprof.reports.layout import compact_table, short_name

OP_WIDTH = 20  # the op column folds long node names at this width rather than at a few characters
CHAIN_ROWS = 30  # links shown per step in the table; the shorter ones in between are folded into one row

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


def _shown(step: StepPath, rows: int) -> set[int]:
    """Indexes of the links worth a row: the longest ones, where the edge changes device, and the ends."""
    links = step.links
    keep = {0, len(links) - 1}
    keep |= {k for k, link in enumerate(links[:-1]) if links[k + 1].device != link.device}
    ranked = sorted(range(len(links)), key=lambda k: -(links[k].dur_us + max(links[k].wait_us, 0)))
    for k in ranked:
        if len(keep) >= rows:
            break
        keep.add(k)
    return keep


def _step_label(step: StepPath) -> str:
    return "whole trace (no step markers)" if step.step < 0 else f"step {step.step}"


def chain_table(step: StepPath, rows: int = CHAIN_ROWS):
    title = (f"{_step_label(step)}: critical path {_ms(step.length_us)} ms of a {_ms(step.span_us)} ms step window, "
             f"{len(step.links)} links")
    table = compact_table("op", ("start\nms", "dur\nms", "wait\nms"), title=title,
                          text_columns=("device", "class", "edge to\nnext"))
    table.columns[0].min_width = OP_WIDTH
    keep = _shown(step, rows)
    folded, folded_us = 0, 0.0
    for k, link in enumerate(step.links):
        if k not in keep:
            folded += 1
            folded_us += link.dur_us + max(link.wait_us, 0)
            continue
        if folded:
            table.add_row(Text(f"… {folded} shorter events", style="dim"), "", "", "", "", _ms(folded_us), "")
            folded, folded_us = 0, 0.0
        cls = link.event_class if link.of_step == step.step or link.event == -1 else (
            f"{link.event_class} (step {link.of_step})" if link.of_step >= 0 else f"{link.event_class} (no step)")
        table.add_row(Text(short_name(link.name, 40)), Text(link.device), cls, link.edge or "end",
                      _ms(link.start_us), _ms(link.dur_us), _ms(link.wait_us) if link.wait_us else "")
    return table


def shares_table(step: StepPath):
    table = compact_table("share of the path", ("ms", "%"), title=f"{_step_label(step)}: where the path spends its time")
    total = step.length_us or 1.0
    for label, values in (("device", step.by_device), ("class", step.by_class)):
        for key, us in sorted(values.items(), key=lambda kv: -kv[1]):
            table.add_row(Text(f"{label} {key}"), _ms(us), f"{100 * us / total:.1f}")
    return table


def what_if_table(step: StepPath):
    table = compact_table("op", ("dur\nms", "step shrinks\nms (estimate)"),
                          title=f"{_step_label(step)}: what if one op on the path took no time (estimate)",
                          text_columns=("device",))
    table.columns[0].min_width = OP_WIDTH
    for w in step.what_if:
        table.add_row(Text(short_name(w.name, 40)), Text(w.device), _ms(w.dur_us), _ms(w.saving_us))
    return table


def render_table(report: CriticalPathReport, console: Console, overlay: str | None = None) -> None:
    for step in report.steps:
        console.print(chain_table(step))
        console.print(shares_table(step))
        if step.what_if:
            console.print(what_if_table(step))
    for lack in report.lacks:
        console.print(Text.assemble(("note: ", "bold yellow"), lack))
    if overlay:
        console.print(Text.assemble("overlay (open in Perfetto): ", (overlay, "bold")))
    console.print(Text(DEFINITIONS, style="dim"))


def to_document(report: CriticalPathReport, overlay: str | None = None) -> dict:
    steps = []
    for step in report.steps:
        doc = dataclasses.asdict(step)
        for link in doc["links"]:
            link.pop("event")
        steps.append(doc)
    return {"steps": steps, "lacks": list(report.lacks), "workers": list(report.workers), "overlay": overlay,
            "definitions": DEFINITIONS, "what_if_is_estimate": True}


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
