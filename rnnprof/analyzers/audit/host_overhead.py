"""PF006: CPU-side operator overhead: host operators that take longer on the host than their kernels on the GPU.

For every host operator execution that launched GPU work (the innermost host operator around the runtime
call that launched it: ``launches.enclosing_host_ops``), its excess = host time - the summed time of the
kernels it launched, when positive. Per operator name and step (the execution's own step), the summed
excess; the name with the largest median per step is reported. Host time only costs step time while the GPU
waits for the host, so the saving (a bound) is that median, capped by the GPU's host-wait idle time per step
(``rnnprof.analyzers.idle``; PF003). Judged against the run's jitter (``rnnprof.analyzers.noise``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rnnprof.analyzers.device_work import launchers
from rnnprof.analyzers.launches import enclosing_host_ops
from rnnprof.events import EventTable, Kind

from . import _per_step
from .context import AuditContext
from .finding import Finding, NotChecked, Subject

RULE_ID = "PF006"
TITLE = "CPU-side operator overhead"


@dataclass(frozen=True)
class _LaunchingOps:
    """The host operator executions that launched GPU kernels (``rows`` of the table): the summed time of the
    kernels each launched and its excess, host time beyond that (0 when none)."""

    rows: np.ndarray
    kernel_us: np.ndarray
    excess_us: np.ndarray


@dataclass(frozen=True)
class _Worst:
    """The host operator name (a string code) with the largest median excess per step: the median, the excess
    in each step, its executions, and its kernels' and its own summed time."""

    name: int
    median_us: float
    per_step_us: list[float]
    executions: int
    kernels_us: float
    host_us: float


def check(ctx: AuditContext) -> list[Finding] | NotChecked:
    table = ctx.table
    if table is None or not len(table):
        return NotChecked(RULE_ID, "needs a trace")
    ops = _launching_ops(table)
    if isinstance(ops, str):
        return NotChecked(RULE_ID, ops)
    steps = sorted(int(s) for s in np.unique(table.step[table.step >= 0]))
    if not steps:
        return NotChecked(RULE_ID, "needs steps")
    worst = _worst(table, ops, steps)
    if worst.median_us <= 0:
        return []
    return [_finding(ctx, worst)]


def _launching_ops(table: EventTable) -> _LaunchingOps | str:
    """The innermost host operators around the runtime calls that launched GPU kernels, or why there are none."""
    launcher = launchers(table)
    is_gpu = np.array([d.kind == "gpu" for d in table.devices] or [False], dtype=bool)
    kernels = np.flatnonzero(is_gpu[table.device] & np.isin(table.kind, (Kind.KERNEL, Kind.COMMUNICATION))
                             & (launcher >= 0))
    if not len(kernels):
        return "needs GPU kernels with their launches in the trace"
    calls, call_of = np.unique(launcher[kernels], return_inverse=True)
    op = enclosing_host_ops(table, calls)[call_of]
    known = op >= 0
    if not known.any():
        return "no launch is inside a host operator"
    ops, op_of = np.unique(op[known], return_inverse=True)
    kernel_time = np.bincount(op_of, weights=np.maximum(table.dur[kernels[known]], 0.0), minlength=len(ops))
    excess = np.maximum(np.maximum(table.dur[ops], 0.0) - kernel_time, 0.0)
    return _LaunchingOps(ops, kernel_time, excess)


def _worst(table: EventTable, ops: _LaunchingOps, steps: list[int]) -> _Worst:
    """Per operator name, the summed excess of its executions in each step (an execution's own step); the name
    with the largest median (the first of equals)."""
    step = table.step[ops.rows]
    best = None
    for name in np.unique(table.name[ops.rows]):
        mine = table.name[ops.rows] == name
        per = [float(ops.excess_us[mine & (step == s)].sum()) for s in steps]
        median = float(np.median(per))
        if best is None or median > best.median_us:
            best = _Worst(int(name), median, per, int(mine.sum()), float(ops.kernel_us[mine].sum()),
                          float(np.maximum(table.dur[ops.rows[mine]], 0.0).sum()))
    return best


def _finding(ctx: AuditContext, worst: _Worst) -> Finding:
    """The finding for the worst operator: its saving is its median excess, capped by the GPUs' host wait."""
    host_wait = _host_wait_per_step(ctx)
    saving = min(worst.median_us, host_wait) if host_wait is not None else worst.median_us
    verdict = _per_step.judged(ctx, worst.per_step_us)
    op_name = ctx.table.strings[worst.name]
    return Finding(
        rule=RULE_ID, severity=_per_step.severity(ctx, verdict, saving),
        title=f"{op_name}: {worst.median_us / 1000:.2f} ms/step on the host beyond its kernels' GPU time",
        subject=Subject(op=op_name),
        evidence={"executions": worst.executions, "host_ms_total": round(worst.host_us / 1000, 3),
                  "kernels_ms_total": round(worst.kernels_us / 1000, 3),
                  "excess_ms_per_step": round(worst.median_us / 1000, 3),
                  "gpu_host_wait_ms_per_step": None if host_wait is None else round(host_wait / 1000, 3),
                  "significance": verdict.as_dict()},
        saving_us=saving,
        saving_basis=("bound: its host time beyond its kernels' GPU time, median per step, capped by the GPU's "
                      "host-wait idle time per step (host time costs step time only while the GPU waits)"),
        confidence=verdict.confidence,
        fix="cut the operator's host work: fewer, larger operations (batching, fused ops, torch.compile), no "
            "Python-side loops over tensors, CUDA graphs for fixed shapes",
    )


def _host_wait_per_step(ctx: AuditContext) -> float | None:
    """The largest median per step of host-wait idle time over the GPUs; None without causes."""
    found = [float(np.median([c.host_wait_us for c in d.idle.steps.values()]))
             for d in ctx.comm.devices if d.device.kind == "gpu" and d.idle is not None and d.idle.steps]
    return max(found) if found else None
