"""PF008: one device's memory peak above the others'.

A device whose peak of allocated memory exceeds the median of the other devices' of its kind by more than
``analyzers.memory.IMBALANCE_SHARE`` of it, step by step (``analyzers.memory.imbalance``), as soft
placement makes device 0 hold every replica's softmax, or a rank keeps a buffer the others do not, from the
window's start or from the step it took it at. What it frees: the excess at its peak; the operators whose live
bytes make the difference are named.
"""

from __future__ import annotations

from .context import AuditContext
from .finding import Finding, NotChecked, Subject
from .memory_common import basis, device_size, evidence, megabytes, memory_severity

RULE_ID = "PF008"
TITLE = "one device's memory peak above the others'"


def check(ctx: AuditContext) -> list[Finding] | NotChecked:
    report = ctx.memory
    if report is None:
        return NotChecked(RULE_ID, "needs allocator records (a PyTorch trace with profile_memory=True)")
    if len(report.devices) < 2:
        return NotChecked(RULE_ID, "needs allocator records of two devices or more")
    devices = {d.device: d for d in report.devices}
    found = []
    metadata = ctx.placement.metadata
    for imbalance in report.imbalances:
        device = devices[imbalance.device]
        facts = evidence(metadata, device, imbalance.excess)
        ops = ", ".join(f"{s.name} {megabytes(s.bytes)}" for s in imbalance.operators[:3])
        since = "" if imbalance.from_step < 0 else (f" from step {imbalance.from_step} to step {imbalance.last_step}"
                                                     f" (it took {megabytes(imbalance.taken)} at step "
                                                     f"{imbalance.from_step} and kept it)")
        found.append(Finding(
            rule=RULE_ID, severity=memory_severity(device, imbalance.excess, device_size(metadata, device)),
            title=(f"{imbalance.device}: memory peak {megabytes(imbalance.excess)} above the others' median "
                   f"({megabytes(imbalance.others_median)}){since}" + (f"; most of it {ops}" if ops else "")),
            subject=Subject(rank=device.worker or None, device=device.device,
                            op=imbalance.operators[0].name if imbalance.operators else None),
            evidence={**facts, "others_median_bytes": imbalance.others_median,
                      "threshold_bytes": imbalance.threshold, "allocates_more_bytes": imbalance.allocates_more,
                      "from_step": imbalance.from_step, "taken_bytes": imbalance.taken,
                      "operators": {s.name: s.bytes for s in imbalance.operators}},
            saving_us=None, saving_basis=basis(facts),
            fix="spread what the device holds alone over every device (replicas' operators on their own device, "
                "a buffer on every rank or none)"))
    return found
