"""Time per device or rank, A against B: comm's breakdown of each side, mean per step, devices paired by label
then by role, and the headline step time on the first basis both sides have."""

from __future__ import annotations

import re

import numpy as np

from rnnprof.analyzers.comm import analyze_comm
from rnnprof.analyzers.comm_result import CommReport
from rnnprof.analyzers.diff.result import STEP_BASES, DeviceFigure, Headline, Side, StepTime, TimeSection
from rnnprof.analyzers.steps import step_marker_periods
from rnnprof.events import Device, Manifest

_BREAKDOWN = (("step", "span_us"), ("busy", "busy_us"), ("compute", "compute_us"),
              ("communication", "communication_us"), ("copies", "memcpy_us"), ("memset", "memset_us"),
              ("idle", "idle_us"), ("overlap", "overlap_us"))



def no_events(side: Side) -> str:
    if side.kind == "graph":
        return f"{side.label} is a graph, without trace events"
    return side.events_reason or f"{side.label} holds no trace events"



def comm_of(side: Side) -> tuple[CommReport | None, str]:
    if side.events is None:
        return None, no_events(side)
    report = analyze_comm(side.events)
    if not report.devices:
        return None, f"{side.label} has no device activity"
    return report, ""



def _per_step(report: CommReport) -> dict[tuple[str, str], float]:
    """(device, metric) -> mean µs per step; the whole trace where a device has no step."""
    out: dict[tuple[str, str], float] = {}
    for d in report.devices:
        parts = list(d.steps.values()) or [d.total]
        for metric, attr in _BREAKDOWN:
            out[(d.device.label, metric)] = float(np.mean([getattr(p, attr) for p in parts]))
    out[("all devices", "activity span")] = _activity_span(report)
    return out



def _activity_span(report: CommReport) -> float:
    """Mean over steps of the span from the first start to the last end of any device's activity."""
    if report.steps:
        spans = [max(d.steps[s].end_us for d in report.devices if s in d.steps)
                 - min(d.steps[s].start_us for d in report.devices if s in d.steps) for s in report.steps]
    else:
        spans = [max(d.total.end_us for d in report.devices) - min(d.total.start_us for d in report.devices)]
    return float(np.mean(spans))



def _timed_step_us(manifest: Manifest | None) -> float | None:
    seconds = manifest.median_step_seconds if manifest is not None else None
    return seconds * 1e6 if seconds is not None else None



def step_time(side: Side, report: CommReport | None, basis: str) -> StepTime:
    """``side``'s step period on ``basis`` (one of ``STEP_BASES``); ``us`` None when it has none."""
    if basis == "step markers":
        periods = step_marker_periods(side.events)
        if len(periods):
            return StepTime(float(periods.mean()), basis, "mean duration of the ProfilerStep#N ranges of the "
                                                          "compared steps (the loop's period; the other commands' "
                                                          "step time is the longest device's step window)",
                            len(periods))
    elif basis == "run record":
        timed = _timed_step_us(side.manifest)
        if timed is not None:
            return StepTime(timed, basis, "median of the run's timed steps (manifest)", 1)
    elif basis == "activity span" and report is not None:
        return StepTime(_activity_span(report), basis, "mean span of all device activity per step",
                        max(1, len(report.steps)))
    return StepTime(None, "")



def headline(a: Side, b: Side, ca: CommReport | None, cb: CommReport | None) -> Headline:
    """Both sides' step periods on the first basis of ``STEP_BASES`` both have (else each on its own first)."""
    for basis in STEP_BASES:
        ta, tb = step_time(a, ca, basis), step_time(b, cb, basis)
        if ta.us is not None and tb.us is not None:
            return Headline(ta, tb)

    def first(side, report):
        return next((t for t in (step_time(side, report, x) for x in STEP_BASES) if t.us is not None),
                    StepTime(None, ""))

    return Headline(first(a, ca), first(b, cb))



def _worker_order(device: Device) -> tuple:
    digits = re.findall(r"\d+", device.worker)
    return (int(digits[-1]) if digits else -1, device.worker, device.index)



def pair_devices(devices_a: list[Device], devices_b: list[Device]) -> list[tuple[Device | None, Device | None]]:
    """Devices of A and B compared with each other: the same label first, then the rest by role (host with
    host, the k-th GPU with the k-th GPU, in rank and index order); a device left over is alone (None)."""
    labels_b = {d.label: d for d in devices_b}
    pairs: list[tuple[Device | None, Device | None]] = [(d, labels_b[d.label]) for d in devices_a
                                                         if d.label in labels_b]
    paired = {d.label for d, _ in pairs}
    rest_a = [d for d in devices_a if d.label not in paired]
    rest_b = [d for d in devices_b if d.label not in paired]
    for kind in sorted({d.kind for d in rest_a} | {d.kind for d in rest_b}):
        of_a = sorted((d for d in rest_a if d.kind == kind), key=_worker_order)
        of_b = sorted((d for d in rest_b if d.kind == kind), key=_worker_order)
        pairs += list(zip(of_a, of_b))
        pairs += [(d, None) for d in of_a[len(of_b):]] + [(None, d) for d in of_b[len(of_a):]]
    return pairs



def _pair_label(da: Device | None, db: Device | None) -> str:
    if da is None or db is None:
        return (da or db).label
    return da.label if da.label == db.label else f"{da.label} ~ {db.label}"



def diff_time(a: Side, b: Side, comm_a: tuple[CommReport | None, str] | None = None,
              comm_b: tuple[CommReport | None, str] | None = None) -> TimeSection:
    (ca, why_a), (cb, why_b) = comm_a or comm_of(a), comm_b or comm_of(b)
    if ca is None or cb is None:
        top = headline(a, b, ca, cb)
        return TimeSection(available=False, reason=joined_reasons(why_a, why_b),
                           headline=top if top.a.us is not None or top.b.us is not None else None)
    fa, fb = _per_step(ca), _per_step(cb)
    pairs = pair_devices([d.device for d in ca.devices], [d.device for d in cb.devices])
    order = [m for m, _ in _BREAKDOWN]
    rows = [DeviceFigure("all devices", "activity span", fa[("all devices", "activity span")],
                         fb[("all devices", "activity span")], "all devices", "all devices")]
    for da, db in sorted(pairs, key=lambda p: _pair_label(*p)):
        label = _pair_label(da, db)
        rows += [DeviceFigure(label, metric, fa.get((da.label, metric)) if da else None,
                              fb.get((db.label, metric)) if db else None,
                              da.label if da else "", db.label if db else "") for metric in order]
    timed_a, timed_b = _timed_step_us(a.manifest), _timed_step_us(b.manifest)
    if timed_a is not None or timed_b is not None:
        rows.insert(0, DeviceFigure("run", "timed step (median)", timed_a, timed_b))
    by_role = tuple((da.label, db.label) for da, db in pairs if da and db and da.label != db.label)
    return TimeSection(available=True, steps_a=ca.steps, steps_b=cb.steps, rows=tuple(rows),
                       headline=headline(a, b, ca, cb), paired_by_role=by_role)



def joined_reasons(*texts: str) -> str:
    return "; ".join(dict.fromkeys(t for t in texts if t))  # each once, in order

