"""The HTML report of one run (or of trace files): ``rnnprof report`` renders a ``RunReport`` here.

Sections: findings (``rnnprof audit``'s, when given), the run, throughput, time per device with idle time by
cause and stragglers (per step and across ranks), kernel launches, a timeline of one step, ops, placement, the
critical path of the timeline's step (``rnnprof.reports.critical_path`` picks the chain's rows and defines the
terms), the roofline and MFU (as ``rnnprof roofline`` computes them), memory, a pipeline's bubble per rank and its stage x
time chart (as ``rnnprof pipeline`` computes them). A section the input cannot provide is left out; one line at the end names each with why.
"""

from __future__ import annotations

import json

from rnnprof.analyzers.audit import AuditResult
from rnnprof.analyzers.comm_result import CommReport
from rnnprof.analyzers.run_report import RunReport
from rnnprof.analyzers.scale import shared_cores_note
from rnnprof.reports import charts
from rnnprof.reports.comm import idle_caption, no_idle_causes
from rnnprof.reports.critical_path import CHAIN_ROWS, DEFINITIONS
from rnnprof.reports.findings_html import findings_section
from rnnprof.reports.html import Page
from rnnprof.reports.layout import outside_note, shown_links
from rnnprof.reports.memory import memory_chart
from rnnprof.reports.pipeline import pipeline_section
from rnnprof.reports.units import fmt_mb, fmt_ms

TOP_TYPES = 15
TOP_LAUNCHED = 15
TOP_SKEW = 10
SEVERITY_ORDER = ("error", "warning", "info")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def run_page(report: RunReport, name: str, notes: list[str], findings: AuditResult | None = None,
             findings_reason: str = "", left_out: dict[str, int] | None = None) -> str:
    """``findings``: the audit shown first (None with ``findings_reason`` when there is none); ``left_out``: the
    events the loaders left out, by reason (``commands.left_out_notes.counts``)."""
    page = Page(f"rnnprof report: {name}")
    page.heading(f"rnnprof report: {name}", 1)
    page.paragraph(f"input: {report.label} ({report.source_format or 'graph'}, {report.events:,} trace events)", "sub")
    _findings(page, findings, findings_reason, left_out or {})
    _run(page, report, notes)
    _throughput(page, report)
    _time(page, report)
    _launches(page, report)
    _timeline(page, report)
    _ops(page, report)
    _placement(page, report)
    _critical_path(page, report)
    _roofline(page, report)
    _memory(page, report)
    _pipeline(page, report)
    page.left_out_line()
    return page.render()


def _findings(page: Page, result: AuditResult | None, reason: str, left_out: dict[str, int]) -> None:
    """The audit's findings, as ``rnnprof audit`` ranks them (``findings_html``)."""
    if result is None:
        page.leave_out("Findings", reason or "no audit of this input")
        return
    page.heading("Findings")
    findings_section(page, result, left_out)


def _run(page: Page, report: RunReport, notes: list[str]) -> None:
    manifest = report.manifest
    if manifest is None:
        if notes:
            page.heading("The run")
            for note in notes:
                page.paragraph(f"note: {note}", "note")
        page.leave_out("Configuration and environment",
                       f"{report.source_format or 'graph'} input carries no run manifest (only rnnprof run "
                       "directories record configuration, versions and devices)")
        return
    page.heading("The run")
    for note in notes:
        page.paragraph(f"note: {note}", "note")
    machine = manifest.machine
    page.facts([("status", manifest.status if manifest.has("status") else None), ("created", manifest.created),
                ("finished", manifest.finished), ("command", " ".join(manifest.command)),
                ("host", manifest.host), ("CPU cores", machine.get("cpu_count")),
                ("platform", machine.get("platform")),
                ("versions", ", ".join(f"{k} {v}" for k, v in manifest.versions.items() if v)),
                ("traced steps", _join(manifest.traced_steps)),
                ("profiled steps", _join(manifest.profiled_steps))])
    devices = manifest.devices
    if devices:
        page.heading("Devices", 3)
        page.table(["device", "kind"], [[d.name, d.kind] for d in devices])
        kind = devices[0].kind
        shared = shared_cores_note(str(kind), machine.get("cpu_count"))
        if shared:
            page.paragraph(f"note: {shared}", "note")
    for title, values in (("Configuration", manifest.config), ("Session configuration", manifest.session_config)):
        if values:
            page.heading(title, 3)
            page.table(["setting", "value"], [[k, _value(v)] for k, v in values.items()])
    for key, value in (("error", manifest.error), ("exit_code", manifest.exit_code)):
        if value not in (None, ""):
            page.paragraph(f"{key}: {value}", "note")


def _join(values: tuple[int, ...]) -> str:
    return ", ".join(map(str, values))


def _value(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _throughput(page: Page, report: RunReport) -> None:
    manifest = report.manifest
    throughput = manifest.throughput if manifest is not None else None
    measured = isinstance(throughput, dict) and isinstance(throughput.get("words_per_second"), (int, float))
    steps = report.step_times
    if not measured and steps is None:
        page.leave_out("Throughput", "the input holds neither measured training steps (rnnprof trace of a built-in "
                       "workload records them) nor step markers with durations (ProfilerStep#N ranges)")
        return
    page.heading("Throughput")
    if steps is not None:
        page.table(["step markers", "steps/s", "median step ms", "spread ms (MAD)", "shortest ms", "longest ms"],
                   [[steps.steps, f"{steps.steps_per_second:,.3f}", fmt_ms(steps.median_us), fmt_ms(steps.mad_us),
                     fmt_ms(steps.min_us), fmt_ms(steps.max_us)]], numeric=set(range(6)),
                   caption="from the trace's ProfilerStep#N ranges, one per rank and step (the loop's period; the "
                           "step time of the findings is the longest device's step window); steps/s = 1 / median "
                           "step; MAD = median absolute deviation from the median")
        _profiler_cost(page, report)
    if not measured:
        return
    rows = [["timed batches", throughput.get("steps"), throughput.get("words_per_second"),
             throughput.get("mean_step_seconds"), throughput.get("median_step_seconds"),
             throughput.get("std_step_seconds")]]
    with_warmup = throughput.get("with_warmup")
    if isinstance(with_warmup, dict):
        rows.append(["warm-up + timed", with_warmup.get("steps"), with_warmup.get("words_per_second"),
                     with_warmup.get("mean_step_seconds"), with_warmup.get("median_step_seconds"),
                     with_warmup.get("std_step_seconds")])
    page.table(["batches", "steps", "words/s", "mean step (s)", "median step (s)", "std (s)"],
               [[r[0], r[1], *(_number(v) for v in r[2:])] for r in rows], numeric={1, 2, 3, 4, 5},
               caption=f"words = {throughput.get('words_definition', 'as the workload counts them')}")
    warmup, timed = list(manifest.step_times.warmup), list(manifest.step_times.timed)
    if warmup or timed:
        page.chart("step-times", charts.spec(charts.step_times_chart([("this run", warmup, timed)],
                                                                     "Step times: warm-up, then timed")))


def _profiler_cost(page: Page, report: RunReport) -> None:
    """Each PyTorch rank's traced steps against its untraced ones, where its capture timed enough of both."""
    known = [c for c in report.profiler_cost.values() if c.step_cost_us is not None]
    if not known:
        return
    page.table(["rank", "traced median ms", "untraced median ms", "profiler ms/step", "µs per recorded op"],
               [[c.worker, fmt_ms(c.traced_median_us), fmt_ms(c.untraced_median_us), fmt_ms(c.step_cost_us),
                 "-" if c.per_op_us is None else f"{c.per_op_us:.2f}"] for c in known], numeric={1, 2, 3, 4},
               caption="the profiler's own cost: each rank's steps by its capture's clock, traced against untraced "
                       "(not step 0, the profiler's warm-up or the export); the step markers above are traced "
                       "steps and hold it")


def _number(value) -> str:
    if not isinstance(value, (int, float)):
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.4f}"


def _time(page: Page, report: RunReport) -> None:
    comm = report.comm
    if comm is None:
        page.leave_out("Time per device", report.comm_reason)
        return
    page.heading("Time per device")
    page.paragraph("As rnnprof comm measures it: span = first start to last end of the device's activity; the bars "
                   "split it into compute alone, compute overlapping communication, communication alone, copies and "
                   "other work alone, and idle.", "sub")
    page.table(["device", "basis", "span ms", "busy ms", "idle %", "compute %", "communication %", "memcpy ms",
                "overlap %"],
               [[d.device.label, d.basis, fmt_ms(d.total.span_us), fmt_ms(d.total.busy_us),
                 _pct(d.total.pct(d.total.idle_us)), _pct(d.total.pct(d.total.compute_us)), _pct(d.total.pct(d.total.communication_us)),
                 fmt_ms(d.total.memcpy_us), _pct(d.total.overlap_pct)] for d in comm.devices],
               numeric=set(range(2, 9)))
    page.chart("breakdown", charts.spec(charts.breakdown_chart(comm)))
    if comm.steps:
        page.paragraph("Per step: each step's window on a device runs from its first work to the next step's "
                       "first work there (the last step's to its last end), so the windows never overlap; a step's "
                       "bars are the device's work in its window, whichever step launched it.", "sub")
        page.chart("step-breakdown", charts.spec(charts.step_breakdown_chart(comm)))
        if len(comm.steps) > charts.MAX_STEP_BARS:
            page.paragraph(f"note: the chart shows the first {charts.MAX_STEP_BARS} of {len(comm.steps)} steps",
                           "note")
        outside = outside_note(comm.outside_steps, selected=False, counted="left out of every step's figures")
        if outside:
            page.paragraph(f"note: {outside}", "note")
    else:
        page.leave_out("Per-step bars", "the trace has no step markers")
    _idle(page, comm)
    if comm.stragglers:
        shown = comm.stragglers[:20]
        page.heading("Stragglers", 3)
        page.table(["step", "devices", "last to finish", "lag vs median ms", "lag vs earliest ms",
                    "last to start communication", "lag vs earliest ms"],
                   [[s.step if s.step is not None else "all", s.devices, s.last_to_finish.label,
                     fmt_ms(s.finish_lag_vs_median_us), fmt_ms(s.finish_lag_vs_earliest_us),
                     s.last_comm_start.label if s.last_comm_start else "-",
                     fmt_ms(s.comm_start_lag_vs_earliest_us) if s.comm_start_lag_vs_earliest_us is not None else "-"]
                    for s in shown], numeric={1, 3, 4, 6},
                   caption=(f"first {len(shown)} of {len(comm.stragglers)}" if len(comm.stragglers) > len(shown)
                            else ""))
    _across_ranks(page, comm)


def _idle(page: Page, comm: CommReport) -> None:
    devices = [d for d in comm.devices if d.idle is not None]
    without = no_idle_causes(comm)
    if not devices:
        page.leave_out("Idle time by cause", "; ".join(why for _, why in without) or "no device was idle")
        return
    page.heading("Idle time by cause", 3)
    rows = []
    for d in devices:
        for label, c in ((d.device.label, d.idle.total),
                         *((f"{d.device.label} {s.stream}", s.total) for s in d.idle.streams)):
            rows.append([label, fmt_ms(c.idle_us), *(f"{100 * c.share(us):.1f}"
                                                   for us in (c.host_wait_us, c.kernel_wait_us, c.other_us))])
    page.table(["device / stream", "idle ms", "host wait %", "kernel wait %", "other %"], rows, numeric={1, 2, 3, 4},
               caption="as rnnprof comm measures it: " + idle_caption(comm))
    for labels, why in without:
        page.leave_out(f"Idle time by cause of {', '.join(labels)}", why)


def _across_ranks(page: Page, comm: CommReport) -> None:
    collectives = comm.collectives
    if collectives is None:
        return
    page.heading("Stragglers across ranks", 3)
    if collectives.straggler is None:
        page.paragraph(f"No collective was matched across ranks ({collectives.unmatched} seen on one rank only).")
        return
    rank = next(r for r in collectives.ranks if r.worker == collectives.straggler)
    page.paragraph(f"Straggler: {collectives.straggler} arrived last at {rank.arrived_last} of {rank.collectives} "
                   f"collectives, costing the other ranks {fmt_ms(rank.caused_wait_us)} ms of waiting.")
    page.table(["rank", "collectives", "arrived last", "caused ms", "waited ms"],
               [[r.worker, r.collectives, r.arrived_last, fmt_ms(r.caused_wait_us), fmt_ms(r.waited_us)]
                for r in collectives.ranks], numeric={1, 2, 3, 4},
               caption="as rnnprof comm measures it: caused = the other ranks' wait at the collectives it arrived "
                       "last at; waited = its own wait for the last rank")
    shown = sorted(collectives.collectives, key=lambda c: -c.skew_us)[:TOP_SKEW]
    page.table(["collective", "type", "#", "ranks", "last rank", "skew ms", "waited ms"],
               [[c.name.split("(")[0] + (f" [{c.group}]" if c.group else ""), c.collective_type,
                 f"{c.index} {c.matched_by}", len(c.arrivals), c.last.worker, fmt_ms(c.skew_us),
                 fmt_ms(c.caused_wait_us)]
                for c in shown], numeric={3, 5, 6}, clip={0},
               caption=f"the {len(shown)} of {len(collectives.collectives)} matched collectives with the largest "
                       "arrival skew (last rank's start - first rank's start)")


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _launches(page: Page, report: RunReport) -> None:
    launches = report.launches
    if launches is None or not launches.available:
        page.leave_out("Kernel launches", launches.reason if launches is not None else report.comm_reason
                       or "the input holds no trace events")
        return
    page.heading("Kernel launches")
    page.paragraph(f"{launches.kernels:,} GPU kernels, {launches.launched:,} with their launch call; launch delay "
                   f"median {_us(launches.delay_median_us)} µs, p95 {_us(launches.delay_p95_us)} µs; "
                   f"{100 * launches.short_share:.1f}% shorter than {launches.short_kernel_us:g} µs; "
                   f"{100 * launches.shorter_than_launch / max(launches.launched, 1):.1f}% ran shorter than their "
                   "launch call. As rnnprof count-ops measures them.")
    if launches.host_wait_share:
        page.table(["GPU", "host-wait idle % of span", "launch-bound"],
                   [[gpu, f"{100 * share:.1f}", "yes" if gpu in launches.launch_bound else "no"]
                    for gpu, share in launches.host_wait_share.items()], numeric={1})
    shown = launches.by_name[:TOP_LAUNCHED]
    page.table(["kernel", "kernels", "launched", "total ms", "kernel median µs", "call median µs",
                "delay median µs", "delay p95 µs", "shorter than call", "short"],
               [[k.name, k.kernels, k.launched, fmt_ms(k.total_us), _us(k.kernel_median_us),
                 _us(k.launch_call_median_us), _us(k.delay_median_us), _us(k.delay_p95_us), k.shorter_than_launch,
                 k.short] for k in shown], numeric=set(range(1, 10)), clip={0},
               caption=f"the {len(shown)} of {len(launches.by_name)} kernel names with the most summed time; delay = "
                       "kernel start - start of its launch call")
    ops = launches.by_host_op[:TOP_LAUNCHED]
    if ops:
        page.table(["host op", "executions", "kernels", "host total ms", "host median µs", "kernels median µs",
                    "longer on host"],
                   [[o.name, o.ops, o.kernels, fmt_ms(o.host_total_us), _us(o.host_median_us), _us(o.kernels_median_us),
                     o.longer_on_host] for o in ops], numeric=set(range(1, 7)), clip={0},
                   caption=f"the {len(ops)} of {len(launches.by_host_op)} host operators that launched kernels with "
                           "the most host time: host = its duration, kernels = the summed duration of the kernels "
                           "it launched, medians per execution")


def _timeline(page: Page, report: RunReport) -> None:
    timeline = report.timeline
    if timeline is None:
        page.leave_out("The timeline", report.timeline_reason)
        return
    page.heading("Timeline of one step")
    what = (f"step {timeline.step}, the step of median length among {timeline.steps_seen} steps"
            if timeline.step is not None else "the whole trace (no step markers)")
    page.paragraph(f"{what}: {timeline.events:,} device events over {fmt_ms(timeline.span_us)} ms; scroll to zoom, "
                   "drag to pan, hover for names.", "sub")
    if timeline.note:
        page.paragraph(f"note: {timeline.note}", "note")
    page.chart("timeline", charts.spec(charts.timeline_chart(timeline)))


def _ops(page: Page, report: RunReport) -> None:
    page.heading("Ops")
    counts = report.opcount
    kernels = counts.kernels
    if kernels.available:
        page.heading("Kernels per device per step", 3)
        page.table(["device", "CPU kernels", "GPU kernels", "GPU launches", "copies", "outside steps"],
                   [[d.device, f"{kernels.per_step(d.cpu_kernels):,.1f}", f"{kernels.per_step(d.gpu_kernels):,.1f}",
                     f"{kernels.per_step(d.gpu_launches):,.1f}", f"{kernels.per_step(d.copies):,.1f}", d.outside_steps]
                    for d in kernels.devices], numeric={1, 2, 3, 4, 5},
                   caption=f"per step over {kernels.n_steps} step(s); launches and copies are not kernels")
    else:
        page.leave_out("Kernel counts", kernels.reason)
    if kernels.available or counts.runtime_graph.available or counts.user_graph.available:
        page.chart("opcount", charts.spec(charts.opcount_chart(counts)))
    for title, graph in (("User graph", counts.user_graph), ("Runtime graph", counts.runtime_graph)):
        if not graph.available:
            page.leave_out(f"The {title.lower()}", graph.reason)
            continue
        page.heading(f"{title} ops", 3)
        page.paragraph(f"{graph.total:,} ops: {graph.top_level:,} top-level, {graph.in_functions:,} in function "
                       "bodies", "sub")
        page.table(["device", "ops"], [[device or "(none)", n] for device, n in graph.by_device.items()], numeric={1})
        top = sorted(graph.by_type.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_TYPES]
        page.table(["op type", "ops"], [[t, n] for t, n in top], numeric={1}, clip={0},
                   caption=f"the {len(top)} most common of {len(graph.by_type)} op types")
    for title, entries in (("Top kernels and device ops by time", report.top_device),
                           ("Top host operators by time", report.top_host)):
        if not entries:
            page.leave_out(title, report.top_reason or "none in this input")
            continue
        page.heading(title, 3)
        page.table(["name", "class", "events", "devices", "total ms", "share %"],
                   [[e.name, e.cls, e.events, e.devices, fmt_ms(e.total_us), f"{100 * e.share:.1f}"] for e in entries],
                   numeric={2, 3, 4, 5}, clip={0})
        name = "top-device" if entries is report.top_device else "top-host"
        page.chart(name, charts.spec(charts.top_chart(entries, title)))


def _placement(page: Page, report: RunReport) -> None:
    result = report.placement
    if result is None:
        page.leave_out("The placement audit", report.placement_reason)
        return
    page.heading("Placement findings")
    if result.findings:
        page.table(["severity", "rule", "finding", "devices", "evidence", "cost per step", "fix"],
                   [[f.severity.label, f.rule_id, f.title, ", ".join(f.devices), _evidence(f.evidence),
                     "-" if f.cost_us_per_step is None else f"{f.cost_us_per_step:,.1f} µs ({f.cost_basis})",
                     f.fix] for f in result.findings])
    else:
        page.paragraph("No placement problem found.")
    page.paragraph(f"Rules checked: {', '.join(result.checked) or 'none'}.", "sub")
    if result.not_checked:
        page.table(["rule not checked", "why"], [[n.rule_id, n.reason] for n in result.not_checked])


def _evidence(evidence: dict) -> str:
    return "; ".join(f"{k}: {_value(v)}" for k, v in evidence.items())[:600]


def _critical_path(page: Page, report: RunReport) -> None:
    result = report.critical_path
    if result is None:
        page.leave_out("The critical path", report.critical_path_reason)
        return
    page.heading("Critical path")
    for step in result.steps:
        what = "the whole trace (no step markers)" if step.step < 0 else f"step {step.step}, the timeline's step"
        page.paragraph(f"{what}: critical path {fmt_ms(step.length_us)} ms of a {fmt_ms(step.span_us)} ms step, "
                       f"{len(step.links):,} events; as rnnprof critical-path computes it.", "sub")
        page.chart("critical-path", charts.spec(charts.critical_path_chart(step)))
        if len(step.links) > charts.MAX_PATH_BARS:
            page.paragraph(f"note: the chart shows the first {charts.MAX_PATH_BARS:,} of {len(step.links):,} events "
                           "of the path", "note")
        keep = shown_links(step, CHAIN_ROWS)
        rows, folded, folded_us = [], 0, 0.0
        for k, link in enumerate(step.links):
            if k not in keep:
                folded, folded_us = folded + 1, folded_us + link.dur_us + max(link.wait_us, 0)
                continue
            if folded:
                rows.append([f"… {folded} shorter events", "", "", "", "", fmt_ms(folded_us), ""])
                folded, folded_us = 0, 0.0
            rows.append([link.name, link.device, link.event_class, link.edge or "end", fmt_ms(link.start_us),
                         fmt_ms(link.dur_us), fmt_ms(link.wait_us) if link.wait_us else ""])
        page.table(["op", "device", "class", "edge to next", "start ms", "dur ms", "wait ms"], rows,
                   numeric={4, 5, 6}, clip={0}, caption="the chain: its longest links, its ends and where it changes "
                                                     "device; the links between folded")
        total = step.length_us or 1.0
        page.table(["share of the path", "ms", "%"],
                   [[f"{label} {key}", fmt_ms(us), f"{100 * us / total:.1f}"]
                    for label, values in (("device", step.by_device), ("class", step.by_class))
                    for key, us in sorted(values.items(), key=lambda kv: -kv[1])], numeric={1, 2})
        if step.what_if:
            page.table(["op", "device", "dur ms", "step shrinks ms (estimate)"],
                       [[w.name, w.device, fmt_ms(w.dur_us), fmt_ms(w.saving_us)] for w in step.what_if],
                       numeric={2, 3}, clip={0}, caption="what if one op on the path took no time (an estimate)")
    for lack in result.lacks:
        page.paragraph(f"note: {lack}", "note")
    page.paragraph(DEFINITIONS, "sub")


def _roofline(page: Page, report: RunReport) -> None:
    result = report.roofline
    if result is None:
        page.leave_out("Roofline and MFU", report.roofline_reason)
        return
    page.heading("Roofline and MFU")
    peaks = result.peaks
    page.paragraph("peaks: " + ("none known for this device (rnnprof roofline --peak-tflops/--peak-tbps)"
                                if peaks is None else f"{peaks.device} ({peaks.source}), {peaks.tbps:g} TB/s")
                   + "; as rnnprof roofline computes them: achieved rates over each operator's kernel time (a CPU "
                     "run's: its own time), MFU = matrix FLOPs / step wall time / peak", "sub")
    if result.steps:
        page.table(["step", "dtype", "wall ms", "GFLOP", "matrix GFLOP", "TFLOP/s", "MFU %"],
                   [[s.step, s.dtype or "-", fmt_ms(s.wall_us), f"{s.flops / 1e9:,.3f}", f"{s.matrix_flops / 1e9:,.3f}",
                     "-" if s.tflops_per_s is None else f"{s.tflops_per_s:,.3f}",
                     "-" if s.mfu is None else f"{100 * s.mfu:.2f}"] for s in result.steps], numeric={2, 3, 4, 5, 6})
    if not result.families:
        page.leave_out("Operator rates", "no modeled operator ran")
        return
    page.table(["family", "bound", "ops", "GFLOP", "kernel ms", "TFLOP/s", "TB/s", "FLOP/B", "of roofline %"],
               [[name, row.bound or "-", row.count, f"{row.rates.flops / 1e9:,.3f}", fmt_ms(row.rates.kernel_us),
                 _rate(row.rates.tflops_per_s), _rate(row.rates.tb_per_s), _rate(row.rates.intensity),
                 "-" if row.of_roofline is None else f"{100 * row.of_roofline:.1f}"]
                for name, row in result.families.items()], numeric={2, 3, 4, 5, 6, 7, 8})
    page.chart("roofline", charts.spec(charts.roofline_chart([("", result)])))


def _pipeline(page: Page, report: RunReport) -> None:
    if report.pipeline is None:
        page.leave_out("The pipeline", "no pipeline: no two ranks send to each other and work in the same steps")
        return
    page.heading("Pipeline")
    pipeline_section(page, report.pipeline)


def _memory(page: Page, report: RunReport) -> None:
    result = report.memory
    if result is None:
        page.leave_out("Memory", report.memory_reason)
        return
    page.heading("Memory")
    page.paragraph("as rnnprof memory computes them: each device's peak of allocated memory, the allocator's "
                   "reserved bytes then, and the operator running; MB = 10^6 bytes", "sub")
    page.table(["device", "peak MB", "reserved MB", "unused MB", "step", "operator at the peak", "growth MB/step"],
               [[d.device, fmt_mb(d.peak.allocated), _mb(d.peak.reserved), _mb(d.peak.fragmentation),
                 d.peak.step if d.peak.step >= 0 else "-", d.peak.operator or "-",
                 "-" if d.growth.reason else fmt_mb(d.growth.per_step)] for d in result.devices],
               numeric={1, 2, 3, 4, 6})
    page.chart("memory", charts.spec(memory_chart(result)))


def _mb(value: int | None) -> str:
    return "-" if value is None else fmt_mb(value)


def _rate(value) -> str:
    return "-" if value is None else f"{value:,.3f}"
