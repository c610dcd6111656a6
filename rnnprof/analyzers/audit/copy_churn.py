"""PF004: copy churn: time per step in host/device copies (HtoD, DtoH, DtoD; ``rnnprof.analyzers.copies``).

Per copy kind and step: the copies' time, and the part of it during which no kernel runs on the device
(``copies.exposed_copies``: a copy running beside kernels, on a stream of its own, is hidden behind them and
costs the step nothing). The kind with the largest median exposed time per step is reported, with its count,
its whole time and bytes; saving (a bound): that median exposed time, what avoiding the copies saves at most.
Judged against the run's jitter (``rnnprof.analyzers.noise``).
"""

from __future__ import annotations

import numpy as np

from rnnprof.analyzers.copies import exposed_copies

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
        device = max(copies.devices, key=lambda d: d.copies.get(kind).time_us if kind in d.copies else 0.0).device
        exposed_by = exposed_copies(ctx.table, kind)
        exposed = [exposed_by.get((device, s), 0.0) for s in steps]
        median = float(np.median(exposed))
        if best is None or median > best[1]:
            best = (kind, median, exposed, times, [c.count if c is not None else 0 for c in per], device)
    if best is None:
        return NotChecked(RULE_ID, "no HtoD, DtoH or DtoD copies in the trace")
    kind, median, exposed, times, counts, device = best
    verdict = _per_step.judged(ctx, exposed)
    severity = _per_step.severity(ctx, verdict, median)
    total = copies.copies[kind]
    whole = float(np.median(times))
    return [Finding(
        rule=RULE_ID, severity=severity,
        title=(f"{device}: {np.median(counts):.0f} {kind} copies/step, {whole / 1000:.2f} ms/step"
               + (f" ({median / 1000:.2f} ms beside no kernel)" if median < 0.95 * whole else "")),
        subject=Subject(device=device),
        evidence={"kind": kind, "copies_per_step": float(np.median(counts)), "ms_per_step": round(whole / 1000, 3),
                  "exposed_ms_per_step": round(median / 1000, 3), "bytes_total": total.bytes, "steps": len(times),
                  "significance": verdict.as_dict()},
        saving_us=median,
        saving_basis=("bound: the copies' time during which no kernel runs on the device, median per step "
                      "(copies beside kernels are hidden behind them; avoiding the rest saves at most this)"),
        confidence=verdict.confidence,
        fix=FIXES[kind],
    )]
