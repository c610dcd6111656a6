"""PA004: devices doing unequal amounts of work in the same step.

Work is the union of a device's compute intervals in the step (kernels on accelerators, ops elsewhere;
receives and collectives left out, since they include waiting; comm's compute, not its busy time); a GPU-less
PyTorch rank's is its step window less its communication, untraced host time counting (``work_measure``). Spread is
(max - min) / max over the towers' devices. The heaviest minus the lightest device per step must be
significant against the run's jitter (``noise.significance``; between ranks at least
``noise.CROSS_RANK_FLOOR_US``; between CPU (gloo) ranks PF001's floor on lateness,
``collectives.CollectivesReport.lateness_floor``, as their work is their window less communication);
otherwise, or over fewer than ``noise.MIN_STEPS`` steps, it is info.
The two devices' op time is split into unequal work (ops one runs more often, names with digits folded) and the
same ops taking longer (``device_work.work_split``); where the devices share the host's cores (logical CPU
devices, CPU ranks of one torchrun, or CPU ranks whose traces name one machine: ``AuditInput.ranks_host``), an
imbalance mostly of the same ops running slower is contention, and info.
See docs/commands/placement-audit.md.
"""

from __future__ import annotations

import numpy as np

from rnnprof.events import names
from rnnprof.analyzers.device_work import device_tallies, work_split
from rnnprof.analyzers.noise import CROSS_RANK_FLOOR_US, Significance, significance
from rnnprof.events import Device

from . import frameworks
from .finding import NotChecked, PlacementFinding, Severity
from .inputs import AuditInput, EventsFigure, merged
from .busy import ALL_STEPS, compute_devices_among, compute_mask, length, step_keys, union_array, with_compute

RULE_ID = "PA004-device-imbalance"
TITLE = "Per-device imbalance"
WARNING_SPREAD = 0.20
CPU_RANK_MEASURE = ("on ranks without a GPU, work is the rank's step window minus its communication "
                    "(rnnprof comm's per-step figures): host operators and untraced host time count, waiting "
                    "in collectives does not; not kernel time as on a GPU")
RUNQUEUE_MEASURE = ("; nor the time its training thread waited for a core while ready to run (the run queue's, "
                    "which the capture recorded per step): other processes' load, not the rank's work")


def check(inp: AuditInput, threshold: float = WARNING_SPREAD) -> list[PlacementFinding] | NotChecked:
    if not inp.has_events:
        return NotChecked(RULE_ID, "needs a trace with per-device op or kernel times")
    devices = _compared_devices(inp)
    if len(devices) < 2:
        kinds = ", ".join(d.label for d in devices) or "none"
        return NotChecked(RULE_ID, f"the trace has one compute device ({kinds}); balance needs at least 2")
    cpu_ranks = set(inp.metadata.host_operator_devices) & set(devices)
    waits = _runqueue_waits(inp, cpu_ranks)
    work = _work_per_step(inp, devices, cpu_ranks, waits or {})
    spread = _spread(work)
    if not (spread > threshold).any():
        return []
    measure = (CPU_RANK_MEASURE + (RUNQUEUE_MEASURE if waits else "")) if cpu_ranks else None
    return [_finding(inp, devices, work, spread, threshold, measure)]


def _runqueue_waits(inp: AuditInput, cpu_ranks: set[Device]) -> dict[Device, list[float]] | None:
    """Each CPU rank's per-step run-queue wait (seconds) where the manifest records one for every CPU rank."""
    recorded = inp.manifest.rank_seconds(names.RANK_STEP_RUNQUEUE_SECONDS) if inp.manifest is not None else {}
    if not cpu_ranks or not all(d.worker in recorded for d in cpu_ranks):
        return None
    return {d: recorded[d.worker] for d in cpu_ranks}


def _compared_devices(inp: AuditInput) -> list[Device]:
    """The towers' home devices in the trace when the graph has two or more towers, else the trace's compute
    devices."""
    homes = sorted(set(inp.tower_homes.values()))
    return [d for d in homes if d in inp.devices] if len(homes) >= 2 else compute_devices_among(inp.figure(PRESENT))


def _measured(inp: AuditInput) -> list[Device]:
    """The devices whose work PA004 may compare: the compute devices and the towers' homes."""
    return sorted({*compute_devices_among(with_compute(inp.events)), *inp.tower_homes.values()})


def _busy(inp: AuditInput) -> dict[tuple[Device, int], float]:
    """(device, step) -> the union of the device's compute intervals in the step (every event for ``ALL_STEPS``,
    where the trace numbers no steps), for the devices ``_measured``."""
    events = inp.events
    rows = np.flatnonzero(compute_mask(events))
    keys = step_keys(events)
    step = events.step[rows] if keys != [ALL_STEPS] else np.full(len(rows), ALL_STEPS, dtype=np.int64)
    found = {}
    for device in _measured(inp):
        mine = events.device[rows] == events.devices.index(device)
        for s in keys:
            sel = rows[mine & (step == s)]
            found[(device, s)] = length(union_array(events.ts[sel], events.end[sel]))
    return found


PRESENT = EventsFigure("compute-devices", lambda inp: with_compute(inp.events),
                 lambda parts: tuple(dict.fromkeys(d for part in parts for d in part)))
BUSY = EventsFigure("busy", _busy, merged)
# the work tallies (``device_work.device_tallies``) of the devices ``_measured``; PF001 reads them too
WORK = EventsFigure("work", lambda inp: device_tallies(inp.events, compute_mask(inp.events), _measured(inp)), merged)


def _work_per_step(inp: AuditInput, devices: list[Device], cpu_ranks: set[Device],
                   waits: dict[Device, list[float]]) -> np.ndarray:
    """Work µs, steps x devices: the union of a device's compute intervals in the step, or for a CPU rank its
    step window less its communication (``_rank_compute``; ``inp.comm``: ``analyze_comm`` of the events) and less
    its training thread's wait for a core in the step where ``waits`` has it (seconds per step)."""
    by_rank = {d.device: d for d in inp.comm.devices} if cpu_ranks else {}
    busy = inp.figure(BUSY)
    return np.asarray([[max(_rank_compute(by_rank.get(d), step) - _waited_us(waits.get(d), step), 0.0)
                        if d in cpu_ranks else busy.get((d, step), 0.0) for d in devices]
                       for step in (inp.steps or [ALL_STEPS])])


def _waited_us(waits: list[float] | None, step) -> float:
    """The run-queue wait of ``step`` (µs; the steps' sum for ``ALL_STEPS``), 0 where not recorded."""
    if waits is None:
        return 0.0
    if step == ALL_STEPS:
        return sum(waits) * 1e6
    return waits[step] * 1e6 if isinstance(step, int) and 0 <= step < len(waits) else 0.0


def _spread(work: np.ndarray) -> np.ndarray:
    """Per step, (max - min) / max of the devices' work (0 where none works)."""
    top = work.max(axis=1)
    return np.where(top > 0, (top - work.min(axis=1)) / np.where(top > 0, top, 1), 0.0)


def _finding(inp: AuditInput, devices: list[Device], work: np.ndarray, spread: np.ndarray, threshold: float,
             measure: str | None) -> PlacementFinding:
    """The imbalance of the steps whose spread is above ``threshold``, the heaviest device against the lightest
    (by mean work); ``measure``: how CPU ranks' work was measured, where some devices are CPU ranks."""
    over = spread > threshold
    mean = work.mean(axis=0)
    heaviest, lightest = int(mean.argmax()), int(mean.argmin())
    verdict = _significance(inp, work, devices, heaviest, lightest)
    lost = float((work.max(axis=1) - work.mean(axis=1))[over].sum() / len(work))
    tallies = inp.figure(WORK)
    split = work_split(tallies.get(devices[heaviest]), tallies.get(devices[lightest]), len(inp.steps))
    cores = inp.shared_cores or inp.ranks_sharing_cores
    host = None if inp.shared_cores else inp.ranks_host
    # logical devices' work is their ops' (no untraced time): what unequal work leaves is contention
    contention = (bool(inp.shared_cores) or inp.ranks_share_cores) and \
        split.is_contention(None if inp.shared_cores else float(mean.max() - mean.min()))
    return PlacementFinding(
        rule_id=RULE_ID,
        severity=Severity.WARNING if verdict.significant and not contention else Severity.INFO,
        title=(f"{devices[heaviest].label} {_works(measure)} {mean.max() / max(mean.min(), 1e-9):.1f}x as long as "
               f"{devices[lightest].label}{_outside(measure)} per step; spread above {threshold:.0%} in {int(over.sum())} of "
               f"{len(work)} steps (median {float(np.median(spread)):.0%}, max {float(spread.max()):.0%})"
               + (_contention_title(split, cores, bool(inp.shared_cores), host) if contention else "")),
        devices=tuple(d.label for d in devices),
        evidence={
            "threshold": threshold,
            "steps_traced": len(work),
            "steps_over_threshold": int(over.sum()),
            "median_spread": round(float(np.median(spread)), 3),
            "max_spread": round(float(spread.max()), 3),
            "work_us_per_step": {d.label: round(float(m), 1) for d, m in zip(devices, mean)},
            "significance": verdict.as_dict(),
            "confidence": round(verdict.confidence, 3),
            "op_us_per_step": split.as_dict(),
            **({"contention": True, "shared_cores": cores, **({"shared_host": host} if host else {})}
               if contention else {}),
            **({"work_measure": measure} if measure else {}),
        },
        cost_us_per_step=lost,
        cost_basis="the most working device's work minus the devices' mean, per step, in unbalanced steps"
                   + (f"; {measure}" if measure else ""),
        fix=_contention_fix(devices[heaviest], devices[lightest]) if contention else _fix(inp, devices[heaviest]),
    )


def _works(measure: str | None) -> str:
    """The title's verb: CPU ranks' work is their time outside communication, other devices' their compute."""
    return "spends" if measure else "computes"


def _outside(measure: str | None) -> str:
    return " outside communication" if measure else ""


def _contention_title(split, cores: int | None, logical: bool, host: str | None = None) -> str:
    """``host``: the machine the ranks' traces name, where no run directory said how many cores it has."""
    who = "logical CPU devices share the host's {} cores and one thread pool" if logical else \
        "the ranks share the host's {} cores" if cores else f"the ranks share the cores of one machine ({host})"
    return (f": the same ops take longer there ({split.slower / 1000:.2f} of "
            f"{(split.slower + split.unequal_work) / 1000:.2f} ms of op time per step); {who.format(cores)}, so "
            f"this is contention, not unequal work")


def _contention_fix(heaviest: Device, lightest: Device) -> str:
    return (f"Nothing to move: {heaviest.label} runs about the ops {lightest.label} runs, more slowly. They take "
            f"turns on the same cores: give the ranks x threads no more than the cores, or measure on an otherwise "
            f"idle machine; the balance of the work is not the cause.")


def _significance(inp: AuditInput, work: np.ndarray, devices: list[Device], heaviest: int,
                  lightest: int) -> Significance:
    """The heaviest device's work less the lightest's, per step, against the run's jitter: between PyTorch
    ranks at least ``CROSS_RANK_FLOOR_US``, between two CPU ranks at least the lateness floor of the heaviest
    one's collectives (``CPU_RANK_FLOOR_US`` per gloo collective a step): the same wait for a core that makes a
    balanced gloo rank arrive late at its collective moves its window less its communication as much."""
    heavy, light = devices[heaviest], devices[lightest]
    across_ranks = heavy.worker != light.worker and heavy.worker.startswith("rank")
    floor = CROSS_RANK_FLOOR_US if across_ranks else 0.0
    cpu_ranks = set(inp.metadata.host_operator_devices)
    if across_ranks and heavy in cpu_ranks and light in cpu_ranks and inp.comm.collectives is not None:
        floor = max(floor, inp.comm.collectives.lateness_floor(heavy.worker))
    return significance((work[:, heaviest] - work[:, lightest]).tolist(),
                        inp.step_noise.spread_us if len(work) > 1 else 0.0, floor_us=floor)


def _fix(inp: AuditInput, heaviest: Device) -> str:
    """What to do, in the terms of the framework the input was recorded from."""
    if frameworks.framework(inp) == frameworks.PYTORCH:
        return (f"Find what {heaviest.label} runs that the other ranks do not (rnnprof count-ops by type per rank), "
                f"then balance the work per rank: the batch and sequence lengths each rank gets, and, for ranks "
                f"sharing a machine's cores, their threads (torch.set_num_threads).")
    return (f"Find what {heaviest.label} runs that the others do not: PA002 and PA003 name replica work and "
            f"updates pinned to one device; otherwise balance the batch per device.")


def _rank_compute(device_comm, step: int) -> float:
    """A CPU rank's work µs in ``step`` (its window minus its communication; the whole trace for ``ALL_STEPS``),
    0 where it did nothing."""
    if device_comm is None:
        return 0.0
    breakdown = device_comm.total if step == ALL_STEPS else device_comm.steps.get(step)
    return max(breakdown.span_us - breakdown.communication_us, 0.0) if breakdown is not None else 0.0
