"""PF002: communication not overlapped with compute.

Per device and step (``rnnprof.analyzers.comm``'s windows): exposed = communication - the part during which
compute runs - the waits for the last rank at the collectives matched across ranks (``collectives``; a
straggler is PF001's) - on a CPU rank (gloo), its part of a collective after the first member finished
(the data was exchanged; the rest is its worker thread waiting for a core while its main thread runs on) -
the part during which another device of the same process computes (a TensorFlow tower waiting for another
tower, which overlapping cannot shorten). The device with the largest median exposed time is reported.

Saving (a bound), per step: the exposed time, at most the device's compute outside its communication
(overlap hides it behind that compute and no more); the median over the steps. Judged against the run's
jitter (``rnnprof.analyzers.noise``), and between processes (ranks, cluster tasks) against at least
``noise.CROSS_RANK_FLOOR_US``: a collective lasts as long as its slowest member takes to be scheduled, a
time slice or more on a loaded host; a figure within it is at most info.
"""

from __future__ import annotations

import numpy as np

from rnnprof.analyzers.classify import EventClass
from rnnprof.analyzers.device_work import BASIS_HOST_OPS, device_work_mask
from rnnprof.analyzers.noise import CROSS_RANK_FLOOR_US, significance
from rnnprof.analyzers.placement.busy import length, minus, union_array
from rnnprof.analyzers.placement.inputs import AuditInput, EventsFigure, merged

from . import judge as _per_step
from .context import AuditContext
from .finding import Finding, NotChecked, Subject

RULE_ID = "PF002"
TITLE = "Exposed communication"


def check(ctx: AuditContext) -> list[Finding] | NotChecked:
    if not ctx.has_events or not ctx.comm.devices:
        return NotChecked(RULE_ID, "needs a trace with device activity")
    waits = _waits(ctx)
    beside = ctx.figure(BESIDE)
    best = None
    for d in ctx.comm.devices:
        exposed = {s: max(b.communication_us - b.overlap_us - waits.get((d.device.worker, s), 0.0)
                          - beside.get((d.device, s), 0.0), 0.0) for s, b in d.steps.items()}
        if not exposed or max(exposed.values()) <= 0:
            continue
        hideable = {s: max(b.compute_us - b.overlap_us, 0.0) for s, b in d.steps.items()}
        median = float(np.median(list(exposed.values())))
        if best is None or median > best[1]:
            best = (d, median, exposed, hideable)
    if best is None:
        return NotChecked(RULE_ID, "no communication on any device")
    device, median, exposed, hideable = best
    saving_per_step = [min(exposed[s], hideable[s]) for s in exposed]
    saving = float(np.median(saving_per_step))
    between_processes = device.device.worker.startswith("rank") or len({d.worker for d in ctx.placement.devices}) > 1
    verdict = significance(saving_per_step, ctx.noise.spread_us,
                           floor_us=CROSS_RANK_FLOOR_US if between_processes else 0.0)
    severity = _per_step.severity(ctx, verdict, saving)
    comm = float(np.median([b.communication_us for b in device.steps.values()]))
    return [Finding(
        rule=RULE_ID, severity=severity,
        title=f"{device.device.label}: {median / 1000:.2f} ms/step of communication not overlapped with compute",
        subject=Subject(rank=device.device.worker or None, device=device.device.label),
        evidence={"exposed_ms_per_step": round(median / 1000, 3), "communication_ms_per_step": round(comm / 1000, 3),
                  "exposed_ms_total": round(sum(exposed.values()) / 1000, 3),
                  "compute_outside_communication_ms_per_step": round(float(np.median(list(hideable.values())))
                                                                     / 1000, 3),
                  "steps": len(exposed), "significance": verdict.as_dict()},
        saving_us=saving,
        saving_basis=("bound: exposed communication (not counting waits for late ranks, a CPU rank's finishing "
                      "after the first member did, or waits for another device of the process), at most the "
                      "device's compute outside its communication, median per step "
                      "(overlapping it with compute hides it behind that compute and no more)"),
        confidence=verdict.confidence,
        fix="overlap the communication with compute: DDP bucketing (bucket_cap_mb), gradient accumulation "
            "with no_sync, or communication on its own stream",
    )]


def _waits(ctx: AuditContext) -> dict[tuple[str, int], float]:
    """(worker, step) -> its summed waits at the step's matched collectives: for the last member to start, and
    on a CPU rank for its own thread to finish after the first member has (``end - first end``)."""
    report = ctx.comm.collectives
    cpu_ranks = {d.device.worker for d in ctx.comm.devices if d.basis == BASIS_HOST_OPS}
    out: dict[tuple[str, int], float] = {}
    for c in report.collectives if report is not None else ():
        first_end = min(a.end_us for a in c.arrivals)
        for a in c.arrivals:
            late = max(a.end_us - first_end, 0.0) if a.worker in cpu_ranks else 0.0
            out[(a.worker, c.step)] = out.get((a.worker, c.step), 0.0) + a.wait_us + late
    return out


def _beside_other_devices(inp: AuditInput) -> dict:
    """(device, step) -> the part of the device's communication not overlapped with its own compute during
    which another device of the same process (worker) computes; only for processes with several devices that
    work (a Kineto rank's host device does no device work)."""
    table = inp.events
    classes = inp.classes
    work, _ = device_work_mask(table, classes)
    workers: dict[str, list[int]] = {}
    for code in np.unique(table.device[work]):
        workers.setdefault(table.devices[int(code)].worker, []).append(int(code))
    shared = [codes for codes in workers.values() if len(codes) > 1]
    if not shared:
        return {}
    out = {}
    for codes in shared:
        rows = np.flatnonzero(work & np.isin(table.device, codes) & (table.step >= 0))
        ts, end, device, step = table.ts[rows], table.end[rows], table.device[rows], table.step[rows]
        comm = classes[rows] == EventClass.COMMUNICATION
        compute = classes[rows] == EventClass.COMPUTE
        for s in np.unique(step):
            in_step = step == s
            for code in codes:
                mine = in_step & (device == code)
                talk = union_array(ts[mine & comm], end[mine & comm])
                if not len(talk):
                    continue
                exposed = minus(talk, union_array(ts[mine & compute], end[mine & compute]))
                others = in_step & compute & (device != code)
                rest = minus(exposed, union_array(ts[others], end[others]))
                out[(table.devices[code], int(s))] = length(exposed) - length(rest)
    return out


BESIDE = EventsFigure("beside-other-devices", _beside_other_devices, merged)
