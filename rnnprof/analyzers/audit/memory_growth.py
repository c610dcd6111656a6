"""PF009: memory that grows from step to step (a leak).

A device whose allocated memory at each step's end grows by more than the steps' jitter and a small share of its
peak (``analyzers.memory``: growth, a leak). What it frees: the growth over the window's steps, at the peak,
and more with every further step; with the device's size known, the steps left before it is full.
"""

from __future__ import annotations

from .context import AuditContext
from .finding import Finding, NotChecked, Subject
from .memory_common import basis, device_size, evidence, megabytes, memory_severity

RULE_ID = "PF009"
TITLE = "memory that grows from step to step"


def check(ctx: AuditContext) -> list[Finding] | NotChecked:
    report = ctx.memory
    if report is None:
        return NotChecked(RULE_ID, "needs allocator records (a PyTorch trace with profile_memory=True)")
    judged = [d for d in report.devices if not d.growth.reason]
    if not judged:
        return NotChecked(RULE_ID, report.devices[0].growth.reason if report.devices else "no device")
    found = []
    for device in judged:
        growth = device.growth
        if not growth.leak:
            continue
        freed = growth.per_step * (len(growth.step_end) - 1)
        facts = evidence(ctx.placement.metadata, device, freed)
        left = facts["headroom_bytes"] // growth.per_step if facts["headroom_bytes"] is not None else None
        found.append(Finding(
            rule=RULE_ID, severity=memory_severity(device, freed, device_size(ctx.placement.metadata, device)),
            title=(f"{device.device}: memory grows {megabytes(growth.per_step)} per step over "
                   f"{len(growth.step_end)} steps (jitter {megabytes(growth.jitter)})"),
            subject=Subject(rank=device.worker or None, device=device.device),
            evidence={**facts, "growth_per_step_bytes": growth.per_step, "jitter_bytes": growth.jitter,
                      "steps": len(growth.step_end), "steps_until_full": left,
                      "step_end_bytes": {str(s): b for s, b in growth.step_end}},
            saving_us=None, saving_basis=basis(facts),
            fix="find what each step keeps (tensors appended to a list, a loss kept with its graph, caches) and "
                "release it"))
    return found
