"""PA006: too few inter-op threads for the number of devices, judged by whether the towers ran side by side.

With fewer inter-op threads than devices the towers take turns instead of running side by side. Per traced
step: each device's busy time, their union, and the share of it with two or more devices busy at once
(``side_by_side``); under ``TOOK_TURNS`` (5%) the towers took turns. The severity follows the setting
(below the devices, as many, or TF's default 0) and what the trace shows; with TF's default, only a gain above
the run's jitter makes a warning.

Cost per step (median over the traced steps): the union less what side by side could shrink it to
(``turns_cost_us``, a bound); on logical CPU devices with the manifest's step CPU times (``names.STEP_CPU``),
the geometric mean of that bound and ``cpu_bound`` (the step less its CPU time over the free cores, which errs
low as waiting threads spin). ``rnnprof scale --inter-op-threads N`` measures the gain;
``benchmarks/diagnosis.py`` the estimate's error. The rule as the user reads it: docs/commands/placement-audit.md.
"""

from __future__ import annotations

import numpy as np

from rnnprof.analyzers.intervals import concurrency
from rnnprof.analyzers.noise import significance, step_noise

from .busy import busy_intervals, compute_devices, compute_mask, in_step, length, step_keys
from .finding import NotChecked, PlacementFinding, Severity
from .inputs import AuditInput

RULE_ID = "PA006-inter-op-threads"
TITLE = "Too few inter-op threads"
TOOK_TURNS = 0.05  # side-by-side share of the devices' busy union under which the towers took turns
COST_BASIS = ("bound: the devices' busy union less the busiest device's busy time (or the summed busy time over "
              "the host's cores, when fewer), median per step: what running the towers side by side saves at "
              "most, when the host's cores are free for them")
CPU_BOUND_BASIS = ("estimate: the geometric mean of two figures per step: {towers:.2f} ms, the devices' busy union "
                   "less the busiest device's busy time (what side by side saves if no op slows down beside "
                   "another, the most it can save), and {cpu:.2f} ms, the step time less the process's CPU time "
                   "spread over the {free:.2f} cores other processes left free, median over the timed steps (what "
                   "it saves if it kept every free core busy with the step's present CPU work, which errs low: "
                   "part of that work is threads spinning while they wait)")


def cpu_bound(inp: AuditInput) -> dict | None:
    """What more threads gain if they keep every free core busy with today's CPU work (placement-audit.md): per timed
    step, ``wall - process CPU / free cores`` (median, µs), the free cores being the host's less what other
    processes used during the timed steps (at least 1; over all of them, as the host's busy time comes in ticks
    of 10 ms). None unless the devices are logical CPU devices and the manifest records the steps' CPU times."""
    cores = inp.shared_cores
    rows = inp.timed_step_cpu
    if cores is None or not rows:
        return None
    seconds = np.array([r[0] for r in rows])
    process = np.array([r[1] for r in rows])
    known = [(wall, own, host) for wall, own, host in rows if host is not None]
    others = max(sum(host - own for _, own, host in known), 0.0) / sum(w for w, _, _ in known) if known else 0.0
    free = min(max(cores - others, 1.0), float(cores))
    bound = np.maximum(seconds - process / free, 0.0)
    return {"bound_us": float(np.median(bound)) * 1e6, "process_cores": float(np.median(process / seconds)),
            "free_cores": free, "steps": len(rows)}


def device_count(inp: AuditInput) -> int | None:
    if isinstance(inp.config.get("devices"), int) and not isinstance(inp.config["devices"], bool):
        return inp.config["devices"]
    devices = inp.manifest.devices if inp.manifest is not None else ()
    return len([d for d in devices if d.kind != "host"]) if devices else None


def side_by_side(inp: AuditInput, cores: int | None) -> dict | None:
    """Per traced step, the devices' busy time, its union and the time two or more were busy at once (µs), as
    medians over the steps; None without a trace of two or more compute devices."""
    events = inp.events
    if events is None or not len(events):
        return None
    devices = compute_devices(events)
    if len(devices) < 2:
        return None
    mask = compute_mask(events)
    rows = []
    for step in step_keys(events):
        step_mask = mask & in_step(events, step)
        busy = [busy_intervals(events, d, step_mask) for d in devices]
        union, together = _union_and_together(busy)
        if union <= 0:
            continue
        per_device = [length(b) for b in busy]
        parallel = max(max(per_device), sum(per_device) / min(cores or len(devices), len(devices)))
        rows.append((union, together, max(union - parallel, 0.0), per_device))
    if not rows:
        return None
    union = float(np.median([r[0] for r in rows]))
    together = float(np.median([r[1] for r in rows]))
    return {"devices": [d.label for d in devices], "steps": len(rows), "union_us": union,
            "side_by_side_us": together, "share": float(np.median([r[1] / r[0] for r in rows])),
            "turns_cost_us": float(np.median([r[2] for r in rows])), "turns_cost_per_step_us": [r[2] for r in rows],
            "busy_us": {d.label: float(np.median([r[3][k] for r in rows])) for k, d in enumerate(devices)}}


def _union_and_together(busy: list[np.ndarray]) -> tuple[float, float]:
    """The length of the union of the devices' (disjoint, per device) intervals, and of the time two or more
    of them overlap."""
    starts = np.concatenate([b[:, 0] for b in busy if len(b)] or [np.zeros(0)])
    ends = np.concatenate([b[:, 1] for b in busy if len(b)] or [np.zeros(0)])
    if not len(starts):
        return 0.0, 0.0
    times, level = concurrency(starts, ends)  # how many devices are busy from times[i] to times[i + 1]
    width = np.diff(times)
    return float(width[level >= 1].sum()), float(width[level >= 2].sum())


def check(inp: AuditInput) -> list[PlacementFinding] | NotChecked:
    if inp.manifest is None:
        return NotChecked(RULE_ID, "needs a run manifest (session_config); graphs and traces do not record "
                                   "the thread pool sizes")
    threads = inp.session_config.get("inter_op_threads")
    if threads is None:
        threads = inp.config.get("inter_op_threads")
    devices = device_count(inp)
    if threads is None or devices is None:
        return NotChecked(RULE_ID, "the manifest records no inter_op_threads or device count")
    if devices < 2:
        return []
    cores = inp.manifest.host_cores
    measured = side_by_side(inp, cores)
    if threads == 0 and measured is None:
        return NotChecked(RULE_ID, "inter_op_threads is 0: TensorFlow sizes the pool itself (by the schedulable "
                                   "cores or TF_NUM_INTEROP_THREADS, not recorded); it needs a trace of two or "
                                   "more devices to see whether the towers ran side by side")
    took_turns = measured is not None and measured["share"] < TOOK_TURNS
    severity = _severity(threads, devices, measured, took_turns)
    if severity is None:
        return []
    cpu = cpu_bound(inp)
    cost = _cost(measured, cpu)
    if threads == 0 and severity == Severity.WARNING and not _gain_stands_out(inp, measured, cost[0]):
        severity = Severity.INFO  # TF sized the pool itself: only a gain above the run's jitter makes it a warning
    return [_finding(threads, devices, cores, measured, cpu, cost, took_turns, severity)]


def _gain_stands_out(inp: AuditInput, measured: dict, cost: float | None) -> bool:
    """Whether the estimated gain ``cost`` (``_cost``), step by step, exceeds the run's jitter
    (``noise.significance``): the towers may take turns on TF's own pool and lose nothing, as when each op
    already keeps every core busy."""
    bound = measured["turns_cost_us"]
    scale = cost / bound if cost and bound > 0 else 0.0
    per_step = [step * scale for step in measured["turns_cost_per_step_us"]]
    return significance(per_step, step_noise(inp.events).spread_us).significant


def _severity(threads: int, devices: int, measured: dict | None, took_turns: bool) -> Severity | None:
    """The severity the setting and the trace give (docs/commands/placement-audit.md); None: nothing to report."""
    if threads == 0:  # TF's own pool size: judged by the trace alone
        return Severity.WARNING if took_turns else None
    if threads < devices:
        return Severity.ERROR if took_turns else Severity.WARNING if measured is None else Severity.INFO
    if threads == devices:
        return Severity.WARNING if took_turns else Severity.INFO
    return None


def _finding(threads: int, devices: int, cores: int | None, measured: dict | None, cpu: dict | None,
             cost_and_basis: tuple[float | None, str], took_turns: bool, severity: Severity) -> PlacementFinding:
    if measured is None:
        seen = "no trace shows whether the towers took turns"
    else:
        seen = (f"the devices were busy side by side {measured['share']:.0%} of "
                f"{measured['union_us'] / 1000:.1f} ms/step")
    if threads == 0:
        title = f"inter-op threads (0, TF's default) with {devices} devices: {seen}"
    else:
        relation = "fewer than" if threads < devices else "as many as"
        title = f"inter-op threads ({threads}) {relation} the {devices} devices; {seen}"
    evidence = {"inter_op_threads": threads, "device_count": devices, "cores": cores, "took_turns": took_turns}
    if measured is not None:
        evidence.update({"side_by_side_share": round(measured["share"], 3),
                         "side_by_side_ms_per_step": round(measured["side_by_side_us"] / 1000, 3),
                         "busy_union_ms_per_step": round(measured["union_us"] / 1000, 3),
                         "busy_ms_per_step": {k: round(v / 1000, 3) for k, v in measured["busy_us"].items()},
                         "steps": measured["steps"]})
    cost, basis = cost_and_basis
    if cpu is not None:
        evidence.update({"process_cores_per_step": round(cpu["process_cores"], 2),
                         "free_cores_per_step": round(cpu["free_cores"], 2),
                         "cpu_bound_ms_per_step": round(cpu["bound_us"] / 1000, 3), "timed_steps": cpu["steps"]})
    return PlacementFinding(
        rule_id=RULE_ID,
        severity=severity,
        title=title,
        devices=tuple(measured["devices"]) if measured is not None else (),
        evidence=evidence,
        cost_us_per_step=cost,
        cost_basis=basis,
        fix=(f"Set inter_op_parallelism_threads (--inter-op-threads) to more than {devices}, e.g. "
             f"{max(devices + 1, 2 * devices)}, or leave it at 0 for TF's default, so each device's executor "
             f"has a thread while the others run; `rnnprof scale --inter-op-threads N` measures the gain."),
    )


def _cost(measured: dict | None, cpu: dict | None) -> tuple[float | None, str]:
    """The finding's cost per step (µs) and how it was estimated (docs/commands/placement-audit.md)."""
    if measured is None:
        return None, ("not estimable without a trace: towers take turns on the pool; compare with "
                      "`rnnprof scale --inter-op-threads N`")
    if cpu is None or cpu["bound_us"] >= measured["turns_cost_us"]:
        return measured["turns_cost_us"], COST_BASIS
    return float(np.sqrt(cpu["bound_us"] * measured["turns_cost_us"])), CPU_BOUND_BASIS.format(
        towers=measured["turns_cost_us"] / 1000, cpu=cpu["bound_us"] / 1000, free=cpu["free_cores"])
