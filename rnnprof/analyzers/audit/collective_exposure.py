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

from rnnprof.analyzers.collectives import instances, matched_groups
from rnnprof.analyzers.comm import compute_intervals
from rnnprof.analyzers.device_work import BASIS_HOST_OPS
from rnnprof.analyzers.groups import call_bytes
from rnnprof.analyzers.intervals import covered, merge
from rnnprof.analyzers.noise import CROSS_RANK_FLOOR_US, Significance, significance

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


def exposure(ctx: AuditContext) -> Exposure | None:
    """The exposure of the table's collective records, once per audit; None without records."""
    table = ctx.table
    if table is None or not len(table.collectives):
        return None
    key = "collective_exposure"
    if key not in ctx.shared:
        ctx.shared[key] = _exposure(ctx)
    return ctx.shared[key]


def _exposure(ctx: AuditContext) -> Exposure:
    table, records = ctx.table, ctx.table.collectives
    rows = records.row
    strings = np.asarray(table.strings, dtype=object)
    starts, ends, origin = compute_intervals(table, classes=ctx.classes)
    compute_device = table.device[origin]
    device = table.device[rows]
    hidden = np.zeros(len(rows))
    for d in np.unique(device).tolist():
        union = merge(starts[compute_device == d], ends[compute_device == d])
        mine = device == d
        hidden[mine] = covered(*union, table.ts[rows[mine]], table.end[rows[mine]])
    dur = np.maximum(table.dur[rows], 0.0)
    waits = _waits(ctx, rows)
    exposed = np.maximum(dur - hidden - waits, 0.0)
    worker = np.array([table.devices[d].worker or "host" for d in device.tolist()], dtype=object)
    kinds = strings[records.collective]
    listed = {g.name: g.size for g in table.metadata.process_groups}
    members = np.where(records.group_size > 0, records.group_size,
                       [listed.get(g, 0) for g in strings[records.group].tolist()])
    return Exposure(rows, worker, table.step[rows].astype(np.int64), kinds, strings[records.phase],
                    strings[records.group], dur, exposed, table.ts[rows], waits,
                    call_bytes(records.in_nelems, records.out_nelems, list(kinds), list(strings[records.dtype])),
                    members.astype(np.int64))


def _waits(ctx: AuditContext, rows: np.ndarray) -> np.ndarray:
    """Each record's wait for the last member of its collective, and on a CPU rank its time after the first member
    ended (matched across ranks; 0 for a collective seen on one rank)."""
    found = instances(ctx.table)
    cpu = {d.device.worker for d in ctx.comm.devices if d.basis == BASIS_HOST_OPS}
    wait: dict[int, float] = {}
    for group in matched_groups(found)[0] if len(found) >= 2 else ():
        last = max(inst.start_us for _, inst in group)
        first_end = min(inst.end_us for _, inst in group)
        for worker, inst in group:
            late = max(inst.end_us - first_end, 0.0) if worker in cpu else 0.0
            wait[inst.row] = last - inst.start_us + late
    return np.array([wait.get(int(r), 0.0) for r in rows.tolist()])


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
