"""What a Kineto trace says of each collective: its process group, message, phase and the operation it implements.

While the loader streams the file, ``CollectiveArgsReader`` keeps the args of the events that tell what a
collective is: NCCL kernels' and ``record_param_comms`` operators' collective args, and a CPU rank's ``c10d::*``
calls' and ``gloo:*`` runs' recorded shapes (gloo records no collective args). Once the table is built,
``with_collective_records`` makes one ``CollectiveRecords`` row per collective event: a NCCL kernel with its own
args or those of the ``record_param_comms`` it was launched in, or where it was launched in none (a coalesced
launch, ``nccl:coalesced``: ``batch_isend_irecv`` fuses a pipeline's send and receive into one kernel) those its
thread recorded since its previous NCCL launch (``_combined``); a gloo run with the ``c10d::*`` call it carries
out (``_match_runs``), its group and message from the ``record_param_comms`` inside the call where there is one
(``_params_inside``), else its group from the flight recorder's entry joined to the call (``_recorder_groups``)
or the rank's groups, its message from the call's shapes (``_cpu_group``); its phase from
``traces.collective_phases``. What was inferred is marked on each record. The rules in full:
docs/commands/comm.md, "Process groups".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import msgspec
import numpy as np

from rnnprof.events import EventTable, Kind, ProcessGroup, match_correlation
from rnnprof.events.collectives import (GROUP_BY_SIZE, GROUP_BY_THREAD, GROUP_FROM_RECORDER, GROUP_ONLY_ONE,
                                        OPERATION_FROM_CALL, PEER_FROM_ARGS, SHAPES, collective_records)
from rnnprof.events.names import (ALL_GATHER, CARRIED_OUT_AS, CPU_COLLECTIVE, CPU_COLLECTIVE_CALL, CPU_COLLECTIVE_RUN,
                           NCCL_KERNEL, NOT_COLLECTIVES, REDUCE_SCATTER, SEND_RECV, UNKNOWN_COLLECTIVE,
                           collective_type, p2p_direction)
from rnnprof.traces.collective_phases import call_phases
from rnnprof.traces.recorded_groups import CallSpan, RecorderWindow, join_calls, operation_key

PARAM_COMMS = "record_param_comms"


class _Captured(NamedTuple):
    """One event that tells what its collective is: its row and its decoded args (``kineto``'s record of them)."""

    row: int
    on_gpu: bool
    args: Any


class CollectiveArgsReader:
    """The args of the events of a streamed trace that tell what a collective is (``add`` per chunk)."""

    def __init__(self, strings: list[str]):
        self.strings = strings  # the builder's strings, growing as names are met
        self.codes: set[int] = set()  # codes of host operators' names that are collectives' calls or runs
        self.checked = 0
        self.found: list[_Captured] = []

    def add(self, first_row: int, codes: list[int], args: list, on_gpu: list[bool] | None) -> None:
        """A chunk's events: their rows start at ``first_row``; ``on_gpu`` None when every one is a host event."""
        if len(self.strings) > self.checked:
            self.codes.update(c for c in range(self.checked, len(self.strings))
                              if CPU_COLLECTIVE.match(self.strings[c]))
            self.checked = len(self.strings)
        found = self.found
        hits = [] if self.codes.isdisjoint(codes) else [k for k, c in enumerate(codes) if c in self.codes]
        for k in hits:
            if on_gpu is None or not on_gpu[k]:
                found.append(_Captured(first_row + k, False, args[k]))
        if on_gpu is not None:
            found += [_Captured(first_row + k, True, a) for k, (a, g) in enumerate(zip(args, on_gpu))
                      if g and (a.collective is not None or a.in_nelems is not None or a.group is not None)]


def process_groups(info: dict, captured: list[_Captured],
                   recorder: RecorderWindow | None = None) -> tuple[ProcessGroup, ...]:
    """The groups a rank's trace names: its ``distributedInfo``'s ``pg_config`` and its collectives' args; then
    those only its flight recorder's entries name (members not known)."""
    found: dict[str, ProcessGroup] = {}
    for pg in (info.get("pg_config") or []) if isinstance(info, dict) else []:
        if isinstance(pg, dict) and "pg_name" in pg:
            found[str(pg["pg_name"])] = ProcessGroup(str(pg["pg_name"]), str(pg.get("pg_desc") or ""),
                                                     _ranks(pg.get("ranks")))
    for c in captured:
        a = c.args
        if a.group is not None and str(a.group) not in found:
            found[str(a.group)] = ProcessGroup(str(a.group), "" if a.pg_desc is None else str(a.pg_desc),
                                               _ranks(a.pg_ranks))
    for entry in recorder.entries if recorder is not None else ():
        found.setdefault(entry.group.name, entry.group)
    return tuple(found.values())


def _ranks(value) -> tuple[int, ...]:
    """Members as ``distributedInfo`` lists them or Kineto writes them (``"[0, 1, 2]"``); () when unreadable."""
    if isinstance(value, str):
        value = re.findall(r"-?\d+", value)
    try:
        return tuple(int(v) for v in value) if isinstance(value, (list, tuple)) else ()
    except (TypeError, ValueError):
        return ()


def _int(value, default: int = -1) -> int:
    if value is None:
        return default
    if type(value) is int:
        return value if -(1 << 63) <= value < (1 << 63) else default
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return default
    return number if -(1 << 63) <= number < (1 << 63) else default


def _decoded(value):
    """Recorded shapes: raw JSON decoded (None where it is not JSON), or values already decoded."""
    if not isinstance(value, msgspec.Raw):
        return value
    if not len(value):
        return None
    try:
        return msgspec.json.decode(value)
    except msgspec.DecodeError:
        return None


def _elements(dims) -> int:
    """Elements of a recorded input: a tensor's dims (``[4, 8]``) or a tensor list's (``[[9536], [12]]``)."""
    if not isinstance(dims, list):
        return -1
    if dims and all(isinstance(d, list) for d in dims):
        parts = [_elements(d) for d in dims]
        return -1 if min(parts) < 0 else sum(parts)
    if all(isinstance(d, int) and d >= 0 for d in dims):
        return math.prod(dims)
    return -1


@dataclass
class _Message:
    """A call's or a run's message as recorded: elements in and out, dtype, members, peer (group-local)."""

    in_nelems: int = -1
    out_nelems: int = -1
    dtype: str = ""
    group_size: int = -1
    peer: int = -1


def _args_message(c: _Captured) -> _Message:
    a = c.args
    return _Message(_int(a.in_nelems), _int(a.out_nelems), "" if a.dtype is None else str(a.dtype),
                    _int(a.group_size), _args_peer(a))


def _args_peer(a) -> int:
    """A send's or a receive's peer as a global rank, from its group-local ``Dst Rank``/``Src Rank`` and its group's
    members (-1: not recorded, or no send or receive)."""
    if a.collective is None or collective_type(str(a.collective)) != SEND_RECV:
        return -1
    local = _int(a.dst_rank if a.dst_rank is not None else a.src_rank)
    members = _ranks(a.pg_ranks)
    return members[local] if 0 <= local < len(members) else -1


def _shapes_message(name: str, c: _Captured) -> _Message:
    """A ``c10d::*`` call's or ``gloo:*`` run's message from its recorded shapes (``Input Dims``, ``Input type``):
    a base all-gather's inputs are (out, in), a base reduce-scatter's (out, in), others' the tensor (list) first;
    a send's or receive's peer is its third argument."""
    dims, types, concrete = (_decoded(v) for v in (c.args.dims, c.args.types, c.args.concrete))
    if not isinstance(dims, list) or not dims:
        return _Message()
    types = types if isinstance(types, list) else []
    kind = collective_type(name)
    if kind in (ALL_GATHER, REDUCE_SCATTER) and len(dims) >= 2 and "base" in name:
        out, inp, dtype = _elements(dims[0]), _elements(dims[1]), types[1] if len(types) > 1 else ""
    else:
        out = inp = _elements(dims[0])
        dtype = next((t for t in types[:1] if t and "List" not in t), "")
    members = -1
    if kind == ALL_GATHER and inp > 0 and out % inp == 0 and "base" in name:
        members = out // inp
    elif kind == REDUCE_SCATTER and out > 0 and inp % out == 0 and "base" in name:
        members = inp // out
    peer = -1
    if kind == SEND_RECV and isinstance(concrete, list) and len(concrete) > 2:
        peer = _int(concrete[2])
    return _Message(inp, out, str(dtype), members, peer)


class _Records:
    """Records being made (columns of lists), each with the row of the call that places it (-1: none)."""

    COLUMNS = ("row", "group", "collective", "call", "in_nelems", "out_nelems", "dtype", "group_size", "peer", "seq",
               "inferred")

    def __init__(self):
        self.columns: dict[str, list] = {c: [] for c in self.COLUMNS}
        self.places: list[int] = []
        self.receives: list[bool] = []

    def add(self, row: int, place: int, message: _Message, **values) -> None:
        values.update(in_nelems=message.in_nelems, out_nelems=message.out_nelems, dtype=message.dtype,
                      group_size=message.group_size)
        for column in self.COLUMNS:
            self.columns[column].append(row if column == "row" else values[column] if column in values else _DEFAULTS[column])
        self.places.append(place)
        self.receives.append(values.get("collective") == SEND_RECV and "recv" in values.get("call", "").lower())


_DEFAULTS = {"group": "", "collective": UNKNOWN_COLLECTIVE, "call": "", "peer": -1, "seq": -1, "inferred": 0}


def with_collective_records(table: EventTable, captured: list[_Captured], groups: tuple[ProcessGroup, ...],
                            recorder: RecorderWindow | None = None) -> EventTable:
    """A rank's table with one record per collective event (the module docstring says which, and how), the strings
    the records name added to its strings; ``recorder``: the rank's flight-recorder entries of the window, if any
    (the join's counts go to ``metadata.flight_recorder``)."""
    made = _Records()
    _gpu_records(table, captured, made)
    _cpu_records(table, captured, groups, made, recorder)
    if not made.places:
        return table
    phase, bits = call_phases(table, np.array(made.places, dtype=np.int64), np.array(made.receives, dtype=bool))
    strings = list(table.strings)
    codes = {text: code for code, text in enumerate(strings)}

    def code(text: str) -> int:
        if text not in codes:
            codes[text] = len(strings)
            strings.append(text)
        return codes[text]

    columns = made.columns
    records = collective_records(**{**columns, **{c: [code(v) for v in columns[c]]
                                                  for c in ("group", "collective", "call", "dtype")},
                                    "phase": [code(p) for p in phase],
                                    "inferred": np.asarray(columns["inferred"], dtype=np.int32) | bits})
    return replace(table, strings=tuple(strings), collectives=records)


def _gpu_records(table: EventTable, captured: list[_Captured], made: _Records) -> None:
    """A record per NCCL kernel: its own args, else those of the ``record_param_comms`` around its launch."""
    nccl = np.fromiter((bool(NCCL_KERNEL.match(s)) for s in table.strings), dtype=bool, count=len(table.strings))
    on_gpu = np.array([d.kind == "gpu" for d in table.devices] or [False], dtype=bool)
    kernels = np.flatnonzero((table.kind == Kind.COMMUNICATION) & on_gpu[table.device] & nccl[table.name])
    if not len(kernels):
        return
    launch = np.flatnonzero((table.kind == Kind.RUNTIME) & (table.correlation >= 0))
    found = match_correlation(table.correlation[launch], table.correlation[kernels])
    launcher = np.where(found >= 0, launch[np.maximum(found, 0)], -1) if len(launch) else np.full(len(kernels), -1)
    own = {c.row: c for c in captured if c.on_gpu and c.args.collective is not None}
    around = _ParamComms(table, [c for c in captured if not c.on_gpu and table.strings[table.name[c.row]] == PARAM_COMMS])
    launched_in = around.of(launcher)
    coalesced = around.since_previous_launch(launcher, [row not in own and o is None
                                                         for row, o in zip(kernels.tolist(), launched_in)])
    for row, place, outer, block in zip(kernels.tolist(), launcher.tolist(), launched_in, coalesced):
        args = own.get(row, outer)
        if args is None and block:
            message, values = _combined(block)
            made.add(row, place, message, **values)
            continue
        if args is None:  # its type is its name's or its range's (analyzers.classify)
            made.add(row, place, _Message())
            continue
        given = args.args
        call = "" if given.collective is None else str(given.collective)
        message = _args_message(args)
        made.add(row, place, message, group="" if given.group is None else str(given.group),
                 collective=collective_type(call), call=call, seq=_int(given.seq), peer=message.peer)


def _combined(block: list[_Captured]) -> tuple[_Message, dict]:
    """One kernel's record from the ``record_param_comms`` of the operations it carries out together: their
    elements summed; their group, type, dtype and peer where all share one; its call theirs where all are alike,
    else theirs joined (``recv+send``: a send and a receive exchanged with one peer)."""
    messages = [_args_message(c) for c in block]

    def shared(values, empty):
        values = set(values)
        return values.pop() if len(values) == 1 else empty

    calls = sorted({str(c.args.collective) for c in block})
    elements = [m.in_nelems for m in messages], [m.out_nelems for m in messages]
    message = _Message(*(sum(e) if min(e) >= 0 else -1 for e in elements), shared((m.dtype for m in messages), ""),
                       shared((m.group_size for m in messages), -1), shared((m.peer for m in messages), -1))
    group = shared(("" if c.args.group is None else str(c.args.group) for c in block), "")
    return message, dict(group=group, collective=shared(map(collective_type, calls), UNKNOWN_COLLECTIVE),
                         call="+".join(calls), peer=message.peer)


class _ParamComms:
    """The ``record_param_comms`` operators of a trace (the wait-only ones left out), by thread: which holds a time."""

    def __init__(self, table: EventTable, captured: list[_Captured]):
        self.table = table
        kept = sorted((c for c in captured if str(c.args.collective) not in NOT_COLLECTIVES),
                      key=lambda c: table.ts[c.row])
        self.by_lane: dict[tuple[int, int], list[_Captured]] = {}
        for c in kept:
            self.by_lane.setdefault((int(table.device[c.row]), int(table.lane[c.row])), []).append(c)
        self.spans = {lane: (table.ts[[c.row for c in mine]], table.ts[[c.row for c in mine]]
                             + table.dur[[c.row for c in mine]]) for lane, mine in self.by_lane.items()}

    def of(self, places: np.ndarray) -> list[_Captured | None]:
        """For each event row of ``places`` (-1: none), the one on its thread whose span holds its start (the
        latest started), else None."""
        table, found = self.table, [None] * len(places)
        lanes = list(zip(table.device[np.maximum(places, 0)].tolist(), table.lane[np.maximum(places, 0)].tolist()))
        for lane, (starts, ends) in self.spans.items():
            mine = np.flatnonzero((places >= 0) & np.array([l == lane for l in lanes], dtype=bool))
            t = table.ts[places[mine]]
            k = np.searchsorted(starts, t, side="right") - 1
            holds = (k >= 0) & (ends[np.maximum(k, 0)] >= t)
            for at, j in zip(mine[holds].tolist(), k[holds].tolist()):
                found[at] = self.by_lane[lane][j]
        return found

    def since_previous_launch(self, places: np.ndarray, wanted: list[bool]) -> list[list[_Captured]]:
        """For each launch of ``places`` where ``wanted``, those on its thread that started after the thread's
        previous launch among ``places`` and ended before this one (a coalesced launch's operations); else []."""
        table, found = self.table, [[] for _ in range(len(places))]
        ok = places >= 0
        for lane, (starts, ends) in self.spans.items():
            mine = np.flatnonzero(ok & (table.device[np.maximum(places, 0)] == lane[0])
                                  & (table.lane[np.maximum(places, 0)] == lane[1]))
            previous = -np.inf
            for at in mine[np.argsort(table.ts[places[mine]], kind="stable")].tolist():
                t = table.ts[places[at]]
                if wanted[at]:
                    found[at] = [self.by_lane[lane][j] for j in np.flatnonzero((starts > previous) & (ends <= t)).tolist()]
                previous = t
        return found


def _cpu_records(table: EventTable, captured: list[_Captured], groups: tuple[ProcessGroup, ...],
                 made: _Records, recorder: RecorderWindow | None) -> None:
    """A record per collective of a CPU rank: its gloo runs matched to their calls, else its calls."""
    cpu = [table.devices.index(d) for d in table.metadata.host_operator_devices if d in table.devices]
    if not cpu:
        return
    shapes = {c.row: c for c in captured if not c.on_gpu}
    here = np.isin(table.device, cpu) & (table.kind == Kind.COMMUNICATION)
    is_run = np.fromiter((bool(CPU_COLLECTIVE_RUN.match(s)) for s in table.strings), bool, len(table.strings))
    is_call = np.fromiter((bool(CPU_COLLECTIVE_CALL.match(s)) for s in table.strings), bool, len(table.strings))
    runs, calls = np.flatnonzero(here & is_run[table.name]), np.flatnonzero(here & is_call[table.name])
    message = {int(r): _shapes_message(table.strings[table.name[r]], shapes[int(r)]) if int(r) in shapes
               else _Message() for r in np.concatenate([runs, calls]).tolist()}
    pairs = _match_runs(table, runs, calls, message) if len(runs) else [(int(c), int(c)) for c in calls]
    from_recorder = _recorder_groups(table, calls, message, recorder) if recorder is not None else {}
    recorded = _params_inside(table, [c for c in captured if not c.on_gpu
                                      and table.strings[table.name[c.row]] == PARAM_COMMS], calls)
    for call, params in recorded.items():  # the call's own record: its group, members and message
        peer = message[call].peer
        message[call] = _args_message(params)
        message[call].peer = peer
    got_of = {row: message[call] if call >= 0 and message[call].in_nelems >= 0 else message[row] for row, call in pairs}
    group_of = _thread_groups(table, {row: (str(recorded[call].args.group), 0) if call in recorded
                                      and recorded[call].args.group is not None else
                                      (from_recorder[call], GROUP_FROM_RECORDER) if call in from_recorder
                                      else _cpu_group(groups, got_of[row]) for row, call in pairs}, calls)
    for row, call in pairs:
        run_name, call_name = table.strings[table.name[row]], table.strings[table.name[call]] if call >= 0 else ""
        kind = collective_type(call_name or run_name)
        got = got_of[row]
        if not got.dtype:
            got.dtype = message[row].dtype
        group, bits = group_of[row]
        bits |= SHAPES if got.in_nelems >= 0 and call not in recorded else 0
        bits |= OPERATION_FROM_CALL if call_name and kind != collective_type(run_name) else 0
        peer = -1
        if got.peer >= 0:
            members = next((g.ranks for g in groups if g.name == group), ())
            peer, bits = (members[got.peer] if got.peer < len(members) else -1), bits | PEER_FROM_ARGS
        made.add(row, call, got, group=group, collective=kind, call=call_name or run_name, peer=peer,
                 inferred=bits)


def _recorder_groups(table: EventTable, calls: np.ndarray, message: dict[int, _Message],
                     recorder: RecorderWindow) -> dict[int, str]:
    """The group of each call joined to a flight-recorder entry (``recorded_groups.join_calls``), by the call's row;
    the join's counts in the table's ``metadata.flight_recorder``."""
    ordered = calls[np.argsort(table.ts[calls], kind="stable")].tolist()
    base = table.metadata.base_time_ns
    spans = [CallSpan(operation_key(table.strings[table.name[c]], message[c].in_nelems),
                      None if base is None else base + round(table.ts[c] * 1000),
                      None if base is None else base + round((table.ts[c] + table.dur[c]) * 1000)) for c in ordered]
    joined, counts = join_calls(spans, recorder)
    table.metadata.flight_recorder = counts
    return {ordered[i]: entry.group.name for i, entry in joined.items()}


def _params_inside(table: EventTable, params: list[_Captured], calls: np.ndarray) -> dict[int, _Captured]:
    """The ``record_param_comms`` inside each c10d call (on its thread, the first to start within it), by the
    call's row, where the trace records one (as NCCL ranks do)."""
    if not params or not len(calls):
        return {}
    rows = np.array([c.row for c in params], dtype=np.int64)
    lane_of = table.device.astype(np.int64) << 32 | table.lane.astype(np.int64)
    order = np.lexsort((table.ts[rows], lane_of[rows]))
    rows, keys, starts = rows[order], lane_of[rows[order]], table.ts[rows[order]]
    # the first record at or after each call's start, on its lane: search (lane, start) pairs in lane-major order
    call_keys, call_starts = lane_of[calls], table.ts[calls]
    lo = np.searchsorted(keys, call_keys, side="left")
    hi = np.searchsorted(keys, call_keys, side="right")
    found: dict[int, _Captured] = {}
    by_row = {c.row: c for c in params}
    for call, a, b, t, end in zip(calls.tolist(), lo.tolist(), hi.tolist(), call_starts.tolist(),
                                  (call_starts + table.dur[calls]).tolist()):
        k = a + int(np.searchsorted(starts[a:b], t, side="left"))
        if k < b and starts[k] <= end:
            found[call] = by_row[int(rows[k])]
    return found


def _cpu_group(groups: tuple[ProcessGroup, ...], message: _Message) -> tuple[str, int]:
    """A CPU rank's collective's group (gloo records none): the rank's only group, else the only one of its
    message's member count; "" where neither tells."""
    if len(groups) == 1:
        return groups[0].name, GROUP_ONLY_ONE
    sized = [g for g in groups if g.size == message.group_size] if message.group_size > 0 else []
    return (sized[0].name, GROUP_BY_SIZE) if len(sized) == 1 else ("", 0)


def _thread_groups(table: EventTable, found: dict[int, tuple[str, int]], calls: np.ndarray) -> dict[int, tuple[str, int]]:
    """``found`` (row -> group, bits) with the group of a worker thread's known collectives given to its others: a
    gloo process group runs its work on threads of its own (a thread that makes calls is no worker's)."""
    calling = set(table.lane[calls].tolist())
    known: dict[int, set[str]] = {}
    for row, (group, _) in found.items():
        if group:
            known.setdefault(int(table.lane[row]), set()).add(group)
    result = dict(found)
    for row, (group, bits) in found.items():
        lane = int(table.lane[row])
        if not group and lane not in calling and len(known.get(lane, ())) == 1:
            result[row] = (next(iter(known[lane])), bits | GROUP_BY_THREAD)
    return result


def _match_runs(table: EventTable, runs: np.ndarray, calls: np.ndarray,
                message: dict[int, _Message]) -> list[tuple[int, int]]:
    """Each run with the call it carries out (-1: none found): the earliest unmatched call started before it, of a
    type it may carry out and, where both are known, of its input elements (a group's work runs in its order)."""
    calls = calls[np.argsort(table.ts[calls], kind="stable")].tolist()
    pending: list[int] = []
    pairs = []
    for run in runs[np.argsort(table.ts[runs], kind="stable")].tolist():
        while calls and table.ts[calls[0]] <= table.ts[run]:
            pending.append(calls.pop(0))
        kind = collective_type(table.strings[table.name[run]])
        name = table.strings[table.name[run]]
        fits = [c for c in pending if _carries(kind, table.strings[table.name[c]], name)
                and _same_elements(message[c].in_nelems, message[run].in_nelems)]
        call = fits[0] if fits else -1
        if call >= 0:
            pending.remove(call)
        pairs.append((run, call))
    return pairs


def _same_elements(a: int, b: int) -> bool:
    return a < 0 or b < 0 or a == b


def _carries(run_kind: str, call_name: str, run_name: str = "") -> bool:
    """Whether a run of ``run_kind`` (named ``run_name``) may carry out the call named ``call_name``: a send's run
    a send, a receive's a receive."""
    call_kind = collective_type(call_name)
    if run_kind == SEND_RECV == call_kind:
        return p2p_direction(call_name) == p2p_direction(run_name)
    return run_kind == call_kind or run_kind in CARRIED_OUT_AS.get(call_kind, ())
