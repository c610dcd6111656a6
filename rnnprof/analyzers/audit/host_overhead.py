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

from rnnprof.analyzers.device_work import launchers
from rnnprof.analyzers.launches import launching_ops
from rnnprof.analyzers.placement.inputs import AuditInput, EventsFigure
from rnnprof.analyzers.profiler_cost import profiler_cost_of
from rnnprof.events import Device, EventTable, Kind

from . import judge
from .context import HOST_OPS, AuditContext
from .finding import Finding, NotChecked, Subject

RULE_ID = "PF006"
TITLE = "CPU-side operator overhead"
MANY_PER_STEP = 100  # executions of one operator name per step and rank, for the CPU-rank measure
TINY_US = 50.0  # median duration under which an operator is mostly dispatch (CPU ranks)
NO_LAUNCHES = "needs GPU kernels with their launches in the trace, or CPU ranks' operators"
NOT_INSIDE = "no launch is inside a host operator"


@dataclass(frozen=True)
class _LaunchingOps:
    """The host operator executions that launched GPU kernels (``rows`` of the table): the summed time of the
    kernels each launched and its excess, host time beyond that (0 when none)."""

    rows: np.ndarray
    kernel_us: np.ndarray
    excess_us: np.ndarray


@dataclass(frozen=True)
class NameExcess:
    """One host operator name's executions that launched GPU kernels: their summed excess in each step (an
    execution's own step; steps with none left out), how many, and their kernels' and their own summed time."""

    per_step_us: dict[int, float]
    executions: int
    kernels_us: float
    host_us: float


@dataclass(frozen=True)
class _Worst:
    """The host operator name with the largest median excess per step: the median, the excess in each step, its
    executions, and its kernels' and its own summed time."""

    name: str
    median_us: float
    per_step_us: list[float]
    executions: int
    kernels_us: float
    host_us: float


def check(ctx: AuditContext) -> list[Finding] | NotChecked:
    if not ctx.has_events:
        return NotChecked(RULE_ID, "needs a trace")
    ops = ctx.figure(LAUNCHING)
    cpu_ranks = set(ctx.placement.metadata.host_operator_devices) if ops == NO_LAUNCHES else None
    if cpu_ranks:
        return _tiny_operators(ctx, cpu_ranks)
    if isinstance(ops, str):
        return NotChecked(RULE_ID, ops)
    steps = ctx.placement.steps
    if not steps:
        return NotChecked(RULE_ID, "needs steps")
    worst = _worst(ops, steps)
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
        return NOT_INSIDE
    excess = np.maximum(np.maximum(table.dur[ops], 0.0) - kernel_time, 0.0)
    return _LaunchingOps(ops, kernel_time, excess)


def _by_name(inp: AuditInput) -> dict[str, NameExcess] | str:
    """Per operator name (in the order of the table's strings), its ``NameExcess``; or why there is none."""
    table = inp.events
    ops = _launching_ops(table)
    if isinstance(ops, str):
        return ops
    step = table.step[ops.rows]
    found = {}
    for name in np.unique(table.name[ops.rows]):
        mine = table.name[ops.rows] == name
        found[table.strings[int(name)]] = NameExcess(
            {int(s): float(ops.excess_us[mine & (step == s)].sum()) for s in np.unique(step[mine])},
            int(mine.sum()), float(ops.kernel_us[mine].sum()), float(np.maximum(table.dur[ops.rows[mine]], 0.0).sum()))
    return found


def _combined_by_name(parts: list) -> dict[str, NameExcess] | str:
    """Several ranks' ``_by_name``, as of their tables merged: each name's figures added, the names in the order
    the ranks first name them; where no rank has any, why."""
    found: dict[str, NameExcess] = {}
    for part in parts:
        for name, x in ({} if isinstance(part, str) else part).items():
            had = found.get(name)
            found[name] = x if had is None else NameExcess(
                {s: had.per_step_us.get(s, 0.0) + x.per_step_us.get(s, 0.0)
                 for s in {*had.per_step_us, *x.per_step_us}},
                had.executions + x.executions, had.kernels_us + x.kernels_us, had.host_us + x.host_us)
    if found or not parts:
        return found
    return NOT_INSIDE if any(p == NOT_INSIDE for p in parts) else NO_LAUNCHES


LAUNCHING = EventsFigure("launching-ops", _by_name, _combined_by_name)


def _worst(ops: dict[str, NameExcess], steps: list[int]) -> _Worst:
    """Per operator name, the summed excess of its executions in each step; the name with the largest median (the
    first of equals)."""
    best = None
    for name, x in ops.items():
        per = [x.per_step_us.get(s, 0.0) for s in steps]
        median = float(np.median(per))
        if best is None or median > best.median_us:
            best = _Worst(name, median, per, x.executions, x.kernels_us, x.host_us)
    return best


def _finding(ctx: AuditContext, worst: _Worst) -> Finding:
    """The finding for the worst operator: its saving is its median excess, capped by the GPUs' host wait."""
    host_wait = _host_wait_per_step(ctx)
    saving = min(worst.median_us, host_wait) if host_wait is not None else worst.median_us
    verdict = judge.judged(ctx, worst.per_step_us)
    op_name = worst.name
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


@dataclass(frozen=True)
class _TinyStep:
    """One rank's tiny operators in one step: their time (µs, gross of the profiler's cost), that time per
    operator name, the host operators the trace records inside it (their own and nested ones), and the time net
    of the profiler's cost of those (None where the rank's cost is unknown)."""

    total_us: float
    device: Device
    by_name: dict  # operator name -> µs
    recorded: int
    net_us: float | None


def _tiny_operators(ctx: AuditContext, ranks) -> list[Finding] | NotChecked:
    """The CPU-rank measure: time in tiny operators per step, the largest rank's, net of the profiler's cost
    (docs/commands/audit.md, PF006)."""
    steps = ctx.placement.steps
    if not steps:
        return NotChecked(RULE_ID, "needs steps")
    costs, described = _profiler_costs(ctx, {d.worker for d in ctx.placement.devices if d in ranks})
    per_step, executions = ctx.figure(TINY)
    found = {s: per_step[s] for s in steps if per_step.get(s)}
    gross = [max(t.total_us for t in found.get(s, ())) if found.get(s) else 0.0 for s in steps]
    net = [max(t.net_us for t in found.get(s, ())) if found.get(s) else 0.0 for s in steps] \
        if costs is not None else None
    values = net if net is not None else gross
    saving = float(np.median(values))
    if saving <= 0 or not found:
        return []
    busiest = max((t for v in found.values() for t in v), key=lambda t: t.total_us)
    verdict = judge.judged(ctx, values)
    return [_tiny_finding(ctx, busiest, saving, float(np.median(gross)), executions, verdict,
                          _profiler_evidence(found, steps, costs, described), len(values))]


def _profiler_costs(ctx: AuditContext, workers: set) -> tuple[dict | None, dict]:
    """The profiler's cost (``profiler_cost.RankProfilerCost``) by worker for ``workers`` (None where one's is
    unknown), and each one's figures or why unknown."""
    costs = ctx.profiler_cost
    found = {w: costs[w] for w in sorted(workers) if w in costs}
    described = {w: c.as_dict() for w, c in found.items()}
    for worker in sorted(workers - set(found)):
        described[worker] = {"worker": worker, "unknown": "the run directory's manifest does not record this rank"}
    if len(found) < len(workers) or any(c.per_op_us is None for c in found.values()):
        return None, described
    return found, described


def _net_of_profiler(total: float, recorded: int, cost, step: int) -> float:
    """``total`` µs of tiny operators in ``step``, holding ``recorded`` recorded operators, less the profiler's
    cost in it: the step's excess over the rank's median untraced step, in the tiny operators' share of the
    step's time, and no more than the recorded operators' cost (``recorded`` x the cost per operator).

    By the training thread's CPU time where the record has it: the share is the step's CPU time less the median
    untraced step's, over the step's, and an operator's cost is stretched by the step's wall time over its CPU
    time (the time other processes took of the core meanwhile). By wall time otherwise, which moves with the
    load: an untraced step twice as long as the traced ones leaves the profiler's cost in the figure."""
    thread_us = cost.traced_thread_cpu_us.get(step)
    step_us = cost.traced_step_us.get(step, cost.traced_median_us)
    if thread_us and cost.per_op_thread_cpu_us is not None:
        share = max(0.0, 1.0 - cost.untraced_thread_cpu_median_us / thread_us)
        per_op = cost.per_op_thread_cpu_us * max(1.0, step_us / thread_us)
        return total - min(recorded * per_op, total * share)
    share = max(0.0, 1.0 - cost.untraced_median_us / step_us) if step_us > 0 else 0.0
    return total - min(recorded * cost.per_op_us, total * share)


def _profiler_evidence(found: dict, steps: list[int], costs: dict | None, described: dict) -> dict:
    """The profiler's cost that the saving leaves out (per step, of the rank the net figure comes from; median
    over the steps), the operators recorded in the tiny time, each rank's cost per operator and figures."""
    if costs is None:
        return {"profiler_cost": "unknown: the figure includes the profiler's cost of recording each operator",
                "profiler_cost_per_rank": described}
    chosen = [max(found[s], key=lambda t: t.net_us) for s in steps if found.get(s)]
    removed = [t.total_us - t.net_us for t in chosen]
    by_thread = all(c.per_op_thread_cpu_us is not None for c in costs.values())
    return {"profiler_ms_in_tiny_per_step": round(float(np.median(removed)) / 1000, 3),
            "profiler_cost_by": "the training thread's CPU time" if by_thread else "wall time",
            "recorded_ops_in_tiny_per_step": int(np.median([t.recorded for t in chosen])),
            "profiler_us_per_op": {w: round(c.per_op_us, 3) for w, c in costs.items()},
            "profiler_cost_per_rank": described}


def _tiny_finding(ctx: AuditContext, busiest: _TinyStep, saving: float, gross: float, executions: dict, verdict,
                  profiler: dict, steps: int) -> Finding:
    op_name = max(busiest.by_name, key=busiest.by_name.get)
    device = busiest.device
    net = "profiler_ms_in_tiny_per_step" in profiler
    basis = ("less the profiler's cost in it: the step's excess over the rank's median untraced step (the "
             f"capture's clock, {profiler.get('profiler_cost_by')}), in the tiny operators' share of the step, at "
             "most the operators recorded in them times the profiler's cost per operator" if net else
             "the profiler's cost of recording each operator included (unknown here: profiler_cost_per_rank says "
             "why)")
    suffix = "" if net else ", the profiler's cost included"
    return Finding(
        rule=RULE_ID, severity=judge.severity(ctx, verdict, saving),
        title=(f"{device.worker}: {saving / 1000:.2f} ms/step in tiny operators (under {TINY_US:.0f} µs, "
               f"{MANY_PER_STEP}+ runs a step; most time: {op_name}){suffix}"),
        subject=Subject(rank=device.worker or None, device=device.label, op=op_name),
        evidence={"tiny_ms_per_step": round(gross / 1000, 3), **profiler,
                  "operators_ms_in_the_busiest_step": {n: round(t / 1000, 3) for n, t in
                                                       sorted(busiest.by_name.items(), key=lambda kv: -kv[1])[:8]},
                  "executions_per_step": {n: int(np.median(c)) for n, c in executions.items()},
                  "many_per_step": MANY_PER_STEP, "tiny_us": TINY_US, "steps": steps,
                  "significance": verdict.as_dict()},
        saving_us=saving,
        saving_basis=(f"{'estimate' if net else 'bound'}: per step, the largest rank's time in tiny operators "
                      f"(outermost executions, and the gaps between them under the tiny threshold), {basis}; "
                      "median over the steps; one batched operator instead saves at most the time itself"),
        confidence=verdict.confidence,
        fix="batch the work: one operator over a whole tensor instead of one per element or token (an "
            "embedding lookup, indexing with a tensor, vectorized arithmetic), no Python loops over tensors; "
            "torch.compile fuses what remains",
    )


def _tiny_per_step(inp: AuditInput) -> tuple[dict[int, list[_TinyStep]], dict[str, list[int]]]:
    """step -> each CPU rank's ``_TinyStep`` where it has tiny operators (net of its profiler's cost where that is
    known), and operator name -> its executions per step on each rank where it is tiny."""
    table = inp.events
    ranks = set(inp.metadata.host_operator_devices)
    costs = profiler_cost_of(inp.figure(HOST_OPS), inp.manifest)
    codes = [i for i, d in enumerate(table.devices) if d in ranks]
    ops = np.flatnonzero(np.isin(table.device, codes) & (table.kind == Kind.HOST_OP) & (table.step >= 0))
    per_step: dict[int, list[_TinyStep]] = {int(s): [] for s in table.steps()}
    executions: dict[str, list[int]] = {}
    for code in codes:
        for step in per_step:
            rows = ops[(table.device[ops] == code) & (table.step[ops] == step)]
            if not len(rows):
                continue
            names, inverse, counts = np.unique(table.name[rows], return_inverse=True, return_counts=True)
            by_name_durations = np.split(table.dur[rows][np.argsort(inverse, kind="stable")], np.cumsum(counts)[:-1])
            medians = np.array([np.median(d) for d in by_name_durations])
            tiny_names = names[(counts >= MANY_PER_STEP) & (medians < TINY_US)]
            if not len(tiny_names):
                continue
            total, by_name, spans = _outermost_time(table, rows[np.isin(table.name[rows], tiny_names)])
            recorded = _recorded_inside(table, rows, spans)
            cost = costs.get(table.devices[code].worker)
            net = None if cost is None or cost.per_op_us is None else _net_of_profiler(total, recorded, cost, step)
            named = {table.strings[n]: t for n, t in by_name.items()}
            per_step[step].append(_TinyStep(total, table.devices[code], named, recorded, net))
            for name in tiny_names:
                executions.setdefault(table.strings[int(name)], []).append(int(counts[names == name][0]))
    return per_step, executions


def _joined(parts: list[tuple[dict, dict]]) -> tuple[dict, dict]:
    """Several ranks' ``_tiny_per_step``, as of their tables merged: each step's and each name's lists joined in
    rank order."""
    per_step: dict[int, list] = {}
    executions: dict[str, list] = {}
    for steps, counts in parts:
        for s, found in steps.items():
            per_step.setdefault(s, []).extend(found)
        for name, found in counts.items():
            executions.setdefault(name, []).extend(found)
    return per_step, executions


TINY = EventsFigure("tiny-operators", _tiny_per_step, _joined)


def _outermost_time(table, rows: np.ndarray) -> tuple[float, dict, dict]:
    """The summed duration of the outermost of ``rows`` on each thread (lane), plus the gaps under ``TINY_US``
    between consecutive outermost ones; that duration per operator name (µs); and per lane the stretches
    counted, as ``(starts, ends)`` arrays in time order."""
    total, by_name, spans = 0.0, {}, {}
    for lane in np.unique(table.lane[rows]):
        mine = rows[table.lane[rows] == lane]
        mine = mine[np.lexsort((-table.dur[mine], table.ts[mine]))]
        last_end = -np.inf
        starts, ends = [], []
        for row in mine:
            start, end = float(table.ts[row]), float(table.ts[row] + max(table.dur[row], 0.0))
            if start < last_end:
                continue  # inside an outermost tiny execution
            if 0.0 < start - last_end < TINY_US:
                total += start - last_end
                ends[-1] = end  # the gap joins the stretch before
            else:
                starts.append(start)
                ends.append(end)
            total += end - start
            name = int(table.name[row])
            by_name[name] = by_name.get(name, 0.0) + end - start
            last_end = end
        spans[int(lane)] = (np.array(starts), np.array(ends))
    return total, by_name, spans


def _recorded_inside(table, rows: np.ndarray, spans: dict) -> int:
    """How many of ``rows`` (host operators) start inside the stretches ``spans`` of their lane."""
    count = 0
    for lane, (starts, ends) in spans.items():
        ts = table.ts[rows[table.lane[rows] == lane]]
        at = np.searchsorted(starts, ts, side="right") - 1
        which = np.maximum(at, 0)
        count += int(np.count_nonzero((at >= 0) & ((ts < ends[which]) | (ts == starts[which]))))
    return count
