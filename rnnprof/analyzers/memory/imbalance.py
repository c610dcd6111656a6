"""Devices whose memory peak stands above the other devices' of their kind, step by step, and what makes the
difference: operators by name (a replica's scope written alike), and what a device holds for other replicas."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from rnnprof.events import EventTable
from rnnprof.events.names import REPLICA_PART, TOWER_PATTERN

from .result import PER_STEP_WINDOWS, DeviceMemory, Imbalance, Share

IMBALANCE_SHARE = 0.05  # a peak this share above the others' median is an imbalance
MIN_STEPS = 3  # steps the devices must share for the step-by-step comparison
TOP_OPERATORS = 8


def _job(worker: str) -> str:
    """The job of a TensorFlow cluster's task (``/job:ps`` of ``/job:ps/replica:0/task:1``), "" for other
    workers: a parameter server holds variables while workers compute, so they are no replicas of each other."""
    return worker.split("/replica:")[0].split("/task:")[0] if worker.startswith("/job:") else ""


def imbalances(table: EventTable, devices: list[DeviceMemory]) -> list[Imbalance]:
    """For each device of a kind (and, in a TensorFlow cluster, of a job) with two devices or more: its excess
    over the others' median peak, when it is
    more than IMBALANCE_SHARE of that median. Where the devices share MIN_STEPS steps or more, the excess is the
    median over those steps of the device's step peak less the others' median, and the device must stand above
    the others in every one of them: one step whose tensors happened to be alive together neither makes an
    imbalance nor hides one. Otherwise the whole peaks are compared.

    Where each step's allocations are recorded apart (TensorFlow's step stats), the order the executor runs
    independent operators in changes from step to step and run to run, and with it which large tensors are alive
    together and each step's peak: in one unplanted run, one of two identical replicas stood 25 % to 52 % above
    the other in every step (docs/commands/memory.md). What the device allocates in a step does not depend on
    that order, only on what was placed there; there the device must also allocate more than IMBALANCE_SHARE
    above the others' median in its median step."""
    kinds: dict[tuple[str, str], list[DeviceMemory]] = {}
    by_label = {d.label: d for d in table.devices}
    for d in devices:
        device = by_label[d.device]
        kinds.setdefault(("cpu" if device.kind == "host" else device.kind, _job(device.worker)), []).append(d)
    found = []
    for group in kinds.values():
        for d in group if len(group) > 1 else ():
            others = [o for o in group if o is not d]
            median = int(np.median([o.peak.allocated for o in others]))
            threshold = int(IMBALANCE_SHARE * median)
            excess, least = _excess(d, others)
            allocated = _step_excess([dict(x.step_allocations) for x in (d, *others)])
            placed = d.growth.reason != PER_STEP_WINDOWS or allocated.median > IMBALANCE_SHARE * allocated.theirs
            if excess > threshold and least > 0 and placed:
                found.append(Imbalance(d.device, d.peak.allocated, median, excess, threshold,
                                       _difference(d, others), _foreign(d, by_label[d.device].index),
                                       allocates_more=int(round(allocated.median))))
    return sorted(found, key=lambda i: -i.excess)


def _excess(device: DeviceMemory, others: list[DeviceMemory]) -> tuple[int, int]:
    """The median over the shared steps of the device's step peak less the others' median, and the least of
    them; the whole peaks' difference (twice) where the devices share fewer than MIN_STEPS steps."""
    peaks = _step_excess([dict(d.step_peaks) for d in (device, *others)])
    if peaks.steps < MIN_STEPS:
        whole = device.peak.allocated - int(np.median([o.peak.allocated for o in others]))
        return whole, whole
    return int(round(peaks.median)), int(peaks.least)


class _StepExcess(NamedTuple):
    """A device's figure by step against the other devices', over the steps they share."""

    median: float  # the median over those steps of the device's figure less the others' median
    least: float  # the least of those differences
    theirs: float  # the median of the others' medians
    steps: int  # how many steps they share (0: the figures are 0)


def _step_excess(per_step: list[dict[int, int]]) -> _StepExcess:
    """``per_step``: the device's figure by step, then each other device's."""
    shared = sorted(set.intersection(*(set(p) for p in per_step)))
    if not shared:
        return _StepExcess(0.0, 0.0, 0.0, 0)
    theirs = np.array([np.median([p[s] for p in per_step[1:]]) for s in shared], dtype=np.float64)
    diff = np.array([per_step[0][s] for s in shared], dtype=np.float64) - theirs
    return _StepExcess(float(np.median(diff)), float(diff.min()), float(np.median(theirs)), len(shared))


def _replicas_alike(shares: tuple[Share, ...]) -> dict[str, int]:
    """Live bytes by operator, a replica's scope (``tower_k``, ``replica_k``) written ``tower_*`` so that the same
    operator of every replica is one name."""
    found: dict[str, int] = {}
    for s in shares:
        name = REPLICA_PART.sub("tower_*", s.name)
        found[name] = found.get(name, 0) + s.bytes
    return found


def _foreign(device: DeviceMemory, index: int) -> tuple[Share, ...]:
    """What ``device`` held at its peak for another replica: operators in a tower scope other than its own index
    (soft placement pinning a replica's work to device 0)."""
    found = []
    for s in device.peak.by_operator:
        towers = TOWER_PATTERN.findall(s.name)
        if towers and int(towers[-1]) != index:
            found.append(s)
    return tuple(found)


def _difference(device: DeviceMemory, others: list[DeviceMemory]) -> tuple[Share, ...]:
    """The operators whose live bytes at ``device``'s peak exceed the others' median most (a replica's operators
    compared with the same operator of the others' replicas)."""
    mine = _replicas_alike(device.peak.by_operator)
    theirs = [_replicas_alike(o.peak.by_operator) for o in others]
    extra = {name: b - int(np.median([t.get(name, 0) for t in theirs])) for name, b in mine.items()}
    ranked = sorted(((n, e) for n, e in extra.items() if e > 0), key=lambda kv: (-kv[1], kv[0]))
    return tuple(Share(n, e) for n, e in ranked[:TOP_OPERATORS])
