"""PF010: memory the allocator reserves but no tensor holds at the peak (fragmentation).

At a device's peak, reserved minus allocated (``analyzers.memory``: fragmentation) of at least
``SHARE`` of the reserved bytes and ``MIN_BYTES``. What it frees: those bytes, at the peak.
"""

from __future__ import annotations

from .context import AuditContext
from .finding import Finding, NotChecked, Subject
from .memory_common import basis, device_size, evidence, megabytes, memory_severity

RULE_ID = "PF010"
TITLE = "memory reserved but unused at the peak"
SHARE = 0.3
MIN_BYTES = 64 << 20


def check(ctx: AuditContext) -> list[Finding] | NotChecked:
    report = ctx.memory
    if report is None:
        return NotChecked(RULE_ID, "needs allocator records (a PyTorch trace with profile_memory=True)")
    reserved = [d for d in report.devices if d.peak.fragmentation is not None]
    if not reserved:
        return NotChecked(RULE_ID, "needs an allocator that reports reserved memory (CUDA's, not the CPU's)")
    found = []
    for device in reserved:
        unused = device.peak.fragmentation
        if unused < MIN_BYTES or unused < SHARE * device.peak.reserved:
            continue
        facts = evidence(ctx.placement.metadata, device, unused)
        found.append(Finding(
            rule=RULE_ID, severity=memory_severity(device, unused, device_size(ctx.placement.metadata, device)),
            title=(f"{device.device}: {megabytes(unused)} reserved but unused at the peak "
                   f"({unused / device.peak.reserved:.0%} of {megabytes(device.peak.reserved)})"),
            subject=Subject(rank=device.worker or None, device=device.device),
            evidence={**facts, "reserved_bytes": device.peak.reserved},
            saving_us=None, saving_basis=basis(facts),
            fix="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or allocate the largest tensors first"))
    return found
