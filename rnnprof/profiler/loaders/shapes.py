"""The recorded shapes of a Kineto trace's operators, and its collectives' message sizes: a side table.

The event table (``rnnprof.profiler.loaders.kineto``) keeps times, names and correlation ids; the roofline needs
what ``record_shapes=True`` adds to each ``cpu_op`` (``Input Dims``, ``Input type``, ``Concrete Inputs``) and
what newer Kineto puts on collectives (``In msg nelems``, ``Out msg nelems``, ``Group size``, ``dtype``,
``Process Group Name``, ``Collective name``, on ``record_param_comms`` operators and on NCCL kernels). This
module reads those, streaming the file once, into an ``OpShapes`` whose rows are keyed as the event table's
are: an operator by its thread (``lane``, the text the event table uses) and its interval, a kernel by its
correlation id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from rnnprof.profiler.loaders.jsonstream import EventStream


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
    tid: Any = 0
    ts: Any = 0.0
    dur: Any = 0.0
    args: _Args | None = None


_DECODER = msgspec.json.Decoder(list[_Event])


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
    lane: list[str] = field(default_factory=list)
    ts: list[float] = field(default_factory=list)
    dur: list[float] = field(default_factory=list)
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


def _number(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if np.isfinite(number) else None


_RAW_DECODE = msgspec.json.decode


def _decoded(raw) -> Any:
    if not len(raw):
        return None
    try:
        return _RAW_DECODE(raw)
    except msgspec.DecodeError:
        return None


def load_shapes(path: str | Path) -> OpShapes:
    """The shapes and messages of a Kineto trace (plain or gzip JSON)."""
    shapes = OpShapes()
    index: dict[tuple, int] = {}
    sig, lane, ts_list, dur_list = shapes.sig, shapes.lane, shapes.ts, shapes.dur
    for chunk in EventStream(Path(path), _DECODER.decode):
        for e in chunk:
            if e.ph != "X":
                continue
            a = e.args
            if e.cat == "cpu_op":
                shapes.operators += 1
                if a is None or not len(a.dims):
                    continue
                ts, dur = _number(e.ts), _number(e.dur)
                if ts is None or dur is None or dur < 0:
                    continue
                key = (e.name, bytes(a.dims), bytes(a.types), bytes(a.concrete))
                k = index.get(key)
                if k is None:
                    dims, types, concrete = _decoded(a.dims), _decoded(a.types), _decoded(a.concrete)
                    if not isinstance(dims, list):
                        index[key] = k = -1
                    else:
                        k = index[key] = len(shapes.signatures)
                        shapes.signatures.append(Signature(e.name, dims, types if isinstance(types, list) else [],
                                                           concrete if isinstance(concrete, list) else None))
                if k < 0:
                    continue
                message = _message(a)
                if message is not None:
                    shapes.op_messages[len(sig)] = message
                sig.append(k)
                lane.append(str(e.tid))
                ts_list.append(ts)
                dur_list.append(dur)
            elif e.cat == "kernel" and a is not None and a.in_nelems is not None:
                message = _message(a)
                correlation = _int(a.correlation)
                if message is not None and correlation >= 0:
                    shapes.kernel_messages[correlation] = message
    return shapes
