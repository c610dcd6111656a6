"""What each event does: compute, communication, memcpy, memset, host/runtime or annotation.

An event is
communication when its kind is ``Kind.COMMUNICATION`` or when its name or op
type matches one of ``rnnprof.names.COMM_PATTERNS`` (or a user's ``--comm-pattern``):

* NCCL kernels: ``ncclKernel_*``, ``ncclDevKernel_*``;
* collective ops: ``CollectiveReduce*``, ``CollectiveGather*``, ``CollectiveBcast*``,
  ``NcclAllReduce``, anything named all-reduce / all-gather / reduce-scatter / all-to-all;
* point-to-point transfers: ``_Send``, ``_Recv``, ``_HostSend``, ``_HostRecv``, ``Send``, ``Recv``;
* ops inside the gradient aggregation name scopes the rnnprof runner builds for ring
  and hierarchical-copy all-reduce (``allreduce/...``, ``gradient_aggregation/...``),
  which are matched on the node name because their op types are plain copies and adds.

Classification is vectorized: each distinct string is tested once and the
result is mapped onto the event columns by code.
"""

from __future__ import annotations

import enum
import re
from typing import Iterable, Sequence

import numpy as np

from rnnprof.events import EventTable, Kind
from rnnprof.names import COMM_PATTERNS, MEMCPY_PATTERN, MEMSET_PATTERN


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

    kind = table.kind
    host_devices = np.array([d.kind == "host" for d in table.devices] or [False], dtype=bool)
    on_host = host_devices[table.device]

    result = np.full(len(table), int(EventClass.COMPUTE), dtype=np.int8)
    named_comm = is_comm[table.name] | is_comm[table.op_type]
    result[np.isin(kind, (Kind.MEMCPY,)) | is_memcpy[table.name]] = EventClass.MEMCPY
    result[np.isin(kind, (Kind.MEMSET,)) | is_memset[table.name]] = EventClass.MEMSET
    result[(kind == Kind.COMMUNICATION) | named_comm] = EventClass.COMMUNICATION
    # Host-side work is host activity whatever it is named: a c10d::allreduce_ call only launches the collective.
    result[(kind == Kind.RUNTIME) | ((kind == Kind.HOST_OP) & on_host)] = EventClass.HOST
    result[kind == Kind.ANNOTATION] = EventClass.ANNOTATION
    return result
