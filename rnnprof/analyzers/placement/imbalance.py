"""PA004: devices doing unequal amounts of work in the same step.

Busy time is the union of a device's compute intervals within the step (kernels on
accelerators, ops elsewhere; receives and collectives left out since they include
waiting). Spread is (max - min) / max over the towers' devices.

A PyTorch rank without a GPU (a gloo CPU rank, ``comm.host_operator_devices``) has no kernels: its busy
time is its compute as ``rnnprof comm`` measures it, the union of its host operators except while their
thread is inside a collective (DDP's gradient hook waits in ``c10d::allreduce_``). That is operator time
on the host, not kernel time, and the finding says so (``evidence["busy_measure"]``).
"""

from __future__ import annotations

import numpy as np

from rnnprof.analyzers.comm import analyze_comm, host_operator_devices

from . import frameworks
from .finding import Finding, NotChecked, Severity
from .inputs import AuditInput
from .busy import ALL_STEPS, busy_intervals, compute_devices, compute_mask, in_step, length, step_keys

RULE_ID = "PA004-device-imbalance"
TITLE = "Per-device imbalance"
WARNING_SPREAD = 0.20
CPU_RANK_MEASURE = ("on ranks without a GPU, busy time is host operator time (cpu_op, except while the "
                    "operator's thread is in a collective, as rnnprof comm's compute), not kernel time as on a GPU")


def check(inp: AuditInput, threshold: float = WARNING_SPREAD) -> list[Finding] | NotChecked:
    events = inp.events
    if events is None or not len(events):
        return NotChecked(RULE_ID, "needs a trace with per-device op or kernel times")
    homes = sorted(set(inp.tower_homes.values()))
    devices = [d for d in homes if d in events.devices] if len(homes) >= 2 else compute_devices(events)
    if len(devices) < 2:
        kinds = ", ".join(d.label for d in devices) or "none"
        return NotChecked(RULE_ID, f"the trace has one compute device ({kinds}); balance needs at least 2")
    mask = compute_mask(events)
    cpu_ranks = host_operator_devices(events) & set(devices)
    by_rank = {d.device: d for d in analyze_comm(events).devices} if cpu_ranks else {}
    busy = []  # steps x devices
    for step in step_keys(events):
        sel = in_step(events, step)
        step_events, step_mask = events.select(sel), mask[sel]
        busy.append([_rank_compute(by_rank.get(d), step) if d in cpu_ranks
                     else length(busy_intervals(step_events, d, step_mask)) for d in devices])
    busy = np.asarray(busy)
    top = busy.max(axis=1)
    spread = np.where(top > 0, (top - busy.min(axis=1)) / np.where(top > 0, top, 1), 0.0)
    over = spread > threshold
    if not over.any():
        return []
    mean = busy.mean(axis=0)
    heaviest, lightest = devices[int(mean.argmax())], devices[int(mean.argmin())]
    lost = float((top - busy.mean(axis=1))[over].sum() / len(busy))
    evidence_extra, basis_extra = {}, ""
    if cpu_ranks:
        evidence_extra = {"busy_measure": CPU_RANK_MEASURE}
        basis_extra = f"; {CPU_RANK_MEASURE}"
    if frameworks.framework(inp) == frameworks.PYTORCH:
        fix = (f"Find what {heaviest.label} runs that the other ranks do not (rnnprof count-ops by type per rank), "
               f"then balance the work per rank: the batch and sequence lengths each rank gets, and, for ranks "
               f"sharing a machine's cores, their threads (torch.set_num_threads).")
    else:
        fix = (f"Find what {heaviest.label} runs that the others do not: PA002 and PA003 name replica work and "
               f"updates pinned to one device; otherwise balance the batch per device.")
    return [Finding(
        rule_id=RULE_ID,
        severity=Severity.WARNING,
        title=(f"{heaviest.label} is busy {mean.max() / max(mean.min(), 1e-9):.1f}x as long as {lightest.label} "
               f"per step; spread above {threshold:.0%} in {int(over.sum())} of {len(busy)} steps "
               f"(median {float(np.median(spread)):.0%}, max {float(spread.max()):.0%})"),
        devices=tuple(d.label for d in devices),
        evidence={
            "threshold": threshold,
            "steps_traced": len(busy),
            "steps_over_threshold": int(over.sum()),
            "median_spread": round(float(np.median(spread)), 3),
            "max_spread": round(float(spread.max()), 3),
            "busy_us_per_step": {d.label: round(float(m), 1) for d, m in zip(devices, mean)},
            **evidence_extra,
        },
        cost_us_per_step=lost,
        cost_basis="busiest device's busy time minus the devices' mean, per step, in unbalanced steps" + basis_extra,
        fix=fix,
    )]


def _rank_compute(device_comm, step: int) -> float:
    """A CPU rank's compute µs in ``step`` (the whole trace for ``ALL_STEPS``), 0 where it did nothing."""
    if device_comm is None:
        return 0.0
    breakdown = device_comm.total if step == ALL_STEPS else device_comm.steps.get(step)
    return breakdown.compute_us if breakdown is not None else 0.0
