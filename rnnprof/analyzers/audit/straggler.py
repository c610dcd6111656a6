"""PF001: a rank that arrives last at the collectives, beyond the run's jitter.

With collectives matched across ranks (``rnnprof.analyzers.collectives``), a rank's lateness in a step is the sum
over the step's collectives of its start minus the latest other member's start. The rank with the largest median
lateness is a straggler only when that median is significant (``noise.significance``, with the step time's spread
and ``CollectivesReport.lateness_floor``), or beyond the step's spread once and explained by time of its own steady
beyond the jitter (operators only it runs, or idle time the others do not have). Saving (a bound): the median of
its positive lateness. Cause: *waiting for a core* (by the run queue times a PyTorch capture records on Linux: the
training thread's, on CPU ranks gloo's threads' too; info), *compute*, *input* (``DataLoader``) or *host
gap/untraced time*, whichever explains at least half of it, in that order. Extra compute on ranks that share a
host's cores is *contention* (info) when the same operators running slower explain it (``device_work.work_split``).
Where no part alone explains half, but the wait for a core and the same operators running slower together do, the
machine is the cause (the larger of the two; info). A straggler beyond the lateness floor but within the jitter, of
a cause in the rank, is held back (``AuditContext.held_back``): the audit's replay brings it out where it hides
another finding (``replay.audit_savings``). See docs/commands/audit.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from rnnprof.events import names
from rnnprof.analyzers.device_work import WORK_SHARE, WorkSplit, unequal_work_by_step, work_split
from rnnprof.analyzers.noise import Significance
from rnnprof.analyzers.placement.imbalance import WORK
from rnnprof.analyzers.placement.inputs import AuditInput, EventsFigure, merged
from rnnprof.events import Device

from . import judge
from .context import AuditContext
from .finding import Finding, NotChecked, Severity, Subject

RULE_ID = "PF001"
TITLE = "Straggling rank at collectives"
ERROR_PCT = 20.0  # a saving above this share of the step is an error
INPUT_OP = re.compile(r"DataLoader|dataloader|_next_data|enumerate\(")
NO_CORE = "waiting for a core"
CONTENTION = "contention"
HOST_GAP = "host gap/untraced time"
MACHINE = (NO_CORE, CONTENTION)  # causes in the machine, not the rank's code: info


def check(ctx: AuditContext) -> list[Finding] | NotChecked:
    if not ctx.has_events:
        return NotChecked(RULE_ID, "needs a trace")
    report = ctx.comm.collectives if ctx.comm.devices else None
    if report is None or not report.collectives:
        return NotChecked(RULE_ID, "needs collectives matched across two or more ranks")
    jitter = ctx.noise.spread_us
    best = None
    for rank in report.ranks:
        late, verdict = report.lateness_verdict(rank.worker, jitter)
        if best is None or verdict.difference_us > best[1].difference_us:
            best = (rank, verdict, late)
    rank, verdict, late = best
    ctx.notes.append(f"{RULE_ID}: " + (f"{rank.worker} arrives last beyond the run's jitter ({verdict.describe()})"
                                       if verdict.significant else
                                       f"no straggler beyond the run's jitter ({verdict.describe()})"))
    if verdict.difference_us <= 0:
        return []
    if not verdict.significant:
        if verdict.difference_us >= report.lateness_floor(rank.worker, verdict.per == "step"):
            candidate = _finding(ctx, rank, verdict, late, held_back=True)
            steady = {"compute": _steady_own_work, HOST_GAP: _steady_gap}.get(candidate.evidence["cause"])
            steady = steady(ctx, rank.worker, verdict, late) if steady is not None else None
            if steady is not None:
                ctx.notes[-1] += (f"; but {rank.worker} is late beyond the step's spread once, {steady.said()}, "
                                  f"steady beyond the jitter ({steady.significance.describe()})")
                return [_finding(ctx, rank, verdict, late, steady=steady)]
            if candidate.evidence["cause"] not in MACHINE:  # the machine's, not a fix in the rank
                ctx.held_back.append(candidate)
        return []
    return [_finding(ctx, rank, verdict, late)]


@dataclass(frozen=True)
class Steady:
    """What makes a lateness within the jitter a finding: the rank's own per-step time that explains it,
    judged as a duration (``judge.judged_duration``); ``key`` names it in the evidence, ``says`` in the title
    (``{ms}``: its median per step)."""

    key: str
    says: str
    significance: Significance

    def said(self) -> str:
        return self.says.format(ms=f"{self.significance.difference_us / 1000:.1f}")


def _explains(verdict: Significance, own: Significance) -> bool:
    return own.significant and own.difference_us >= 0.5 * verdict.difference_us


def _steady_own_work(ctx: AuditContext, worker: str, verdict: Significance, late: dict[int, float]) -> Steady | None:
    """Where a rank's lateness is within the jitter but beyond the step's spread once, the operators it runs
    that the others do not (``device_work.unequal_work_by_step``), judged as a duration the trace times in every
    step (``judge.judged_duration``), when they explain half the lateness or more; None where they do not."""
    if verdict.per != "step" or verdict.difference_us <= ctx.noise.spread_us:
        return None
    pair = _pair(ctx, worker)
    if pair is None:
        return None
    tallies = ctx.figure(WORK)
    own = judge.judged_duration(ctx, unequal_work_by_step(*(tallies.get(d) for d in pair), ctx.placement.steps))
    return Steady("own_operators_significance", "running {ms} ms/step of operators the others do not", own) \
        if _explains(verdict, own) else None


def _steady_gap(ctx: AuditContext, worker: str, verdict: Significance, late: dict[int, float]) -> Steady | None:
    """Where a rank's lateness is within the jitter but beyond the step's spread once, and neither its compute
    nor its input explains it: its device's idle time in each step (no operator or collective running: a sleep,
    blocking I/O, Python work between operators) less the other ranks' median, judged as a duration the trace
    times between the rank's own events in every step, when it explains half the lateness or more; else None.
    One device per rank only (``_one_device_each``). An annotation runs no operator: another rank's wait for its
    batch in a ``DataLoader`` range is idle too, and lowers the excess."""
    devices = _one_device_each(ctx, worker)
    if verdict.per != "step" or verdict.difference_us <= ctx.noise.spread_us or devices is None:
        return None
    mine = devices[worker]
    per = []
    for step in sorted(s for s in late if s >= 0 and s in mine.steps):
        others = [d.steps[step].idle_us for w, d in devices.items() if w != worker and step in d.steps]
        if others:
            per.append(mine.steps[step].idle_us - float(np.median(others)))
    gap = judge.judged_duration(ctx, per)
    return Steady("idle_excess_significance", "idle {ms} ms/step longer than the others", gap) \
        if _explains(verdict, gap) else None


def _finding(ctx: AuditContext, rank, verdict, late: dict[int, float], held_back: bool = False,
             steady: Steady | None = None) -> Finding:
    """The finding on the straggler ``rank``; ``held_back``: its lateness is within the jitter (info, without the
    critical path's figures, which cost a critical path); ``steady``: within the jitter, but explained by time of
    the rank's own that is steady beyond it (``_steady_own_work``, ``_steady_gap``)."""
    saving = float(np.median([max(v, 0.0) for v in late.values()]))
    cause, cause_figures = _cause(ctx, rank.worker, late, on_path=not held_back)
    if steady is not None:
        cause_figures[steady.key] = steady.significance.as_dict()
    step_us = ctx.step_us
    severity = Severity.ERROR if step_us > 0 and 100 * saving / step_us >= ERROR_PCT else Severity.WARNING
    severity = Severity.INFO if cause in MACHINE or held_back else severity
    device = _device_of(ctx, rank.worker)
    return Finding(
        rule=RULE_ID, severity=severity,
        title=(f"{rank.worker} arrives last at collectives by {verdict.difference_us / 1000:.1f} ms per "
               f"{verdict.per} (cause: {cause})" + ("" if steady is None else ", " + steady.said())),
        subject=Subject(rank=rank.worker, device=device, op=None),
        evidence={"arrived_last": rank.arrived_last, "collectives": rank.collectives,
                  "caused_wait_ms": round(rank.caused_wait_us / 1000, 3),
                  "lateness_ms": {str(k): round(v / 1000, 3) for k, v in sorted(late.items())},
                  "cause": cause, **cause_figures, "significance": verdict.as_dict()},
        saving_us=saving,
        saving_basis=("bound: the other ranks' wait for it at collectives, median per step (a step cannot "
                      "shorten by more by removing its delay)"),
        confidence=verdict.confidence if steady is None else steady.significance.confidence,
        fix={"compute": "give it less work (batch/sequence lengths per rank) or find what it runs that the others "
                        "do not (count-ops per rank)",
             "input": "prefetch its input (DataLoader num_workers, pin_memory) so it does not wait for data",
             NO_CORE: "its thread was ready but other threads held the cores: other processes on the machine, or "
                      "more ranks x threads than cores (torch.set_num_threads, OMP_NUM_THREADS); measure on an "
                      "otherwise idle machine",
             CONTENTION: "nothing in the rank to move: it runs the others' operators, slower, on cores the ranks "
                         "share; give each rank cores of its own (fewer threads per rank, OMP_NUM_THREADS) or "
                         "measure on an otherwise idle machine",
             }.get(cause, "find what its thread does outside the traced operators before the collective "
                          "(sleeps, logging, blocking I/O, Python work): critical-path names it as untraced time"
                          + _unrecorded_wait(ctx, cause_figures)),
    )


def _unrecorded_wait(ctx: AuditContext, figures: dict) -> str:
    """What a host gap's fix adds where the ranks share one machine's cores and the run records no wait for a core
    (rank files alone): untraced time may be the thread waiting for a core; else nothing."""
    if "extra_runqueue_ms_per_step" in figures or not ctx.placement.ranks_share_cores:
        return ""
    host = ctx.placement.ranks_host
    return ("; its ranks share one machine's cores" + (f" ({host})" if host else "") + " and these traces do not "
            "record how long its thread waited for a core, untraced time too (`rnnprof trace` records it on Linux)")


def _device_of(ctx: AuditContext, worker: str) -> str | None:
    mine = [d.device for d in ctx.comm.devices if d.device.worker == worker]
    return mine[0].label if mine else None


def _cause(ctx: AuditContext, worker: str, late: dict[int, float], on_path: bool = True) -> tuple[str, dict]:
    """Which of its work explains the lateness, with the per-step figures behind it (``on_path``: with its time
    on the critical path)."""
    steps = [s for s in late if s >= 0]
    lateness = float(np.median([late[s] for s in steps])) if steps else 0.0
    extra = []
    for s in steps:
        mine = sum(d.steps[s].compute_us for d in ctx.comm.devices if d.device.worker == worker and s in d.steps)
        others = {}
        for d in ctx.comm.devices:
            if d.device.worker != worker and s in d.steps:
                others[d.device.worker] = others.get(d.device.worker, 0.0) + d.steps[s].compute_us
        if others:
            extra.append(mine - float(np.median(list(others.values()))))
    extra_compute = float(np.median(extra)) if extra else 0.0
    input_us = _input_us(ctx, worker, steps)
    waited = _runqueue_excess_us(ctx, worker, steps)
    figures = {"extra_compute_ms_per_step": round(extra_compute / 1000, 3),
               "input_ms_per_step": round(input_us / 1000, 3)}
    if on_path:
        figures["critical_path_ms_per_step"] = {k: round(v / 1000, 3) for k, v in _on_path(ctx, worker).items()}
    if waited is not None:
        figures["extra_runqueue_ms_per_step"] = round(waited / 1000, 3)
    if lateness > 0 and waited is not None and waited >= 0.5 * lateness:
        return NO_CORE, figures
    if lateness > 0 and extra_compute >= 0.5 * lateness:
        split = _shared_cores_split(ctx, worker)
        if split is not None:
            figures.update(_shared_cores_figures(ctx, split))
        return (CONTENTION if split is not None and split.is_contention(lateness) else "compute"), figures
    if lateness > 0 and input_us >= 0.5 * lateness:
        return "input", figures
    machine = _machine_cause(ctx, worker, lateness, waited)
    if machine is not None:
        cause, split = machine
        figures.update(_shared_cores_figures(ctx, split))
        return cause, figures
    return HOST_GAP, figures


def _shared_cores_figures(ctx: AuditContext, split: WorkSplit) -> dict:
    """The evidence of a rank's operators against the other rank's on the cores they share: the split, and the
    cores or the machine that says they share them."""
    host = ctx.placement.ranks_host
    return {"op_us_per_step": split.as_dict(), "shared_cores": ctx.placement.ranks_sharing_cores,
            **({"shared_host": host} if host else {})}


def _machine_cause(ctx: AuditContext, worker: str, lateness: float, waited: float | None) \
        -> tuple[str, WorkSplit] | None:
    """Where no part alone explains half the lateness but the machine's two together do: the rank's extra wait
    for a core and its operators running slower than the same operators of the other rank on the cores they share
    (``WorkSplit.slower``, counted where unequal work is under ``WORK_SHARE`` of the op-time difference). The
    cause is the larger of the two, with the split; None where the run records no wait for a core, the ranks do
    not share cores, or the two explain less than half."""
    if lateness <= 0 or waited is None:
        return None
    split = _shared_cores_split(ctx, worker)  # the ops of both ranks compared: only where a wait was recorded
    if split is None:
        return None
    slower = max(split.slower, 0.0) if split.share < WORK_SHARE else 0.0
    if max(waited, 0.0) + slower < 0.5 * lateness:
        return None
    return (NO_CORE if waited >= slower else CONTENTION), split


def _shared_cores_split(ctx: AuditContext, worker: str) -> WorkSplit | None:
    """``work_split`` of the rank's device against the other rank's where the ranks share a host's cores, one
    device each (contention when the same operators running slower explain the lateness:
    ``WorkSplit.is_contention``); else None. With more than two ranks, against the one whose compute is the
    others' median."""
    if not ctx.placement.ranks_share_cores:
        return None
    pair = _pair(ctx, worker)
    if pair is None:
        return None
    tallies = ctx.figure(WORK)
    return work_split(*(tallies.get(d) for d in pair), len(ctx.placement.steps))


def _one_device_each(ctx: AuditContext, worker: str) -> dict | None:
    """Each rank's one device's figures (``comm``'s), by rank; None unless every rank has one device and
    ``worker`` is one of two or more ranks."""
    devices: dict[str, list] = {}
    for d in ctx.comm.devices:
        devices.setdefault(d.device.worker, []).append(d)
    if worker not in devices or len(devices) < 2 or any(len(v) != 1 for v in devices.values()):
        return None
    return {w: v[0] for w, v in devices.items()}


def _pair(ctx: AuditContext, worker: str) -> tuple[Device, Device] | None:
    """The rank's device and, with more than two ranks, that of the one whose compute is the others' median;
    None unless every rank has one device (``_one_device_each``)."""
    devices = _one_device_each(ctx, worker)
    if devices is None:
        return None
    others = sorted((sum(s.compute_us for s in d.steps.values()), w) for w, d in devices.items() if w != worker)
    return devices[worker].device, devices[others[(len(others) - 1) // 2][1]].device


def _runqueue_excess_us(ctx: AuditContext, worker: str, steps: list[int]) -> float | None:
    """Median over ``steps`` of the time the rank waited for a core less the other ranks' median (µs): its
    training thread's and, on CPU ranks (a rank arrives at a collective when its gloo thread starts it), its gloo
    threads' where the run records them for every rank and as many steps; None unless the run directory records
    the training thread's for the rank and another."""
    manifest = ctx.placement.manifest
    waits = manifest.rank_seconds(names.RANK_STEP_RUNQUEUE_SECONDS) if manifest is not None else {}
    if worker not in waits or len(waits) < 2:
        return None
    comm = manifest.rank_seconds(names.RANK_STEP_COMM_RUNQUEUE_SECONDS)
    if all(w in comm and len(comm[w]) == len(v) for w, v in waits.items()) and \
            not any(d.device.kind == "gpu" for d in ctx.comm.devices):
        waits = {w: [a + b for a, b in zip(v, comm[w])] for w, v in waits.items()}
    per = [waits[worker][s] - float(np.median([v[s] for w, v in waits.items() if w != worker]))
           for s in steps if all(0 <= s < len(v) for v in waits.values())]
    return float(np.median(per)) * 1e6 if per else None


def _input_us(ctx: AuditContext, worker: str, steps: list[int]) -> float:
    """Median per step of the time of the rank's data-loading operators (``INPUT_OPS``)."""
    if not steps:
        return 0.0
    found = ctx.figure(INPUT_OPS)
    return float(np.median([found.get((worker, s), 0.0) for s in steps]))


def _input_ops(inp: AuditInput) -> dict[tuple[str, int], float]:
    """(worker, step) -> the time of the worker's data-loading operators (``INPUT_OP``) in the step, where it ran
    any."""
    table = inp.events
    codes = [i for i, s in enumerate(table.strings) if INPUT_OP.search(s)]
    if not codes:
        return {}
    named = np.isin(table.name, codes)
    found = {}
    for worker in dict.fromkeys(d.worker for d in table.devices):
        rows = named & np.array([d.worker == worker for d in table.devices])[table.device]
        for s in np.unique(table.step[rows]).tolist():
            found[(worker, int(s))] = float(table.dur[rows & (table.step == s)].sum())
    return found


INPUT_OPS = EventsFigure("input-ops", _input_ops, merged)


def _on_path(ctx: AuditContext, worker: str) -> dict[str, float]:
    """Median per step of the rank's time on the critical path, by class (untraced, compute, ...)."""
    steps = ctx.critical_path.steps
    classes = sorted({link.event_class for s in steps for link in s.links})
    out = {}
    for cls in classes:
        per = [sum(link.dur_us for link in s.links if link.event_class == cls and link.device.startswith(worker + "/"))
               for s in steps]
        if any(per):
            out[cls] = float(np.median(per))
    return out
