"""PF016: a process group whose collectives are slower per byte than the other groups' (a slow link).

Per collective type that two or more named process groups run with their messages known: each group's bus
bandwidth (nccl-tests' S times ``roofline.bus_factor`` for its members, over the calls' transfer time: their time
less the waits for the last member, ``collective_exposure``). A group below ``SLOW_RATIO`` times the median of the
other groups' is slow. Per step, its members' excess time (their transfer time times 1 - its bandwidth over the
others'), the largest member's; judged against the run's jitter and the floor between ranks.

Saving (a bound): that excess, median per step; replayed, ``--comm GROUP=R`` with R its bandwidth over the others'
(its transfers at their speed).
"""

from __future__ import annotations

import numpy as np

from rnnprof.analyzers.roofline import bus_factor

from . import judge
from .collective_exposure import exposure, worst
from .context import AuditContext
from .finding import Finding, NotChecked, Subject

RULE_ID = "PF016"
TITLE = "Slow link: a process group slower per byte"
SLOW_RATIO = 0.5  # a group's bus bandwidth below this share of the other groups' median is slow
GBPS = 1e3  # bytes per µs in a GB/s


def check(ctx: AuditContext) -> list[Finding] | NotChecked:
    found = exposure(ctx)
    if found is None:
        return NotChecked(RULE_ID, "needs collective records (a PyTorch job's trace)")
    sized = (found.group != "") & (found.bytes > 0) & (found.members > 1)
    transfer = np.maximum(found.dur_us - found.wait_us, 0.0)
    findings, compared = [], 0
    for kind in sorted(set(found.collective[sized].tolist())):
        of_kind = sized & (found.collective == kind)
        groups = sorted(set(found.group[of_kind].tolist()))
        if len(groups) < 2:
            continue
        compared += 1
        busbw = {g: _busbw(found, of_kind & (found.group == g), transfer, kind) for g in groups}
        for group in groups:
            others = [busbw[g] for g in groups if g != group and busbw[g] > 0]
            if not others or busbw[group] <= 0 or busbw[group] >= SLOW_RATIO * float(np.median(others)):
                continue
            ratio = busbw[group] / float(np.median(others))
            finding = _finding(ctx, found, of_kind & (found.group == group), transfer, kind, group, ratio, busbw)
            if finding is not None:
                findings.append(finding)
    if not compared:
        return NotChecked(RULE_ID, "no collective type that two or more named process groups run with their "
                                   "messages known")
    return findings


def _busbw(found, mask: np.ndarray, transfer: np.ndarray, kind: str) -> float:
    time = float(transfer[mask].sum())
    if time <= 0:
        return 0.0
    factor = bus_factor(kind, int(np.max(found.members[mask])))
    return float(found.bytes[mask].sum()) * factor / time / GBPS


def _finding(ctx: AuditContext, found, mask: np.ndarray, transfer: np.ndarray, kind: str, group: str, ratio: float,
             busbw: dict) -> Finding | None:
    best = worst(ctx, found, mask & (found.step >= 0), transfer * (1 - ratio))
    if best is None:
        return None
    worker, excess, saving, verdict = best.worker, best.exposed, best.saving_us, best.verdict
    others = {g: round(v, 3) for g, v in busbw.items() if g != group}
    return Finding(
        rule=RULE_ID, severity=judge.severity(ctx, verdict, saving),
        title=f"process group {group}: its {kind}s run at {busbw[group]:.2f} GB/s bus bandwidth, {ratio:.2f} times "
              f"the other groups' ({worker}: {saving / 1000:.2f} ms/step more)",
        subject=Subject(rank=worker, op=group),
        evidence={"group": group, "collective": kind, "busbw_gbps": round(busbw[group], 3), "others_gbps": others,
                  "ratio": round(ratio, 3), "excess_ms_per_step": round(saving / 1000, 3), "steps": len(excess),
                  "significance": verdict.as_dict()},
        saving_us=saving,
        saving_basis="bound: the group's transfer time beyond what the other groups' bus bandwidth would take, "
                     "median per step",
        confidence=verdict.confidence,
        fix=f"check the links of process group {group}'s ranks (NCCL_DEBUG=INFO shows the transport each ring "
            "uses: a group over sockets or a PCIe bridge where the others have NVLink), or place the group's ranks "
            "on faster links",
    )
