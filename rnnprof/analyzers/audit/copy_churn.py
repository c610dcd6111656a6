"""PF004: copy churn: time per step in host/device copies (HtoD, DtoH, DtoD; ``rnnprof.analyzers.copies``) and in
host calls that synchronize with the GPU (``rnnprof.analyzers.syncs``).

Copies, per copy kind and step: the copies' time, and the part of it during which no kernel runs on the device
(``copies.exposed_copies``: a copy running beside kernels, on a stream of its own, is hidden behind them and
costs the step nothing). Each kind whose median exposed time per step is significant is reported (where none
is, the kind with the most), with its count, its whole time and bytes, and how many came from or went to
pageable host memory (Kineto's names say ``Pageable`` or ``Pinned``); saving (a bound): that median exposed
time, what avoiding the copies saves at most; audit replays the kind's removal instead where it can.

Synchronizing calls (``cudaStreamSynchronize``, a blocking ``cudaMemcpy``, ...), per GPU and step: the GPU idle
time they leave (``syncs.sync_stalls``: the GPU's queue is empty when such a call returns); the GPU with the
largest median is reported, a finding of its own; saving (a bound): that median.

Each judged against the run's jitter (``rnnprof.analyzers.noise``).
"""

from __future__ import annotations

import numpy as np

from rnnprof.analyzers.copies import StepCopies, exposed_copies
from rnnprof.analyzers.placement.inputs import EventsFigure, merged
from rnnprof.analyzers.syncs import StepSyncs, sync_stalls

from . import judge
from .context import AuditContext
from .finding import Finding, NotChecked, Subject

RULE_ID = "PF004"
TITLE = "Copy churn"
KINDS = ("HtoD", "DtoH", "DtoD")
SYNC = "sync"  # the evidence's ``kind`` of a synchronizing-call finding
FIXES = {"HtoD": "pin the host memory (pin_memory=True) and copy asynchronously (non_blocking=True), or keep "
                 "the data on the device",
         "HtoD pinned": "the copies already come from pinned memory: copy fewer, larger tensors, or keep the "
                        "data on the device",
         "DtoH": "avoid reading device values on the host each step (.item(), .cpu(), printing losses)",
         "DtoD": "avoid copies within the device: .contiguous(), dtype casts and clones on the hot path",
         SYNC: "remove host synchronization from the step: .item(), .cpu(), .tolist() or printing device values, "
               "torch.cuda.synchronize(), blocking copies (use non_blocking=True); read values every N steps"}


# (copy kind, device, step) -> its copies beside no kernel; (GPU, step) -> its process' synchronizing calls: each a
# device's own, which its rank gives alone
EXPOSED = EventsFigure("exposed-copies", lambda inp: exposed_copies(inp.events), merged)
SYNCS = EventsFigure("sync-stalls", lambda inp: sync_stalls(inp.events, inp.classes), merged)


def check(ctx: AuditContext) -> list[Finding] | NotChecked:
    if not ctx.has_events:
        return NotChecked(RULE_ID, "no copies in the trace")
    found = [*_copies(ctx), *([sync] if (sync := _syncs(ctx)) is not None else [])]
    if not found:
        return NotChecked(RULE_ID, "no HtoD, DtoH or DtoD copies and no synchronizing calls in the trace")
    return found


def _copies(ctx: AuditContext) -> list[Finding]:
    """A finding for each copy kind whose exposed time is significant; where none is, the kind with the most."""
    copies = ctx.comm.copies
    if copies is None or not copies.available or not copies.copies:
        return []
    steps = [s for s in copies.steps if s >= 0] or list(copies.steps)
    by_step = ctx.figure(EXPOSED)
    found = []
    for kind in KINDS:
        per = [copies.step_copies(s).get(kind) for s in steps]
        times = [c.time_us if c is not None else 0.0 for c in per]
        if not any(times):
            continue
        device = max(copies.devices, key=lambda d: d.copies.get(kind).time_us if kind in d.copies else 0.0).device
        mine = [by_step.get((kind, device, s), StepCopies()) for s in steps]
        counts = [c.count if c is not None else 0 for c in per]
        found.append(_copy_finding(ctx, kind, device, mine, times, counts))
    significant = [f for f in found if f.evidence["significance"]["significant"]]
    return sorted(significant, key=lambda f: -f.saving_us) or sorted(found, key=lambda f: -f.saving_us)[:1]


def _copy_finding(ctx: AuditContext, kind: str, device: str, mine: list[StepCopies], times: list[float],
                  counts: list[int]) -> Finding:
    """The finding of one copy kind on ``device``: ``mine``, its exposed copies per step; ``times``, their whole
    time per step; ``counts``, how many."""
    exposed = [c.exposed_us for c in mine]
    median = float(np.median(exposed))
    verdict = judge.judged(ctx, exposed)
    severity = judge.severity(ctx, verdict, median)
    total = ctx.comm.copies.copies[kind]
    whole = float(np.median(times))
    pageable = float(np.median([c.pageable for c in mine]))
    evidence = {"kind": kind, "copies_per_step": float(np.median(counts)), "ms_per_step": round(whole / 1000, 3),
                "exposed_ms_per_step": round(median / 1000, 3), "bytes_total": total.bytes, "steps": len(times),
                "significance": verdict.as_dict()}
    if kind in ("HtoD", "DtoH"):
        evidence.update({"pageable_per_step": pageable,
                         "pageable_ms_per_step": round(float(np.median([c.pageable_us for c in mine])) / 1000, 3)})
    return Finding(
        rule=RULE_ID, severity=severity,
        title=(f"{device}: {np.median(counts):.0f} {kind} copies/step, {whole / 1000:.2f} ms/step"
               + (f" ({median / 1000:.2f} ms beside no kernel)" if median < 0.95 * whole else "")
               + (f", {pageable:.0f} pageable" if pageable else "")),
        subject=Subject(device=device),
        evidence=evidence,
        saving_us=median,
        saving_basis=("bound: the copies' time during which no kernel runs on the device, median per step "
                      "(copies beside kernels are hidden behind them; avoiding the rest saves at most this)"),
        confidence=verdict.confidence,
        fix=FIXES["HtoD pinned" if kind == "HtoD" and not pageable else kind],
    )


def _syncs(ctx: AuditContext) -> Finding | None:
    stalls = ctx.figure(SYNCS)
    steps = ctx.placement.steps or [-1]  # calls outside every step: in none
    if not any(s in steps for _, s in stalls):
        return None
    per_device = {d: [stalls.get((d, s), StepSyncs()) for s in steps] for d in sorted({d for d, _ in stalls})}
    device = max(per_device, key=lambda d: np.median([c.idle_after_us for c in per_device[d]]))  # first of equals
    mine = per_device[device]
    idle = [c.idle_after_us for c in mine]
    calls = [c.calls for c in mine]
    median = float(np.median(idle))
    verdict = judge.judged(ctx, idle)
    return Finding(
        rule=RULE_ID, severity=judge.severity(ctx, verdict, median),
        title=f"{device}: {np.median(calls):.0f} synchronizing calls/step leave the GPU idle {median / 1000:.2f} "
              f"ms/step",
        subject=Subject(device=device),
        evidence={"kind": SYNC, "calls_per_step": float(np.median(calls)),
                  "host_blocked_ms_per_step": round(float(np.median([c.host_us for c in mine])) / 1000, 3),
                  "gpu_idle_after_ms_per_step": round(median / 1000, 3), "steps": len(steps),
                  "significance": verdict.as_dict()},
        saving_us=median,
        saving_basis=("bound: the GPU idle time from where a synchronizing call returns (its queue empty) to the "
                      "next GPU work, median per step (the host could have launched ahead; removing the calls "
                      "saves at most this)"),
        confidence=verdict.confidence,
        fix=FIXES[SYNC],
    )
