"""What FSDP2 holds unsharded at a device's peak, by module: the live bytes its allocator handed out inside
``FSDP::all_gather_copy_out (<module>)`` (each parameter's unsharded storage, which the module's forward and
backward read) and inside ``FSDP::all_gather (<module>)`` (the all-gather's flat input and output buffers), the
range on the allocating thread (``names.FSDP_GATHER_RANGE``)."""

from __future__ import annotations

import numpy as np

from rnnprof.events import EventTable, Kind
from rnnprof.events.names import FSDP_GATHER_RANGE, FSDP_ROOT

from .result import Unsharded
from .series import Series, live_at

COPY_OUT, GATHER = 1, 2  # a record's part: the unsharded parameters, the all-gather's buffers (0: neither)


def gather_labels(table: EventTable) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Per memory record, the module it was allocated for (an index into the returned names, -1: none) and its
    part (``COPY_OUT``, ``GATHER``, 0): the innermost FSDP gathering range on its worker's thread holding it."""
    mem = table.memory
    module = np.full(len(mem), -1, dtype=np.int64)
    part = np.zeros(len(mem), dtype=np.int8)
    matched = {c: m for c, s in enumerate(table.strings) if (m := FSDP_GATHER_RANGE.match(s))}
    if not matched or not len(mem):
        return module, part, []
    rows = np.flatnonzero(np.isin(table.name, list(matched)) & np.isin(table.kind, (Kind.ANNOTATION, Kind.HOST_OP)))
    names: list[str] = []
    workers = np.array([d.worker for d in table.devices] or [""], dtype=object)
    record_key = list(zip(workers[mem.device].tolist(), mem.lane.tolist()))
    for r in rows[np.argsort(-table.dur[rows], kind="stable")].tolist():  # the longest first: the innermost last
        m = matched[int(table.name[r])]
        label = m.group(2) or FSDP_ROOT
        if label not in names:
            names.append(label)
        key = (workers[table.device[r]], int(table.lane[r]))
        inside = (mem.ts >= table.ts[r]) & (mem.ts <= table.ts[r] + table.dur[r])
        inside &= np.fromiter((k == key for k in record_key), dtype=bool, count=len(mem))
        module[inside] = names.index(label)
        part[inside] = COPY_OUT if m.group(1) == "all_gather_copy_out" else GATHER
    return module, part, names


def unsharded_at(series: Series, peak: int, labels: tuple[np.ndarray, np.ndarray, list[str]]) -> tuple[Unsharded, ...]:
    """What FSDP had gathered and not yet freed after record ``peak``, by module, the most first."""
    module, part, names = labels
    live, b = live_at(series, peak)
    rows = series.rows[live]
    found = []
    for k, name in enumerate(names):
        mine = module[rows] == k
        params = int(b[live][mine & (part[rows] == COPY_OUT)].sum())
        buffers = int(b[live][mine & (part[rows] == GATHER)].sum())
        if params or buffers:
            found.append(Unsharded(name, params, buffers))
    return tuple(sorted(found, key=lambda u: (-u.parameters - u.buffers, u.module)))
