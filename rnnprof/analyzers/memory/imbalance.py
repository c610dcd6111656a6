"""Devices whose memory peak stands above the other devices' of their kind, step by step, and what makes the
difference: operators by name (a replica's scope written alike), and what a device holds for other replicas."""

from __future__ import annotations

import numpy as np

from rnnprof.events import EventTable
from rnnprof.names import REPLICA_PART, TOWER_PATTERN

from .result import PER_STEP_WINDOWS, DeviceMemory, Imbalance, Share

IMBALANCE_SHARE = 0.05  # a peak this share above the others' median is an imbalance
# TensorFlow's executor runs independent ops in an order that varies from run to run, so which large tensors
# are alive together, and a step's peak, varies with it: between the two identical devices of an unplanted
# RNNLM run, up to 25 % in every step of a run (docs/commands/memory.md)
PER_STEP_SHARE = 0.35
MIN_STEPS = 3  # steps the devices must share for the step-by-step comparison
TOP_OPERATORS = 8


def imbalances(table: EventTable, devices: list[DeviceMemory]) -> list[Imbalance]:
    """For each device of a kind with two devices or more: its excess over the others' median peak. Where the
    devices share MIN_STEPS steps or more, it must exceed IMBALANCE_SHARE of the others' median peak in every
    one of them (the step-to-step jitter cannot make that), and the excess is the median over those steps;
    otherwise the whole peaks are compared."""
    kinds: dict[str, list[DeviceMemory]] = {}
    by_label = {d.label: d for d in table.devices}
    for d in devices:
        kind = by_label[d.device].kind
        kinds.setdefault("cpu" if kind == "host" else kind, []).append(d)
    found = []
    for group in kinds.values():
        for d in group if len(group) > 1 else ():
            others = [o for o in group if o is not d]
            median = int(np.median([o.peak.allocated for o in others]))
            share = PER_STEP_SHARE if d.growth.reason == PER_STEP_WINDOWS else IMBALANCE_SHARE
            threshold = int(share * median)
            excess, least = _excess(d, others)
            if excess > threshold and least > threshold:
                found.append(Imbalance(d.device, d.peak.allocated, median, excess, threshold,
                                       _difference(d, others), _foreign(d, by_label[d.device].index)))
    return sorted(found, key=lambda i: -i.excess)


def _excess(device: DeviceMemory, others: list[DeviceMemory]) -> tuple[int, int]:
    """The median over the shared steps of the device's step peak less the others' median, and the least of
    them; the whole peaks' difference (twice) where the devices share fewer than MIN_STEPS steps."""
    peaks = [dict(d.step_peaks) for d in (device, *others)]
    shared = sorted(set.intersection(*(set(p) for p in peaks)))
    if len(shared) < MIN_STEPS:
        whole = device.peak.allocated - int(np.median([o.peak.allocated for o in others]))
        return whole, whole
    per_step = np.array([peaks[0][s] - np.median([p[s] for p in peaks[1:]]) for s in shared], dtype=np.float64)
    return int(round(float(np.median(per_step)))), int(per_step.min())


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
