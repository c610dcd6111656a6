"""PF002: communication not overlapped with compute.

Per device and step (``rnnprof.analyzers.comm``'s windows): exposed = communication - the part of it during
which compute runs - the device's waits for the last rank at the collectives matched across ranks
(``rnnprof.analyzers.collectives``: waiting for a straggler is PF001's, not the communication's). The device with the largest median exposed time per step is reported; saving (a bound):
that median, what overlapping it fully with compute would save at most. Judged against the run's jitter
(``rnnprof.analyzers.noise``); a figure within it is at most info.
"""

from __future__ import annotations

import numpy as np

from . import _per_step
from .context import AuditContext
from .finding import Finding, NotChecked, Subject

RULE_ID = "PF002"
TITLE = "Exposed communication"


def check(ctx: AuditContext) -> list[Finding] | NotChecked:
    if ctx.table is None or not len(ctx.table) or not ctx.comm.devices:
        return NotChecked(RULE_ID, "needs a trace with device activity")
    waits = _waits(ctx)
    best = None
    for d in ctx.comm.devices:
        exposed = [max(b.communication_us - b.overlap_us - waits.get((d.device.worker, s), 0.0), 0.0)
                   for s, b in d.steps.items()]
        if not exposed or max(exposed) <= 0:
            continue
        median = float(np.median(exposed))
        if best is None or median > best[1]:
            best = (d, median, exposed)
    if best is None:
        return NotChecked(RULE_ID, "no communication on any device")
    device, median, exposed = best
    verdict = _per_step.judged(ctx, exposed)
    severity = _per_step.severity(ctx, verdict, median)
    comm = float(np.median([b.communication_us for b in device.steps.values()]))
    return [Finding(
        rule=RULE_ID, severity=severity,
        title=f"{device.device.label}: {median / 1000:.2f} ms/step of communication not overlapped with compute",
        subject=Subject(rank=device.device.worker or None, device=device.device.label),
        evidence={"exposed_ms_per_step": round(median / 1000, 3), "communication_ms_per_step": round(comm / 1000, 3),
                  "exposed_ms_total": round(sum(exposed) / 1000, 3),
                  "steps": len(exposed), "significance": verdict.as_dict()},
        saving_us=median,
        saving_basis=("bound: exposed communication (not counting waits for late ranks), median per step "
                      "(overlapping all of it saves at most this)"),
        confidence=verdict.confidence,
        fix="overlap the communication with compute: DDP bucketing (bucket_cap_mb), gradient accumulation "
            "with no_sync, or communication on its own stream",
    )]


def _waits(ctx: AuditContext) -> dict[tuple[str, int], float]:
    """(worker, step) -> its summed waits for the last member at the step's matched collectives."""
    report = ctx.comm.collectives
    out: dict[tuple[str, int], float] = {}
    for c in report.collectives if report is not None else ():
        for a in c.arrivals:
            out[(a.worker, c.step)] = out.get((a.worker, c.step), 0.0) + a.wait_us
    return out
