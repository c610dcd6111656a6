"""PF004: copy churn: time per step in host/device copies (HtoD, DtoH, DtoD; ``rnnprof.analyzers.copies``).

The copy kind with the largest median time per step is reported, with its count and bytes; saving (a bound):
that median, what avoiding the copies saves at most when they are on the critical path. Judged against the
run's jitter (``rnnprof.analyzers.noise``).
"""

from __future__ import annotations

import numpy as np

from . import _per_step
from .context import AuditContext
from .finding import Finding, NotChecked, Subject

RULE_ID = "PF004"
TITLE = "Copy churn"
KINDS = ("HtoD", "DtoH", "DtoD")
FIXES = {"HtoD": "pin the host memory (pin_memory=True) and copy asynchronously (non_blocking=True), or keep "
                 "the data on the device",
         "DtoH": "avoid reading device values on the host each step (.item(), .cpu(), printing losses)",
         "DtoD": "avoid copies within the device: .contiguous(), dtype casts and clones on the hot path"}


def check(ctx: AuditContext) -> list[Finding] | NotChecked:
    copies = ctx.comm.copies if ctx.table is not None and len(ctx.table) else None
    if copies is None or not copies.available or not copies.copies:
        return NotChecked(RULE_ID, "no copies in the trace")
    steps = [s for s in copies.steps if s >= 0] or list(copies.steps)
    best = None
    for kind in KINDS:
        per = [copies.step_copies(s).get(kind) for s in steps]
        times = [c.time_us if c is not None else 0.0 for c in per]
        if not any(times):
            continue
        median = float(np.median(times))
        if best is None or median > best[1]:
            best = (kind, median, times, [c.count if c is not None else 0 for c in per])
    if best is None:
        return NotChecked(RULE_ID, "no HtoD, DtoH or DtoD copies in the trace")
    kind, median, times, counts = best
    verdict = _per_step.judged(ctx, times)
    severity = _per_step.severity(ctx, verdict, median)
    total = copies.copies[kind]
    device = max(copies.devices, key=lambda d: d.copies.get(kind).time_us if kind in d.copies else 0.0).device
    return [Finding(
        rule=RULE_ID, severity=severity,
        title=f"{device}: {np.median(counts):.0f} {kind} copies/step, {median / 1000:.2f} ms/step",
        subject=Subject(device=device),
        evidence={"kind": kind, "copies_per_step": float(np.median(counts)), "ms_per_step": round(median / 1000, 3),
                  "bytes_total": total.bytes, "steps": len(times), "significance": verdict.as_dict()},
        saving_us=median,
        saving_basis="bound: the copies' time, median per step (saved at most, when they are on the critical path)",
        confidence=verdict.confidence,
        fix=FIXES[kind],
    )]
