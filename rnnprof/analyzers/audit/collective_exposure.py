"""What the rules about a sharded or sliced job's collectives share: each collective record's time and the part
of it nothing hid (docs/commands/audit.md).

Per collective record (``events.collectives``) of a rank: its operation, phase, process group and step; its time;
the part of it during which the rank computed (``comm.compute_intervals``, the compute ``comm`` measures); its
wait for the group's last member to arrive (at the collectives matched across ranks, ``collectives``; a straggler
is PF001's), and on a CPU rank its part after the first member finished (its worker thread waiting for a core: the
data was exchanged, as PF002 counts it). Exposed: the time less those three, never below 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rnnprof.analyzers.collectives import forward_prefetches, instances, matched_groups, shifted
from rnnprof.analyzers.comm import compute_intervals
from rnnprof.analyzers.device_work import BASIS_HOST_OPS
from rnnprof.analyzers.groups import call_bytes
from rnnprof.analyzers.intervals import covered, merge
from rnnprof.analyzers.noise import CROSS_RANK_FLOOR_US, Significance, significance
from rnnprof.analyzers.placement.inputs import EventsFigure

from .context import AuditContext


@dataclass(frozen=True)
class Exposure:
    """The table's collective records as parallel arrays (strings as text)."""

    row: np.ndarray
    worker: np.ndarray
    step: np.ndarray
    collective: np.ndarray
    phase: np.ndarray
    group: np.ndarray
    dur_us: np.ndarray
    exposed_us: np.ndarray
    start_us: np.ndarray
    wait_us: np.ndarray  # for the last member, and a CPU rank's time after the first member ended
    bytes: np.ndarray  # nccl-tests' message size S (``groups.call_bytes``); -1 where not known
    members: np.ndarray  # the group's member count (0: not known)
    prefetches: dict  # (worker, step) -> its FSDP forward prefetch ranges (``collectives.forward_prefetches``)

    def per_step(self, mask: np.ndarray, values: np.ndarray | None = None) -> dict[str, dict[int, float]]:
        """worker -> step -> the sum of ``values`` (the exposed time by default) over the records of ``mask``, every
        step of the worker's records present (0 where ``mask`` holds none of them)."""
        values = self.exposed_us if values is None else values
        out: dict[str, dict[int, float]] = {}
        for w in np.unique(self.worker).tolist():
            mine = self.worker == w
            steps = np.unique(self.step[mine & (self.step >= 0)]).tolist()
            out[w] = {s: float(values[mine & mask & (self.step == s)].sum()) for s in steps}
        return out


@dataclass(frozen=True)
class RankRecords:
    """One table's collective records as ``Exposure`` has them but their waits (``hidden_us``: the part the rank
    computed through), its collectives to match them by across ranks, and its clock. Plain data: a job's ranks give
    theirs from worker processes (``EXPOSURE``)."""

    arrays: dict[str, np.ndarray]
    found: dict
    time_base_us: float
    prefetches: dict


def _records_of(inp) -> list[RankRecords]:
    """The input's table as one ``RankRecords`` (none without collective records)."""
    table = inp.events
    if table is None or not len(table.collectives):
        return []
    records = table.collectives
    rows = records.row
    strings = np.asarray(table.strings, dtype=object)
    starts, ends, origin = compute_intervals(table, classes=inp.classes)
    compute_device = table.device[origin]
    device = table.device[rows]
    hidden = np.zeros(len(rows))
    for d in np.unique(device).tolist():
        union = merge(starts[compute_device == d], ends[compute_device == d])
        mine = device == d
        hidden[mine] = covered(*union, table.ts[rows[mine]], table.end[rows[mine]])
    kinds = strings[records.collective]
    listed = {g.name: g.size for g in table.metadata.process_groups}
    members = np.where(records.group_size > 0, records.group_size,
                       [listed.get(g, 0) for g in strings[records.group].tolist()])
    arrays = {"row": rows, "worker": np.array([table.devices[d].worker or "host" for d in device.tolist()], dtype=object),
              "step": table.step[rows].astype(np.int64), "collective": kinds, "phase": strings[records.phase],
              "group": strings[records.group], "dur_us": np.maximum(table.dur[rows], 0.0), "hidden_us": hidden,
              "start_us": table.ts[rows],
              "bytes": call_bytes(records.in_nelems, records.out_nelems, list(kinds), list(strings[records.dtype])),
              "members": members.astype(np.int64)}
    return [RankRecords(arrays, instances(table), float(table.time_base_us), forward_prefetches(table))]


# The records of the input's table, or of each rank of a job read apart, in rank order
EXPOSURE = EventsFigure("collective-exposure", _records_of, lambda parts: [r for part in parts for r in part])


def exposure(ctx: AuditContext) -> Exposure | None:
    """The exposure of the run's collective records, once per audit; None without records."""
    key = "collective_exposure"
    if key not in ctx.shared:
        parts = ctx.figure(EXPOSURE)
        ctx.shared[key] = _exposure(ctx, parts) if parts else None
    return ctx.shared[key]


def _exposure(ctx: AuditContext, parts: list[RankRecords]) -> Exposure:
    joined = {name: np.concatenate([p.arrays[name] for p in parts]) for name in parts[0].arrays}
    waits = _waits(ctx, parts, joined)
    exposed = np.maximum(joined["dur_us"] - joined["hidden_us"] - waits, 0.0)
    return Exposure(joined["row"], joined["worker"], joined["step"], joined["collective"], joined["phase"],
                    joined["group"], joined["dur_us"], exposed, joined["start_us"], waits, joined["bytes"],
                    joined["members"], {k: v for p in parts for k, v in p.prefetches.items()})


def _waits(ctx: AuditContext, parts: list[RankRecords], joined: dict[str, np.ndarray]) -> np.ndarray:
    """Each record's wait for the last member of its collective, and on a CPU rank its time after the first member
    ended (matched across ranks on one clock; 0 for a collective seen on one rank)."""
    base = min(p.time_base_us for p in parts)
    found: dict = {}
    for p in parts:
        found.update(shifted(p.found, p.time_base_us - base))
    cpu = {d.device.worker for d in ctx.comm.devices if d.basis == BASIS_HOST_OPS}
    wait: dict[tuple[str, int], float] = {}
    for group in matched_groups(found)[0] if len(found) >= 2 else ():
        last = max(inst.start_us for _, inst in group)
        first_end = min(inst.end_us for _, inst in group)
        for worker, inst in group:
            late = max(inst.end_us - first_end, 0.0) if worker in cpu else 0.0
            wait[(worker, inst.row)] = last - inst.start_us + late
    return np.array([wait.get((w, int(r)), 0.0) for w, r in zip(joined["worker"].tolist(), joined["row"].tolist())])


def between_ranks(ctx: AuditContext, per_step: list[float]) -> Significance:
    """A per-step figure of collectives between processes, against the run's jitter and the floor between ranks
    (``noise.CROSS_RANK_FLOOR_US``: a collective lasts as long as its slowest member takes to be scheduled)."""
    return significance(per_step, ctx.noise.spread_us, floor_us=CROSS_RANK_FLOOR_US)


@dataclass(frozen=True)
class Worst:
    """The rank whose selected collectives have the largest median exposed time per step: its steps' figures,
    their median (the saving) and its verdict (``between_ranks``)."""

    worker: str
    exposed: list[float]
    saving_us: float
    verdict: Significance


def worst(ctx: AuditContext, found: Exposure, selected: np.ndarray, values: np.ndarray | None = None) -> Worst | None:
    """Of the ``selected`` collective records, the rank with the largest median per step of their exposed time (or
    of ``values``); None where every median is 0."""
    best = None
    for worker, steps in sorted(found.per_step(selected, values).items()):
        if steps:
            median = float(np.median(list(steps.values())))
            if median > 0 and (best is None or median > best[0]):
                best = (median, worker, list(steps.values()))
    if best is None:
        return None
    median, worker, exposed = best
    return Worst(worker, exposed, median, between_ranks(ctx, exposed))
