"""PF006: CPU-side operator overhead: host operators that take longer on the host than their kernels on the GPU.

For every host operator that launched GPU work (``launches.launching_ops``), its excess = host time - its
kernels' summed time, when positive; per operator name and step the summed excess, and the name with the
largest median per step is reported. The saving (a bound) is that median, capped by the GPU's host-wait idle
time per step (``rnnprof.analyzers.idle``), judged against the run's jitter (``rnnprof.analyzers.noise``).

On GPU-less ranks the measure is the time in *tiny operators* (names run at least ``MANY_PER_STEP`` times a step
with a median under ``TINY_US``): their outermost executions plus the short gaps between them, the largest
rank's figure per step, median over the steps. See docs/commands/audit.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rnnprof.analyzers.device_work import host_operator_devices, launchers
from rnnprof.analyzers.launches import launching_ops
from rnnprof.events import EventTable, Kind

from . import judge
from .context import AuditContext
from .finding import Finding, NotChecked, Subject

RULE_ID = "PF006"
TITLE = "CPU-side operator overhead"
MANY_PER_STEP = 100  # executions of one operator name per step and rank, for the CPU-rank measure
TINY_US = 50.0  # median duration under which an operator is mostly dispatch (CPU ranks)
NO_LAUNCHES = "needs GPU kernels with their launches in the trace, or CPU ranks' operators"


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
    cpu_ranks = host_operator_devices(table) if ops is NO_LAUNCHES else None
    if cpu_ranks:
        return _tiny_operators(ctx, cpu_ranks)
    if isinstance(ops, str):
        return NotChecked(RULE_ID, ops)
    steps = [int(s) for s in table.steps()]
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
        return NO_LAUNCHES
    ops, kernel_time, _ = launching_ops(table, launcher, kernels, np.maximum(table.dur[kernels], 0.0))
    if not len(ops):
        return "no launch is inside a host operator"
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
    verdict = judge.judged(ctx, worst.per_step_us)
    op_name = ctx.table.strings[worst.name]
    return Finding(
        rule=RULE_ID, severity=judge.severity(ctx, verdict, saving),
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
    found = [float(np.median([c.host_wait_us for c in d.idle.steps.values()])) for d in ctx.idle_gpus]
    return max(found) if found else None


def _tiny_operators(ctx: AuditContext, ranks) -> list[Finding] | NotChecked:
    """The CPU-rank measure: time in tiny operators per step, the largest rank's (docs/commands/audit.md, PF006)."""
    table = ctx.table
    steps = [int(s) for s in table.steps()]
    if not steps:
        return NotChecked(RULE_ID, "needs steps")
    per_step, executions = _tiny_per_step(table, ranks, steps)
    values = [per_step[s][0] for s in steps]
    saving = float(np.median(values))
    if saving <= 0:
        return []
    _, code, by_name = max((v for v in per_step.values() if v[1] is not None), key=lambda v: v[0])
    op_name = table.strings[max(by_name, key=by_name.get)]
    verdict = judge.judged(ctx, values)
    device = table.devices[code]
    return [Finding(
        rule=RULE_ID, severity=judge.severity(ctx, verdict, saving),
        title=(f"{device.worker}: {saving / 1000:.2f} ms/step in tiny operators (under {TINY_US:.0f} µs, "
               f"{MANY_PER_STEP}+ runs a step; most time: {op_name})"),
        subject=Subject(rank=device.worker or None, device=device.label, op=op_name),
        evidence={"tiny_ms_per_step": round(saving / 1000, 3),
                  "operators_ms_in_the_busiest_step": {table.strings[n]: round(t / 1000, 3) for n, t in
                                                       sorted(by_name.items(), key=lambda kv: -kv[1])[:8]},
                  "executions_per_step": {table.strings[n]: int(np.median(c)) for n, c in executions.items()},
                  "many_per_step": MANY_PER_STEP, "tiny_us": TINY_US, "steps": len(values),
                  "significance": verdict.as_dict()},
        saving_us=saving,
        saving_basis=("bound: per step, the largest rank's time in tiny operators (outermost executions, and "
                      "the gaps between them under the tiny threshold), median over the steps; one batched "
                      "operator instead saves at most this"),
        confidence=verdict.confidence,
        fix="batch the work: one operator over a whole tensor instead of one per element or token (an "
            "embedding lookup, indexing with a tensor, vectorized arithmetic), no Python loops over tensors; "
            "torch.compile fuses what remains",
    )]


def _tiny_per_step(table, ranks, steps: list[int]) -> tuple[dict, dict]:
    """step -> (the largest rank's time in tiny operators, that rank's device code, its time per operator name),
    and operator name -> its executions per step on each rank where it is tiny."""
    codes = [i for i, d in enumerate(table.devices) if d in ranks]
    ops = np.flatnonzero(np.isin(table.device, codes) & (table.kind == Kind.HOST_OP) & (table.step >= 0))
    per_step = {s: (0.0, None, None) for s in steps}
    executions: dict[int, list[int]] = {}
    for code in codes:
        for step in steps:
            rows = ops[(table.device[ops] == code) & (table.step[ops] == step)]
            if not len(rows):
                continue
            names, inverse, counts = np.unique(table.name[rows], return_inverse=True, return_counts=True)
            by_name_durations = np.split(table.dur[rows][np.argsort(inverse, kind="stable")], np.cumsum(counts)[:-1])
            medians = np.array([np.median(d) for d in by_name_durations])
            tiny_names = names[(counts >= MANY_PER_STEP) & (medians < TINY_US)]
            if not len(tiny_names):
                continue
            total, by_name = _outermost_time(table, rows[np.isin(table.name[rows], tiny_names)])
            if total > per_step[step][0]:
                per_step[step] = (total, code, by_name)
            for name in tiny_names:
                executions.setdefault(int(name), []).append(int(counts[names == name][0]))
    return per_step, executions


def _outermost_time(table, rows: np.ndarray) -> tuple[float, dict]:
    """The summed duration of the outermost of ``rows`` on each thread (lane), plus the gaps under ``TINY_US``
    between consecutive outermost ones; and that duration per operator name (µs)."""
    total, by_name = 0.0, {}
    for lane in np.unique(table.lane[rows]):
        mine = rows[table.lane[rows] == lane]
        mine = mine[np.lexsort((-table.dur[mine], table.ts[mine]))]
        last_end = -np.inf
        for row in mine:
            start, end = float(table.ts[row]), float(table.ts[row] + max(table.dur[row], 0.0))
            if start < last_end:
                continue  # inside an outermost tiny execution
            if 0.0 < start - last_end < TINY_US:
                total += start - last_end
            total += end - start
            name = int(table.name[row])
            by_name[name] = by_name.get(name, 0.0) + end - start
            last_end = end
    return total, by_name
