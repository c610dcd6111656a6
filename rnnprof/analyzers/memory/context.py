"""What was running when each allocator record was made: the outermost operator on its thread (and which
instance of it), and the training phase (forward, backward, optimizer) the moment belongs to."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rnnprof.events import EventTable, Kind
from rnnprof.events.names import BACKWARD_FUNCTION, OPTIMIZER_STEP, OPTIMIZER_ZERO_GRAD

FORWARD, BACKWARD, OPTIMIZER, ZERO_GRAD, OUTSIDE = range(5)


@dataclass(frozen=True)
class RecordContext:
    """Parallel to a table's memory records."""

    operator: np.ndarray  # string code of the outermost host operator on the record's thread, -1: none
    instance: np.ndarray  # a number unique to that operator's run, -1: none
    phase: np.ndarray  # FORWARD, BACKWARD, OPTIMIZER, ZERO_GRAD or OUTSIDE
    step: np.ndarray  # the record's step (-1: none)


def _top_level(ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Which of the intervals (sorted by start, the longer first on ties) no earlier one contains."""
    if not len(ts):
        return np.zeros(0, dtype=bool)
    before = np.maximum.accumulate(end)
    top = np.ones(len(ts), dtype=bool)
    top[1:] = ts[1:] >= before[:-1]
    return top


def _enclosing(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each time, the index of the (non-overlapping, sorted) interval holding it, else -1."""
    idx = np.searchsorted(starts, t, side="right") - 1
    safe = np.maximum(idx, 0)
    return np.where((idx >= 0) & (t <= ends[safe]) if len(starts) else False, idx, -1)


def record_context(table: EventTable) -> RecordContext:
    """The operator and phase of every memory record of ``table``."""
    mem = table.memory
    n = len(mem)
    operator = np.full(n, -1, dtype=np.int64)
    instance = np.full(n, -1, dtype=np.int64)
    worker = table.worker_codes()
    ops = np.flatnonzero(table.kind == Kind.HOST_OP)
    op_key = worker[table.device[ops]] * (1 << 32) + table.lane[ops]
    rec_key = worker[mem.device] * (1 << 32) + mem.lane
    offset = 0
    for key in np.unique(rec_key):
        rows = np.flatnonzero(rec_key == key)
        mine = ops[op_key == key]
        mine = mine[np.lexsort((-table.dur[mine], table.ts[mine]))]
        top = mine[_top_level(table.ts[mine], table.end[mine])]
        if not len(top):
            continue
        found = _enclosing(table.ts[top], table.end[top], mem.ts[rows])
        operator[rows] = np.where(found >= 0, table.name[top[np.maximum(found, 0)]], -1)
        instance[rows] = np.where(found >= 0, found + offset, -1)
        offset += len(top)
    named = mem.operator >= 0  # the source named the allocating operator (TensorFlow's node): no phase to tell
    operator[named] = mem.operator[named]
    phases = _phases(table, operator, worker[mem.device] if n else worker[:0])
    phases[named] = OUTSIDE
    return RecordContext(operator, instance, phases, mem.step)


def _phases(table: EventTable, operator: np.ndarray, rec_worker: np.ndarray) -> np.ndarray:
    """A record's phase: inside an optimizer's step or zero_grad (an annotation on any thread of its worker), in a
    backward function (its outermost operator), in a step or an operator (forward), else outside."""
    mem = table.memory
    phase = np.where((mem.step >= 0) | (operator >= 0), FORWARD, OUTSIDE).astype(np.int8)
    names = table.strings
    backward = np.fromiter((s.startswith(BACKWARD_FUNCTION) for s in names), dtype=bool, count=len(names))
    phase[(operator >= 0) & backward[np.maximum(operator, 0)]] = BACKWARD
    worker = table.worker_codes()
    for prefix, value in ((OPTIMIZER_STEP, OPTIMIZER), (OPTIMIZER_ZERO_GRAD, ZERO_GRAD)):
        marked = np.fromiter((s.startswith(prefix) for s in names), dtype=bool, count=len(names))
        spans = np.flatnonzero(marked[table.name] & np.isin(table.kind, (Kind.ANNOTATION, Kind.HOST_OP)))
        for w in np.unique(worker[table.device[spans]]):
            mine = spans[worker[table.device[spans]] == w]
            mine = mine[np.argsort(table.ts[mine], kind="stable")]
            mine = mine[_top_level(table.ts[mine], table.end[mine])]
            rows = np.flatnonzero(rec_worker == w)
            inside = _enclosing(table.ts[mine], table.end[mine], mem.ts[rows]) >= 0
            phase[rows[inside]] = value
    return phase
