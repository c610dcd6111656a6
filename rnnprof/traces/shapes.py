"""The recorded shapes of a Kineto trace's operators, and its collectives' message sizes: a side table.

The event table (``rnnprof.traces.kineto``) keeps times, names and correlation ids; the roofline needs
what ``record_shapes=True`` adds to each ``cpu_op`` (``Input Dims``, ``Input type``, ``Concrete Inputs``) and
what newer Kineto puts on collectives (``In msg nelems``, ``Out msg nelems``, ``Group size``, ``dtype``,
``Process Group Name``, ``Collective name``, on ``record_param_comms`` operators and on NCCL kernels). This
module reads those, streaming the file once, into an ``OpShapes``: per operator with shapes its signature (name
and inputs, decoded once per distinct signature) and, given the trace's event table, its thread (the table's lane
code) and interval; per communication kernel (by correlation id) its message.

Times and threads come from the event table, not from a second decoding of them: the k-th ``cpu_op`` of the
file is the table's k-th host operator (the loader keeps the file's order and leaves out only events of
impossible times). When the table's host operators are not the file's (their count or names differ), the file
is read again with times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from rnnprof.events import EventTable, Kind
from rnnprof.traces.jsonstream import EventStream, read_prefix


_ABSENT = msgspec.Raw(b"")


class _Args(msgspec.Struct, gc=False):
    # kept as raw JSON: an operator's shapes are decoded once per distinct (name, shapes) signature
    dims: msgspec.Raw = msgspec.field(name="Input Dims", default=_ABSENT)
    types: msgspec.Raw = msgspec.field(name="Input type", default=_ABSENT)
    concrete: msgspec.Raw = msgspec.field(name="Concrete Inputs", default=_ABSENT)
    correlation: Any = None
    in_nelems: Any = msgspec.field(name="In msg nelems", default=None)
    out_nelems: Any = msgspec.field(name="Out msg nelems", default=None)
    group_size: Any = msgspec.field(name="Group size", default=None)
    dtype: Any = None
    group: Any = msgspec.field(name="Process Group Name", default=None)
    collective: Any = msgspec.field(name="Collective name", default=None)


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    args: _Args | None = None


class _TimedEvent(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    tid: Any = 0
    ts: Any = 0.0
    dur: Any = 0.0


_DECODER = msgspec.json.Decoder(list[_Event])
_TIMED_DECODER = msgspec.json.Decoder(list[_TimedEvent])


@dataclass(frozen=True)
class Message:
    """One collective's message as recorded: elements in and out, the group's size, dtype and name."""

    in_nelems: int
    out_nelems: int
    group_size: int
    dtype: str
    group: str
    collective: str


@dataclass(frozen=True)
class Signature:
    """An operator's name and its recorded inputs: ``Input Dims``, ``Input type``, ``Concrete Inputs``."""

    name: str
    dims: list
    types: list
    concrete: list | None


@dataclass
class OpShapes:
    """Operators with recorded shapes: per operator its signature, thread and interval; and collectives' messages.

    Operators of one signature (name and inputs) share one ``Signature``: a training step repeats its
    operators' shapes, so there are far fewer signatures than operators.
    """

    signatures: list[Signature] = field(default_factory=list)
    sig: list[int] = field(default_factory=list)  # per operator: its index in ``signatures``
    ordinal: list[int] = field(default_factory=list)  # per operator: its position among the file's cpu_ops
    # per operator, once placed on an event table (``load_shapes(path, table)``): its lane (a code of the
    # table's strings), start and duration
    lane: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    ts: np.ndarray = field(default_factory=lambda: np.zeros(0))
    dur: np.ndarray = field(default_factory=lambda: np.zeros(0))
    times_from: str = ""  # "table" or "file" (read again)
    # per operator: its step (the table's, -1 when read from the file); own_time: an operator's own duration is
    # its work (a TensorFlow run's kernels), no GPU activity is attributed to it
    step: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    own_time: bool = False
    # operator row -> its collective message (record_param_comms and the c10d operators that carry one)
    op_messages: dict[int, Message] = field(default_factory=dict)
    # kernel correlation id -> the collective message the kernel carries
    kernel_messages: dict[int, Message] = field(default_factory=dict)
    operators: int = 0  # every cpu_op seen, with shapes or not

    def __len__(self) -> int:
        return len(self.sig)

    def rows(self):
        """(name, dims, types, concrete) per operator."""
        for k in self.sig:
            s = self.signatures[k]
            yield s.name, s.dims, s.types, s.concrete


def _int(value, default: int = -1) -> int:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return default


def _message(a: _Args) -> Message | None:
    if a.in_nelems is None and a.out_nelems is None:
        return None
    return Message(_int(a.in_nelems, 0), _int(a.out_nelems, 0), _int(a.group_size, 0),
                   "" if a.dtype is None else str(a.dtype), "" if a.group is None else str(a.group),
                   "" if a.collective is None else str(a.collective))


_FINITE = math.isfinite


def _number(value) -> float | None:
    if type(value) is float:
        return value if _FINITE(value) else None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if _FINITE(number) else None


_RAW_DECODE = msgspec.json.decode


def _decoded(raw) -> Any:
    if not len(raw):
        return None
    try:
        return _RAW_DECODE(raw)
    except msgspec.DecodeError:
        return None


def _signature(shapes: OpShapes, key: tuple, a: _Args) -> int:
    """A new signature's index (-1 when its ``Input Dims`` is not a list)."""
    dims, types, concrete = _decoded(a.dims), _decoded(a.types), _decoded(a.concrete)
    if not isinstance(dims, list):
        return -1
    shapes.signatures.append(Signature(key[0], dims, types if isinstance(types, list) else [],
                                       concrete if isinstance(concrete, list) else None))
    return len(shapes.signatures) - 1


_PREFIX_BYTES = 1 << 20
_PREFIX_OPERATORS = 50


def recorded_without_shapes(path: str | Path) -> bool:
    """The trace was recorded without ``record_shapes``: its first MB holds many operators (50 or more) and
    none with ``Input Dims`` (with shapes recorded, nearly every operator has them). A cheap look before
    streaming the whole file for shapes it does not have."""
    prefix = read_prefix(Path(path), _PREFIX_BYTES)
    return prefix.count(b'"cpu_op"') >= _PREFIX_OPERATORS and b'"Input Dims"' not in prefix


def load_shapes(path: str | Path, table: EventTable | None = None) -> OpShapes:
    """The shapes and messages of a Kineto trace (plain or gzip JSON); with ``table`` (the trace's event table,
    before any selection), each operator's lane, start and duration too."""
    shapes = OpShapes()
    index: dict[tuple, int] = {}
    sig, ordinal = shapes.sig, shapes.ordinal
    seen = 0
    for chunk in EventStream(Path(path), _DECODER.decode):
        for e in chunk:
            cat = e.cat
            if cat == "cpu_op":
                if e.ph != "X":
                    continue
                seen += 1
                a = e.args
                if a is None or not len(a.dims):
                    continue
                key = (e.name, bytes(a.dims), bytes(a.types), bytes(a.concrete))
                k = index.get(key)
                if k is None:
                    k = index[key] = _signature(shapes, key, a)
                if k < 0:
                    continue
                if a.in_nelems is not None:
                    message = _message(a)
                    if message is not None:
                        shapes.op_messages[len(sig)] = message
                sig.append(k)
                ordinal.append(seen - 1)
            elif cat == "kernel" and e.args is not None and e.args.in_nelems is not None and e.ph == "X":
                message = _message(e.args)
                correlation = _int(e.args.correlation)
                if message is not None and correlation >= 0:
                    shapes.kernel_messages[correlation] = message
    shapes.operators = seen
    if table is not None:
        _place(shapes, table, Path(path))
    return shapes


def _place(shapes: OpShapes, table: EventTable, path: Path) -> None:
    """Each operator's lane, start and duration: the table's host operator of the same position, or (when the
    table's host operators are not the file's) the file's own, read again."""
    host = np.flatnonzero(table.kind == Kind.HOST_OP)
    ordinal = np.asarray(shapes.ordinal, dtype=np.int64)
    if len(host) == shapes.operators:
        rows = host[ordinal]
        codes = np.array([table.code_of(g.name) for g in shapes.signatures] or [-1], dtype=np.int64)
        if np.array_equal(table.name[rows], codes[np.asarray(shapes.sig, dtype=np.int64)]) if len(rows) else True:
            shapes.lane, shapes.ts, shapes.dur = table.lane[rows], table.ts[rows], table.dur[rows]
            shapes.step = table.step[rows]
            shapes.times_from = "table"
            return
    lanes, starts, durs = [], [], []
    for chunk in EventStream(path, _TIMED_DECODER.decode):
        for e in chunk:
            if e.cat == "cpu_op" and e.ph == "X":
                lanes.append(e.tid if type(e.tid) is str else str(e.tid))
                starts.append(_number(e.ts))
                durs.append(_number(e.dur))
    codes = {text: code for code, text in enumerate(table.strings)}
    lane = np.array([codes.get(lanes[k], -1) for k in ordinal], dtype=np.int64)
    ts = np.array([starts[k] if starts[k] is not None else np.nan for k in ordinal], dtype=np.float64)
    dur = np.array([durs[k] if durs[k] is not None else np.nan for k in ordinal], dtype=np.float64)
    bad = ~np.isfinite(ts) | ~np.isfinite(dur) | (dur < 0)
    lane[bad] = -1  # an operator of impossible times is placed nowhere
    shapes.lane, shapes.ts, shapes.dur = lane, np.where(bad, 0.0, ts), np.where(bad, 0.0, dur)
    shapes.step = np.full(len(ordinal), -1, dtype=np.int64)
    shapes.times_from = "file"
