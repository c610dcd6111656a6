"""The training phase of a collective: forward, backward or optimizer, from where its call sits on its thread.

A collective's place is its call (a CPU rank's ``c10d::*`` operator, a GPU rank's kernel launch). The first that
answers gives the phase: the capture's or the user's ``forward``/``backward``/``optimizer`` ranges (recorded,
``names.PHASE_RANGE``); what the libraries mark around it (``events.collectives.PHASE_LIBRARY``: torch.optim's
and FSDP's ranges, autograd's backward functions); the operators around it in its step (``PHASE_NEIGHBOURS``):
the last top-level operator before it (a receive: the first after it), backward inside a backward function,
optimizer inside torch.optim's ranges, else forward, other collectives' calls and packing copies passed over; and
backward where one of the rank's backward functions, on any thread, ran between that operator and the call (a
GPU's backward runs on autograd's own thread).
A collective with no place (a kernel whose launch is not in the trace) has no phase (""). In full:
docs/commands/comm.md, "Process groups".
"""

from __future__ import annotations

import re

import numpy as np

from rnnprof.analyzers.device_work import thread_codes
from rnnprof.events import EventTable, Kind
from rnnprof.events.collectives import PHASE_LIBRARY, PHASE_NEIGHBOURS
from rnnprof.events.names import (BACKWARD, BACKWARD_FUNCTION, COLLECTIVE_COPY, CPU_COLLECTIVE, FORWARD,
                           LIBRARY_PHASE_RANGES, OPTIMIZER, PHASE_RANGE, PHASES)

# Operators that are no work of a phase: collectives' calls and runs, and their buffers' packing.
_PASSED_OVER = re.compile(rf"{CPU_COLLECTIVE.pattern}|^_c10d_functional::|{COLLECTIVE_COPY.pattern}")


def _codes(table: EventTable, test) -> np.ndarray:
    """Per string code, whether ``test(text)``."""
    return np.fromiter((bool(test(s)) for s in table.strings), dtype=bool, count=len(table.strings))


class _Spans:
    """Intervals (any nesting) that answer, for a time, whether one of them holds it."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray):
        order = np.argsort(starts, kind="stable")
        self.starts = starts[order]
        self.reach = np.maximum.accumulate(ends[order]) if len(order) else np.zeros(0)

    def holds(self, t: np.ndarray) -> np.ndarray:
        last = np.searchsorted(self.starts, t, side="right") - 1
        return (last >= 0) & (self.reach[np.maximum(last, 0)] > t) if len(self.starts) else np.zeros(len(t), bool)


class _Thread:
    """One thread's phase ranges and its top-level operators (the work around a call), to place calls on it."""

    def __init__(self, table: EventTable, rows: np.ndarray, ranges: list, backward_fn: np.ndarray,
                 passed: np.ndarray, rank_backward: tuple[np.ndarray, np.ndarray]):
        self.table = table
        self.ranges = ranges  # (phase, bit, _Spans), in order of precedence
        self.rank_backward = rank_backward  # the rank's backward functions on all its threads: starts, ends (sorted)
        ops = rows[table.kind[rows] == Kind.HOST_OP]
        ops = ops[np.lexsort((-table.dur[ops], table.ts[ops]))]
        ends = table.ts[ops] + table.dur[ops]
        reach = np.maximum.accumulate(ends) if len(ops) else np.zeros(0)
        top = np.ones(len(ops), dtype=bool)
        top[1:] = table.ts[ops][1:] >= reach[:-1]
        ops = ops[top & ~passed[table.name[ops]]]  # top-level operators do not overlap: starts and ends sorted
        self.starts, self.ends, self.steps = table.ts[ops], table.ts[ops] + table.dur[ops], table.step[ops]
        label = np.where(backward_fn[table.name[ops]], BACKWARD, FORWARD).astype(object)
        for phase, _, spans in ranges:
            if phase == OPTIMIZER:
                label[spans.holds(self.starts)] = OPTIMIZER
        self.label = label

    def place(self, rows: np.ndarray, receive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The phase of the calls at ``rows`` on this thread and what was inferred of each."""
        table = self.table
        t, step = table.ts[rows], table.step[rows]
        phase, bits = np.full(len(rows), "", dtype=object), np.zeros(len(rows), dtype=np.int32)
        done = np.zeros(len(rows), dtype=bool)
        for name, bit, spans in self.ranges:
            hit = ~done & spans.holds(t)
            phase[hit], bits[hit] = name, bit
            done |= hit
        before = np.searchsorted(self.ends, t, side="right") - 1
        after = np.searchsorted(self.starts, t + table.dur[rows], side="left")
        first, second = np.where(receive, after, before), np.where(receive, before, after)
        ok_first, ok_second = self._near(first, step), self._near(second, step)
        chosen = np.where(ok_first, first, second)
        rest = ~done & (ok_first | ok_second)
        phase[rest], bits[rest] = self.label[chosen[rest]], PHASE_NEIGHBOURS
        phase[rest & self._backward_between(before, after, t, t + table.dur[rows], receive, ok_first)] = BACKWARD
        return phase, bits

    def _backward_between(self, before, after, start, end, receive, ok_first) -> np.ndarray:
        """Whether one of the rank's backward functions ended between the thread's operator before each call and
        the call (a receive: started between the call and the operator after it)."""
        starts, ends = self.rank_backward
        n = len(self.starts)
        if not len(starts) or not n:
            return np.zeros(len(start), dtype=bool)
        since = np.where(ok_first & ~receive, self.ends[np.clip(before, 0, n - 1)], start)
        until = np.where(ok_first & receive, self.starts[np.clip(after, 0, n - 1)], end)
        ended = np.searchsorted(ends, start, side="right") > np.searchsorted(ends, since, side="right")
        began = np.searchsorted(starts, until, side="left") > np.searchsorted(starts, end, side="left")
        return np.where(receive, began, ended)

    def _near(self, k: np.ndarray, step: np.ndarray) -> np.ndarray:
        """Whether operator ``k`` exists and is in the call's step (any, for a call in no step)."""
        exists = (k >= 0) & (k < len(self.starts))
        return exists & ((step < 0) | (self.steps[np.clip(k, 0, max(len(self.steps) - 1, 0))] == step)) \
            if len(self.starts) else exists


def call_phases(table: EventTable, rows: np.ndarray, receive: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The phase (``names.PHASES`` or "") of the collective whose call is at each of ``rows`` (-1: none), and what
    was inferred of it (``events.collectives`` bits); ``receive``: the collective is a receive."""
    phases, bits = np.full(len(rows), "", dtype=object), np.zeros(len(rows), dtype=np.int32)
    placed = np.flatnonzero(rows >= 0)
    if not len(placed):
        return list(phases), bits
    workers = table.worker_codes()
    thread = thread_codes(table)
    capture = np.array([m.group(1).lower() if (m := PHASE_RANGE.match(s)) else "" for s in table.strings],
                       dtype=object)
    library = [(phase, _codes(table, pattern.match)) for phase, pattern in LIBRARY_PHASE_RANGES]
    backward_fn = _codes(table, lambda s: s.startswith(BACKWARD_FUNCTION))
    passed = _codes(table, _PASSED_OVER.match)
    marks = np.isin(table.kind, (Kind.ANNOTATION, Kind.HOST_OP))
    functions = np.flatnonzero((table.kind == Kind.HOST_OP) & backward_fn[table.name])
    rank_backward: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # per worker: its backward functions' starts, ends
    for worker in np.unique(workers[table.device[functions]]).tolist():
        theirs = functions[workers[table.device[functions]] == worker]
        rank_backward[worker] = (np.sort(table.ts[theirs]), np.sort(table.ts[theirs] + table.dur[theirs]))
    none = (np.zeros(0), np.zeros(0))
    keys = thread[rows[placed]]
    for key in np.unique(keys).tolist():
        mine = np.flatnonzero(thread == key)
        place = _Thread(table, mine, _ranges(table, mine[marks[mine]], capture, library, backward_fn), backward_fn,
                        passed, rank_backward.get(int(workers[table.device[mine[0]]]), none))
        these = placed[keys == key]
        phases[these], bits[these] = place.place(rows[these], receive[these])
    return list(phases), bits


def _ranges(table: EventTable, rows: np.ndarray, capture: np.ndarray, library: list,
            backward_fn: np.ndarray) -> list:
    """A thread's phase ranges by precedence: the capture's, the libraries' (optimizer first), backward functions."""
    names = table.name[rows]
    found = []
    for phase in PHASES:
        mine = rows[capture[names] == phase]
        found.append((phase, 0, _Spans(table.ts[mine], table.ts[mine] + table.dur[mine])))
    for phase, marked in sorted(library, key=lambda item: item[0] != OPTIMIZER):
        mine = rows[marked[names]]
        found.append((phase, PHASE_LIBRARY, _Spans(table.ts[mine], table.ts[mine] + table.dur[mine])))
    mine = rows[backward_fn[names]]
    found.append((BACKWARD, PHASE_LIBRARY, _Spans(table.ts[mine], table.ts[mine] + table.dur[mine])))
    return found
