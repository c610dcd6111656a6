"""Devices whose memory peak stands above the other devices' of their kind, step by step, and what makes the
difference: operators by name (a replica's scope written alike), and what a device holds for other replicas."""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from rnnprof.events import Device
from rnnprof.events.names import REPLICA_PART, TOWER_PATTERN

from .result import ACTIVATION, PER_STEP_WINDOWS, DeviceMemory, Imbalance, PipelineMemory, Share, StagePeak

IMBALANCE_SHARE = 0.05  # a peak this share above the others' median is an imbalance
MIN_STEPS = 3  # steps the devices must share for the step-by-step comparison
TOP_OPERATORS = 8


def pipeline_memory(devices: list[DeviceMemory], schedule, roles: dict[str, int]) -> PipelineMemory | None:
    """The pipeline ranks' peaks (``roles``: worker -> place; ``schedule``: ``pipeline.PipelineSchedule``) and
    whether the schedule explains the highest: it is on a stage the schedule has hold more micro-batches than
    another; None with fewer than two stages with memory."""
    peaks = sorted((StagePeak(d.device, roles[d.worker], d.peak.allocated, _activation(d),
                              schedule.in_flight(roles[d.worker]))
                    for d in devices if d.worker in roles), key=lambda p: (p.position, p.device))
    if len({p.position for p in peaks}) < 2:
        return None
    top = max(peaks, key=lambda p: p.peak)
    counts = [p.in_flight for p in peaks]
    explained = None not in counts and top.in_flight == max(counts) and min(counts) < max(counts)
    return PipelineMemory(schedule.kind, schedule.ranks, schedule.micro_batches, tuple(peaks), bool(explained))


def _activation(device: DeviceMemory) -> int:
    return next((s.bytes for s in device.peak.by_category if s.name == ACTIVATION), 0)


def _job(worker: str) -> str:
    """The job of a TensorFlow cluster's task (``/job:ps`` of ``/job:ps/replica:0/task:1``), "" for other
    workers: a parameter server holds variables while workers compute, so they are no replicas of each other."""
    return worker.split("/replica:")[0].split("/task:")[0] if worker.startswith("/job:") else ""


def imbalances(known: Sequence[Device], devices: list[DeviceMemory],
               roles: dict[str, int] | None = None) -> list[Imbalance]:
    """For each device of a kind (and, in a TensorFlow cluster, of a job; in a pipeline, of a stage: ``roles``,
    worker -> its place in the pipeline) with two devices or more: its excess over the others' median peak, when
    it is
    more than IMBALANCE_SHARE of that median. Where the devices share MIN_STEPS steps or more, the excess is the
    median over those steps of the device's step peak less the others' median, and the device must stand above
    the others in every one of them from the step it starts at to the last (``_since``): one step whose tensors
    happened to be alive together neither makes an imbalance nor hides one. An imbalance may start mid-window (a
    buffer one rank takes at step k and keeps): then the steps from k on are judged, at least MIN_STEPS of them,
    and the device must have taken more than IMBALANCE_SHARE of the others' median at k (``Imbalance.taken``).
    Otherwise the whole peaks are compared. Where the records of a device of the kind miss frees
    (``DeviceMemory.missing_step_bytes``), the excess, and what was taken, must also exceed the most bytes they
    missed in a step: such a block stays in the series until its address is allocated again.

    Where each step's allocations are recorded apart (TensorFlow's step stats), the order the executor runs
    independent operators in changes from step to step and run to run, and with it which large tensors are alive
    together and each step's peak: in one unplanted run, one of two identical replicas stood 25 % to 52 % above
    the other in every step (docs/commands/memory.md). What the device allocates in a step does not depend on
    that order, only on what was placed there; there the device must also allocate more than IMBALANCE_SHARE
    above the others' median in its median step. ``known``: the devices of the input (``devices`` name them by
    label)."""
    kinds: dict[tuple[str, str, int], list[DeviceMemory]] = {}
    by_label = {d.label: d for d in known}
    for d in devices:
        device = by_label[d.device]
        role = (roles or {}).get(device.worker, -1)
        kinds.setdefault(("cpu" if device.kind == "host" else device.kind, _job(device.worker), role), []).append(d)
    found = []
    for group in kinds.values():
        for d in group if len(group) > 1 else ():
            others = [o for o in group if o is not d]
            median = int(np.median([o.peak.allocated for o in others]))
            threshold = int(IMBALANCE_SHARE * median)
            missed = max(x.missing_step_bytes for x in group)  # what a free the records miss can leave behind
            since = _since(d, others)
            allocated = _step_excess([dict(x.step_allocations) for x in (d, *others)], since.steps)
            placed = d.growth.reason != PER_STEP_WINDOWS or allocated.median > IMBALANCE_SHARE * allocated.theirs
            started = since.start is None or since.taken > max(threshold, missed)
            if since.excess > max(threshold, missed) and since.least > 0 and placed and started:
                found.append(Imbalance(d.device, d.peak.allocated, median, since.excess, threshold,
                                       _difference(d, others), _foreign(d, by_label[d.device].index),
                                       allocates_more=int(round(allocated.median)),
                                       from_step=-1 if since.start is None else since.start,
                                       taken=since.taken, last_step=since.last))
    return sorted(found, key=lambda i: -i.excess)


class _Since(NamedTuple):
    """Where a device stands above the others: from which step, by how much."""

    excess: int  # the median over the steps judged of the device's step peak less the others' median
    least: int  # the least of those differences
    start: int | None  # the step it starts at, where that is after the devices' first shared step
    taken: int  # the median difference from ``start`` on less the median before it (0 without ``start``)
    last: int  # the last shared step (-1: the whole peaks were compared)
    steps: tuple[int, ...] | None  # the steps judged (None: every shared step)


def _since(device: DeviceMemory, others: list[DeviceMemory]) -> _Since:
    """The device's excess over the others' median step peak over the steps from the first one from which it stands
    above them in every step to the last shared step; the whole peaks' difference where the devices share fewer
    than MIN_STEPS steps."""
    per_step = [dict(d.step_peaks) for d in (device, *others)]
    shared = _shared(per_step)
    if len(shared) < MIN_STEPS:
        whole = device.peak.allocated - int(np.median([o.peak.allocated for o in others]))
        return _Since(whole, whole, None, 0, -1, None)
    diff = _differences(per_step, shared)[0]
    below = np.flatnonzero(diff <= 0)
    first = int(below[-1]) + 1 if len(below) else 0
    if first == 0 or len(shared) - first < MIN_STEPS:  # above in every step, or not for long enough to judge
        return _Since(int(round(np.median(diff))), int(diff.min()), None, 0, shared[-1], None)
    after, before = diff[first:], diff[:first]
    return _Since(int(round(np.median(after))), int(after.min()), shared[first],
                  int(round(np.median(after) - np.median(before))), shared[-1], tuple(shared[first:]))


class _StepExcess(NamedTuple):
    """A device's figure by step against the other devices', over the steps they share (0 where none)."""

    median: float  # the median over those steps of the device's figure less the others' median
    theirs: float  # the median of the others' medians


def _shared(per_step: list[dict[int, int]]) -> list[int]:
    return sorted(set.intersection(*(set(p) for p in per_step)))


def _differences(per_step: list[dict[int, int]], steps: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The device's figure less the others' median in each of ``steps``, and that median."""
    theirs = np.array([np.median([p[s] for p in per_step[1:]]) for s in steps], dtype=np.float64)
    return np.array([per_step[0][s] for s in steps], dtype=np.float64) - theirs, theirs


def _step_excess(per_step: list[dict[int, int]], steps: tuple[int, ...] | None = None) -> _StepExcess:
    """``per_step``: the device's figure by step, then each other device's; ``steps``: only these of the shared
    steps."""
    shared = [s for s in _shared(per_step) if steps is None or s in steps]
    if not shared:
        return _StepExcess(0.0, 0.0)
    diff, theirs = _differences(per_step, shared)
    return _StepExcess(float(np.median(diff)), float(np.median(theirs)))


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
