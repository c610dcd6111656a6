"""What each event does: compute, communication, memcpy, memset, host/runtime or annotation.

An event is communication when its kind is ``Kind.COMMUNICATION`` or its name or op type matches
``rnnprof.events.names.COMM_PATTERNS`` (or a user's ``--comm-pattern``): NCCL kernels, collective ops, point-to-point
transfers (``_Send``/``_Recv``...), and the ops under the gradient-aggregation scopes rnnprof's runner builds
(matched on the node name, as their op types are plain copies and adds).

A communication event's collective type (``collective_types``, vocabulary ``names.COLLECTIVE_TYPES``) is the
first that answers of: the kernel's Kineto ``Collective name``, the ``nccl:*`` range around it on its stream,
its op type, its name. Classification is vectorized: each distinct string is tested once and the result
mapped onto the event columns by code. The patterns in full: docs/commands/comm.md.
"""

from __future__ import annotations

import enum
import re
from typing import Iterable, Sequence

import numpy as np

from rnnprof.events import EventTable, Kind
from rnnprof.events.names import (COLLECTIVE_COPY, COLLECTIVE_RANGE, COLLECTIVE_TYPES, COMM_PATTERNS, MEMCPY_PATTERN,
                                  MEMSET_PATTERN, UNKNOWN_COLLECTIVE, collective_type)


class EventClass(enum.IntEnum):
    COMPUTE = 0
    COMMUNICATION = 1
    MEMCPY = 2
    MEMSET = 3
    HOST = 4  # host-side work: a host thread's op on the host, a runtime/driver call
    ANNOTATION = 5  # ranges and markers; never counted as activity


# Classes that make a device busy.
DEVICE_WORK = (EventClass.COMPUTE, EventClass.COMMUNICATION, EventClass.MEMCPY, EventClass.MEMSET)



def compile_patterns(extra: Iterable[str] = ()) -> re.Pattern:
    """``COMM_PATTERNS`` plus ``extra`` as one regex; raises ``re.error`` for a bad user pattern."""
    patterns = list(COMM_PATTERNS)
    for pattern in extra:
        re.compile(pattern)  # fail on the user's pattern alone, with its own message
        patterns.append(pattern)
    return re.compile("|".join(f"(?:{p})" for p in _hoist_flags(patterns)))


def _hoist_flags(patterns: Sequence[str]) -> list[str]:
    # Inline global flags such as (?i) must lead the whole regex; scope them to their own branch instead.
    scoped = []
    for pattern in patterns:
        match = re.match(r"^\(\?([aiLmsux]+)\)", pattern)
        scoped.append(f"(?{match.group(1)}:{pattern[match.end():]})" if match else pattern)
    return scoped


def matching_codes(strings: Sequence[str], pattern: re.Pattern, codes: np.ndarray) -> np.ndarray:
    """Boolean per string code: whether the string matches (searched anywhere). Only ``codes`` are tested."""
    result = np.zeros(len(strings), dtype=bool)
    for code in np.unique(codes):
        result[code] = pattern.search(strings[code]) is not None
    return result


def classify(table: EventTable, comm_patterns: Iterable[str] = ()) -> np.ndarray:
    """One ``EventClass`` (int8) per event."""
    comm = compile_patterns(comm_patterns)
    memcpy, memset = re.compile(MEMCPY_PATTERN), re.compile(MEMSET_PATTERN)
    used = np.zeros(len(table.strings), dtype=bool)
    used[table.name] = True
    used[table.op_type] = True
    used = np.flatnonzero(used)
    is_comm = matching_codes(table.strings, comm, used)
    is_memcpy = matching_codes(table.strings, memcpy, used)
    is_memset = matching_codes(table.strings, memset, used)
    is_copy = matching_codes(table.strings, COLLECTIVE_COPY, used)

    kind = table.kind
    host_devices = np.array([d.kind == "host" for d in table.devices] or [False], dtype=bool)
    on_host = host_devices[table.device]

    result = np.full(len(table), int(EventClass.COMPUTE), dtype=np.int8)
    named_comm = (is_comm[table.name] | is_comm[table.op_type]) & ~is_copy[table.name]  # packing copies: no comm
    result[np.isin(kind, (Kind.MEMCPY,)) | is_memcpy[table.name]] = EventClass.MEMCPY
    result[np.isin(kind, (Kind.MEMSET,)) | is_memset[table.name]] = EventClass.MEMSET
    result[(kind == Kind.COMMUNICATION) | named_comm] = EventClass.COMMUNICATION
    # Host-side work is host activity whatever it is named: a c10d::allreduce_ call only launches the collective.
    result[(kind == Kind.RUNTIME) | ((kind == Kind.HOST_OP) & on_host)] = EventClass.HOST
    result[kind == Kind.ANNOTATION] = EventClass.ANNOTATION
    return result


def collective_types(table: EventTable, rows: np.ndarray) -> np.ndarray:
    """For each of ``rows`` (communication events), the index in ``COLLECTIVE_TYPES`` of its collective type."""
    rows = np.asarray(rows, dtype=np.int64)
    if not len(rows):
        return np.zeros(0, dtype=np.int8)
    index = {t: i for i, t in enumerate(COLLECTIVE_TYPES)}
    unknown = index[UNKNOWN_COLLECTIVE]
    # By op type, then name: each distinct pair tested once.
    n = len(table.strings)
    pairs, inverse = np.unique(table.op_type[rows].astype(np.int64) * n + table.name[rows], return_inverse=True)
    by_pair = np.array([index[collective_type(table.strings[p // n], table.strings[p % n])] for p in pairs.tolist()],
                       dtype=np.int8)
    result = by_pair[inverse.reshape(-1)]
    # The nccl:* range around the event on its GPU stream overrides the name.
    ranged = _ranged_types(table, rows)
    result[ranged >= 0] = ranged[ranged >= 0]
    # The collective the kernel's args name overrides both.
    named = _args_types(table)
    if named:
        workers = [d.worker for d in table.devices]
        for k in np.flatnonzero(table.correlation[rows] >= 0).tolist():
            row = rows[k]
            found = named.get((workers[table.device[row]], int(table.correlation[row])), unknown)
            if found != unknown:
                result[k] = found
    # The operation the event's collective record says it implements overrides the rest (a gloo:all_reduce that
    # carries out a reduce-scatter).
    recorded = _recorded_types(table, rows)
    result[recorded >= 0] = recorded[recorded >= 0]
    return result


def _recorded_types(table: EventTable, rows: np.ndarray) -> np.ndarray:
    """For each of ``rows``, the index in ``COLLECTIVE_TYPES`` of the operation its collective record names, -1
    where it has no record or the record names none."""
    records = table.collectives
    found = np.full(len(rows), -1, dtype=np.int8)
    if not len(records):
        return found
    index = {t: i for i, t in enumerate(COLLECTIVE_TYPES)}
    at = np.minimum(np.searchsorted(records.row, rows), len(records) - 1)
    has = records.row[at] == rows
    named = np.array([index.get(table.strings[c], -1) for c in records.collective[at[has]].tolist()], dtype=np.int8)
    found[has] = np.where(named == index[UNKNOWN_COLLECTIVE], -1, named)
    return found


def _ranged_types(table: EventTable, rows: np.ndarray) -> np.ndarray:
    """For each of ``rows``, the type of the collective range (``nccl:all_reduce``) its start lies in on its own
    device and lane, -1 where none."""
    found = np.full(len(rows), -1, dtype=np.int8)
    is_range = np.zeros(len(table.strings), dtype=bool)
    used = np.unique(table.name[table.kind == Kind.ANNOTATION])
    for code in used.tolist():
        is_range[code] = COLLECTIVE_RANGE.match(table.strings[code]) is not None
    ranges = np.flatnonzero((table.kind == Kind.ANNOTATION) & is_range[table.name])
    if not len(ranges):
        return found
    index = {t: i for i, t in enumerate(COLLECTIVE_TYPES)}
    range_type = np.array([index[collective_type(table.strings[c])] for c in table.name[ranges].tolist()],
                          dtype=np.int8)
    width = int(table.lane.max()) + 1
    range_key = table.device[ranges].astype(np.int64) * width + table.lane[ranges]
    row_key = table.device[rows].astype(np.int64) * width + table.lane[rows]
    range_end = table.ts[ranges] + table.dur[ranges]
    for key in np.unique(range_key[np.isin(range_key, row_key)]).tolist():
        mine = np.flatnonzero(range_key == key)
        mine = mine[np.argsort(table.ts[ranges[mine]], kind="stable")]
        starts, ends = table.ts[ranges[mine]], range_end[mine]
        members = np.flatnonzero(row_key == key)
        ts = table.ts[rows[members]]
        last = np.searchsorted(starts, ts, side="right") - 1
        inside = (last >= 0) & (ends[np.maximum(last, 0)] > ts)
        found[members[inside]] = range_type[mine[last[inside]]]
    return found


def _args_types(table: EventTable) -> dict[tuple[str, int], int]:
    """``(worker, correlation) -> index in COLLECTIVE_TYPES`` of the kernels whose Kineto args name their
    collective (``Collective name``), every merged trace's (the first trace's where two share a worker)."""
    index = {t: i for i, t in enumerate(COLLECTIVE_TYPES)}
    found: dict[tuple[str, int], int] = {}
    for args in reversed(table.metadata.collective_args):
        for correlation, name in zip(args.correlation, args.collective):
            if name:
                found[(args.worker, correlation)] = index[collective_type(name)]
    return found
