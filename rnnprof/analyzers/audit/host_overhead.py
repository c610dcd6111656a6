"""PF006: CPU-side operator overhead: host operators that take longer on the host than their kernels on the GPU.

For every host operator execution that launched GPU work (the innermost host operator around the runtime
call that launched it: ``launches.enclosing_host_ops``), its excess = host time - the summed time of the
kernels it launched, when positive. Per operator name and step (the execution's own step), the summed
excess; the name with the largest median per step is reported. Host time only costs step time while the GPU
waits for the host, so the saving (a bound) is that median, capped by the GPU's host-wait idle time per step
(``rnnprof.analyzers.idle``; PF003). Judged against the run's jitter (``rnnprof.analyzers.noise``).
"""

from __future__ import annotations

import numpy as np

from rnnprof.analyzers.device_work import launchers
from rnnprof.analyzers.launches import enclosing_host_ops
from rnnprof.events import Kind

from . import _per_step
from .context import AuditContext
from .finding import Finding, NotChecked, Subject

RULE_ID = "PF006"
TITLE = "CPU-side operator overhead"


def check(ctx: AuditContext) -> list[Finding] | NotChecked:
    table = ctx.table
    if table is None or not len(table):
        return NotChecked(RULE_ID, "needs a trace")
    launcher = launchers(table)
    is_gpu = np.array([d.kind == "gpu" for d in table.devices] or [False], dtype=bool)
    kernels = np.flatnonzero(is_gpu[table.device] & np.isin(table.kind, (Kind.KERNEL, Kind.COMMUNICATION))
                             & (launcher >= 0))
    if not len(kernels):
        return NotChecked(RULE_ID, "needs GPU kernels with their launches in the trace")
    calls, call_of = np.unique(launcher[kernels], return_inverse=True)
    op = enclosing_host_ops(table, calls)[call_of]
    known = op >= 0
    if not known.any():
        return NotChecked(RULE_ID, "no launch is inside a host operator")
    ops, op_of = np.unique(op[known], return_inverse=True)
    kernel_time = np.bincount(op_of, weights=np.maximum(table.dur[kernels[known]], 0.0), minlength=len(ops))
    excess = np.maximum(np.maximum(table.dur[ops], 0.0) - kernel_time, 0.0)
    step = table.step[ops]
    steps = sorted(int(s) for s in np.unique(table.step[table.step >= 0]))
    if not steps:
        return NotChecked(RULE_ID, "needs steps")
    best = None
    for name in np.unique(table.name[ops]):
        mine = table.name[ops] == name
        per = [float(excess[mine & (step == s)].sum()) for s in steps]
        median = float(np.median(per))
        if best is None or median > best[1]:
            best = (int(name), median, per, int(mine.sum()), float(kernel_time[mine].sum()),
                    float(np.maximum(table.dur[ops[mine]], 0.0).sum()))
    name, median, per, executions, kernels_us, host_us = best
    if median <= 0:
        return []
    host_wait = _host_wait_per_step(ctx)
    saving = min(median, host_wait) if host_wait is not None else median
    verdict = _per_step.judged(ctx, per)
    op_name = table.strings[name]
    return [Finding(
        rule=RULE_ID, severity=_per_step.severity(ctx, verdict, saving),
        title=f"{op_name}: {median / 1000:.2f} ms/step on the host beyond its kernels' GPU time",
        subject=Subject(op=op_name),
        evidence={"executions": executions, "host_ms_total": round(host_us / 1000, 3),
                  "kernels_ms_total": round(kernels_us / 1000, 3), "excess_ms_per_step": round(median / 1000, 3),
                  "gpu_host_wait_ms_per_step": None if host_wait is None else round(host_wait / 1000, 3),
                  "significance": verdict.as_dict()},
        saving_us=saving,
        saving_basis=("bound: its host time beyond its kernels' GPU time, median per step, capped by the GPU's "
                      "host-wait idle time per step (host time costs step time only while the GPU waits)"),
        confidence=verdict.confidence,
        fix="cut the operator's host work: fewer, larger operations (batching, fused ops, torch.compile), no "
            "Python-side loops over tensors, CUDA graphs for fixed shapes",
    )]


def _host_wait_per_step(ctx: AuditContext) -> float | None:
    """The largest median per step of host-wait idle time over the GPUs; None without causes."""
    found = [float(np.median([c.host_wait_us for c in d.idle.steps.values()]))
             for d in ctx.comm.devices if d.device.kind == "gpu" and d.idle is not None and d.idle.steps]
    return max(found) if found else None
