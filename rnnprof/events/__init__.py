"""One columnar event table for every trace format.

Every loader turns its input into an ``EventTable``: parallel numpy arrays, one
element per event, with strings interned into small tables so that a million
events cost a few tens of MB. Analyzers take an ``EventTable`` and never see the
source format.

Times are microseconds as float64 on the source's own clock; ``time_base_us``
records what zero means so that tables from different sources can be aligned
explicitly before they are merged (see ``concat``). ``metadata`` (``TableMetadata``) holds what the loaders
recorded beside the events. A run directory's manifest, typed, is ``Manifest`` (``events.manifest``).
"""

from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from rnnprof.events.manifest import (Manifest, ManifestDevice, ManifestStepCpu, ManifestStepTimes, StepCpuTime,
                                     seconds_per_step)
from rnnprof.events.collectives import CollectiveRecords, ProcessGroup, concat_collectives
from rnnprof.events.memory import MemoryRecords, concat_records


class Kind(enum.IntEnum):
    """What an event is, mechanically."""

    HOST_OP = 0  # an op or operator run by a host thread (TF executor op, PyTorch cpu_op)
    KERNEL = 1  # a kernel executing on an accelerator stream
    MEMCPY = 2  # a copy: host<->device, device<->device
    MEMSET = 3
    COMMUNICATION = 4  # a collective, NCCL kernel, Send/Recv or all-reduce op
    RUNTIME = 5  # a runtime or driver call (cudaLaunchKernel, ...)
    ANNOTATION = 6  # user ranges, step markers, Python frames


@dataclass(frozen=True, order=True)
class Device:
    """A normalized device: the host CPU, logical CPU k, or GPU k, on one worker.

    ``worker`` names the process the device belongs to: a TF job/task such as
    ``/job:worker/replica:0/task:1``, ``rank3`` for a PyTorch rank, or ``""``
    when the trace holds a single process.
    """

    kind: str  # "host" | "cpu" | "gpu"
    index: int = 0
    worker: str = ""

    @property
    def label(self) -> str:
        base = "host" if self.kind == "host" else f"{self.kind}:{self.index}"
        return f"{self.worker}/{base}" if self.worker else base

    def __str__(self) -> str:
        return self.label


_TF_DEVICE = re.compile(
    r"^(?P<worker>(?:/job:[^/]+)?(?:/replica:\d+)?(?:/task:\d+)?)"
    r"/?(?:device:)?(?P<kind>CPU|GPU|XLA_CPU|XLA_GPU|cpu|gpu)(?::(?P<index>\d+))?",
)


def parse_tf_device(text: str, default_worker: str = "") -> Device | None:
    """Parse a TF device string (``/job:localhost/replica:0/task:0/device:GPU:1``, ``/gpu:0``).

    The local single-process job ``/job:localhost/replica:0/task:0`` becomes worker ``""``.
    Returns None for strings that name no device.
    """
    match = _TF_DEVICE.match(text.strip())
    if not match:
        return None
    kind = match.group("kind").lower().replace("xla_", "")
    worker = match.group("worker") or default_worker
    if worker.startswith("/job:localhost"):
        worker = ""
    return Device(kind=kind, index=int(match.group("index") or 0), worker=worker)


class StringTable:
    """Interns strings to dense int32 codes."""

    def __init__(self, initial: Iterable[str] = ("",)):
        self._codes: dict[str, int] = {}
        self.values: list[str] = []
        # The code of a value seen before, else None; a C function, fast to ``map`` over many values.
        self.known = self._codes.get
        for value in initial:
            self.code(value)

    def code(self, value: str) -> int:
        code = self._codes.get(value)
        if code is None:
            code = self._codes[value] = len(self.values)
            self.values.append(value)
        return code

    def codes(self, values: Iterable[str]) -> np.ndarray:
        return np.fromiter((self.code(v) for v in values), dtype=np.int32)


# -- what a loader records beside the events ------------------------------------------------------------------

@dataclass(frozen=True)
class ClockOffset:
    """A table's clock against the reference: ``t_reference = t_table - offset_us``."""

    source: str  # the table's sources, joined
    workers: tuple[str, ...]
    offset_us: float
    spread_us: float | None = None  # uncertainty of the offset (None: exact or not measured)
    samples: int = 0  # matched collectives it was measured on

    def as_dict(self) -> dict:
        return {"source": self.source, "ranks": list(self.workers), "offset_us": self.offset_us,
                "spread_us": self.spread_us, "collectives": self.samples}


@dataclass(frozen=True)
class Alignment:
    """How a merged table's traces were put on one clock: ``method`` (``concat``'s "absolute" or "start", or
    ``load_aligned``'s "none", "start", "collectives") and the offset applied to each trace (empty: none applied,
    the traces merged on their recorded clocks)."""

    method: str
    offsets: tuple[ClockOffset, ...] = ()

    def as_dict(self) -> dict:
        return {"method": self.method, "offsets": [o.as_dict() for o in self.offsets]}


@dataclass(frozen=True)
class JsonCuts:
    """Pieces of a streamed JSON document decoded after a guessed and after an exactly found cut."""

    guessed: int = 0
    exact: int = 0


@dataclass(frozen=True)
class CollectiveArgs:
    """The args of one worker's GPU events that name their collective (NCCL kernels' ``Process Group Name``,
    ``Seq``, ``Collective name``), by the event's correlation id: parallel tuples."""

    worker: str = ""
    correlation: tuple[int, ...] = ()
    group: tuple[str, ...] = ()
    seq: tuple[int, ...] = ()
    collective: tuple[str, ...] = ()


@dataclass(frozen=True)
class LeftOutExample:
    """One event left out for impossible times (``traces.left_out``): its name, times and reason."""

    name: str
    ts: float
    dur: float
    reason: str


SUM = "sum"  # numbers added; counts by key added key by key; a record of counts added field by field
CONCAT = "concat"  # each part's entries, in order
UNION = "union"  # each part's entries once, in order of appearance; ``{op: names}``: names merged and sorted per op
SHARED = "shared"  # the value every part has, else the empty default


def _merged(rule: str, default=None, factory=None):
    if factory is not None:
        return field(default_factory=factory, metadata={"merge": rule})
    return field(default=default, metadata={"merge": rule})


@dataclass(slots=True)
class TableMetadata:
    """What a table's loaders recorded beside its events, by field; an unknown name is an ``AttributeError``.

    Producers: Kineto traces (``json_bytes``, ``json_cuts``, ``skipped_events``, ``distributed``, ``base_time_ns``,
    ``devices_properties``, ``hostnames``, ``worker_hosts``, ``collective_args``, ``process_groups``,
    ``host_operator_devices``,
    ``outside_steps``, ``flight_recorder``),
    ``traces.left_out`` (``left_out``, ``left_out_examples``), XSpaces (``hostnames``, ``ran_as``), TF Chrome
    timelines (``ran_as``, ``dropped_*``, ``other_data``), ``merge_tables`` and ``load_aligned`` (``alignment``),
    a folder of rank files (``job_notes``), a run directory (``run_dir``, ``status``, ``manifest``, ``missing``,
    ``warnings``). ``concat`` merges the parts' records by each field's rule (``merge_metadata``): SUM, CONCAT,
    UNION or SHARED, as each field says.
    """

    json_bytes: int = _merged(SUM, 0)  # bytes of JSON the Kineto stream read
    json_cuts: JsonCuts = _merged(SUM, JsonCuts())
    skipped_events: int = _merged(SUM, 0)  # Kineto events that are no profiler event (instants, flows, ...)
    distributed: tuple[dict[str, Any], ...] = _merged(CONCAT, ())  # each trace's non-empty ``distributedInfo``
    base_time_ns: int | None = _merged(SHARED)  # Kineto's ``baseTimeNanoseconds``
    devices_properties: tuple[dict[str, Any], ...] = _merged(CONCAT, ())  # Kineto's ``deviceProperties``
    hostnames: tuple[str, ...] = _merged(UNION, ())  # the machines that recorded the trace
    worker_hosts: tuple[tuple[str, str], ...] = _merged(CONCAT, ())  # (worker, the machine its trace names)
    collective_args: tuple[CollectiveArgs, ...] = _merged(CONCAT, ())  # one per worker
    process_groups: tuple[ProcessGroup, ...] = _merged(UNION, ())  # the groups the traces name (events.collectives)
    host_operator_devices: tuple[Device, ...] = _merged(UNION, ())  # CPU ranks: their activity is host operators
    # a CPU rank's flight-recorder entries joined to its calls (traces.recorded_groups): counts by RECORDER_COUNTS
    flight_recorder: dict[str, int] = _merged(SUM, factory=dict)
    outside_steps: dict[str, int] = _merged(SUM, factory=dict)  # GPU events in no step, by ``OUTSIDE_REASONS``
    left_out: dict[str, int] = _merged(SUM, factory=dict)  # events left out for impossible times, by reason
    left_out_examples: tuple[LeftOutExample, ...] = _merged(CONCAT, ())  # the first few of each trace
    ran_as: dict[str, tuple[str, ...]] = _merged(UNION, factory=dict)  # ``{op: kernel names}``, sorted (names.user_op)
    dropped_stream_all: int = _merged(SUM, 0)  # TF kernels of a ``stream:all`` lane also on a stream's lane
    dropped_duplicate_copies: int = _merged(SUM, 0)  # TF kernels that repeat a copy
    other_data: dict[str, Any] = _merged(SHARED, factory=dict)  # a Chrome trace's ``otherData``
    alignment: Alignment | None = _merged(SHARED)  # how a merged table's traces were put on one clock
    job_notes: tuple[str, ...] = _merged(CONCAT, ())  # what a reader of a folder of rank files must know
    run_dir: str = _merged(SHARED, "")
    status: str = _merged(SHARED, "")  # the run's status as its manifest records it
    manifest: Manifest | None = _merged(SHARED)
    missing: tuple[str, ...] = _merged(CONCAT, ())  # timelines the manifest lists that are not there
    warnings: tuple[str, ...] = _merged(CONCAT, ())  # how the run's capture ended, when that matters


def merge_metadata(records: Sequence[TableMetadata]) -> TableMetadata:
    """One record of several tables' (merged tables, or tables analysed apart): each field by its rule."""
    merged = TableMetadata()
    for f in dataclasses.fields(TableMetadata):
        empty = getattr(merged, f.name)
        values = [getattr(r, f.name) for r in records]
        setattr(merged, f.name, _MERGE[f.metadata["merge"]](values, empty))
    return merged


def _sum(values: list, empty):
    if isinstance(empty, dict):
        total: dict = {}
        for counts in values:
            for key, n in counts.items():
                total[key] = total.get(key, 0) + n
        return total
    if dataclasses.is_dataclass(empty):
        return type(empty)(*(sum(getattr(v, f.name) for v in values) for f in dataclasses.fields(empty)))
    return sum(values, empty)


def _union(values: list, empty):
    if isinstance(empty, dict):
        names: dict[str, set] = {}
        for mapping in values:
            for key, items in mapping.items():
                names.setdefault(key, set()).update(items)
        return {key: tuple(sorted(items)) for key, items in sorted(names.items())}
    return tuple(dict.fromkeys(item for items in values for item in items))


def _shared(values: list, empty):
    return values[0] if values and all(v == values[0] for v in values) else empty


_MERGE = {SUM: _sum, CONCAT: lambda values, empty: tuple(item for items in values for item in items),
          UNION: _union, SHARED: _shared}


@dataclass(frozen=True)
class EventTable:
    """Parallel arrays, one element per event. Strings are codes into ``strings``.

    Columns: ``ts``/``dur`` (µs, float64), ``name``/``op_type``/``lane`` (int32 codes into
    ``strings``), ``device`` (int16 index into ``devices``), ``kind`` (int8 ``Kind``),
    ``step`` (int32, -1 when unknown), ``correlation`` (int64, -1 when none),
    ``nbytes`` (int64, -1 when unknown). ``memory``: the allocator's records beside the events (``events.memory``);
    ``collectives``: what each collective event is, by row (``events.collectives``).
    """

    ts: np.ndarray
    dur: np.ndarray
    name: np.ndarray
    op_type: np.ndarray
    device: np.ndarray
    lane: np.ndarray
    kind: np.ndarray
    step: np.ndarray
    correlation: np.ndarray
    nbytes: np.ndarray
    strings: tuple[str, ...]
    devices: tuple[Device, ...]
    source_format: str = ""
    sources: tuple[str, ...] = ()
    time_base_us: float = 0.0
    metadata: TableMetadata = field(default_factory=TableMetadata, compare=False)
    memory: MemoryRecords = field(default_factory=MemoryRecords, compare=False)
    collectives: CollectiveRecords = field(default_factory=CollectiveRecords, compare=False)

    COLUMNS = ("ts", "dur", "name", "op_type", "device", "lane", "kind", "step", "correlation", "nbytes")

    def __post_init__(self) -> None:
        n = len(self.ts)
        for column in self.COLUMNS:
            if len(getattr(self, column)) != n:
                raise ValueError(f"column {column} has {len(getattr(self, column))} rows, expected {n}")

    def __len__(self) -> int:
        return len(self.ts)

    @property
    def end(self) -> np.ndarray:
        return self.ts + self.dur

    def text(self, codes: np.ndarray | int) -> np.ndarray | str:
        """Decode string codes (a column or one code) back to text."""
        if np.isscalar(codes):
            return self.strings[int(codes)]
        return np.asarray(self.strings, dtype=object)[np.asarray(codes)]

    def code_of(self, value: str) -> int:
        """The code of ``value``, or -1 when no event uses it."""
        try:
            return self.strings.index(value)
        except ValueError:
            return -1

    def select(self, mask: np.ndarray) -> "EventTable":
        """The events where ``mask`` is true; string and device tables are shared."""
        kwargs = {c: getattr(self, c)[mask] for c in self.COLUMNS}
        return EventTable(
            **kwargs,
            strings=self.strings,
            devices=self.devices,
            source_format=self.source_format,
            sources=self.sources,
            time_base_us=self.time_base_us,
            metadata=self.metadata,
            memory=self.memory,
            collectives=self.collectives.selected(mask, len(self)),
        )

    def of_kind(self, *kinds: Kind) -> "EventTable":
        return self.select(np.isin(self.kind, np.array([int(k) for k in kinds], dtype=np.int8)))

    def on_device(self, device: Device) -> "EventTable":
        return self.select(self.device == self.devices.index(device))

    def worker_codes(self) -> np.ndarray:
        """Per device, a number for its worker, in the order the workers first appear (a rank's devices share it)."""
        workers: dict[str, int] = {}
        return np.array([workers.setdefault(d.worker, len(workers)) for d in self.devices] or [0], dtype=np.int64)

    def process_correlation(self) -> np.ndarray:
        """``correlation`` unique across a merged table's processes (Kineto's ids are per process); -1 stays -1."""
        workers = len({d.worker for d in self.devices})
        if workers <= 1:
            return self.correlation
        return np.where(self.correlation >= 0, self.correlation * workers + self.worker_codes()[self.device], -1)

    def steps(self) -> np.ndarray:
        """Known step numbers, sorted."""
        values = np.unique(self.step)
        return values[values >= 0]


_DTYPES = {
    "ts": np.float64,
    "dur": np.float64,
    "name": np.int32,
    "op_type": np.int32,
    "device": np.int16,
    "lane": np.int32,
    "kind": np.int8,
    "step": np.int32,
    "correlation": np.int64,
    "nbytes": np.int64,
}


class EventTableBuilder:
    """Accumulates events one at a time (or a column chunk at a time) and builds a table."""

    def __init__(self, source_format: str, sources: Sequence[str] = ()):
        self.source_format = source_format
        self.sources = tuple(str(s) for s in sources)
        self.strings = StringTable()
        self._devices: dict[Device, int] = {}
        self._columns: dict[str, list] = {c: [] for c in EventTable.COLUMNS}
        self._chunks: list[dict[str, np.ndarray]] = []
        self._chunk_rows = 0
        self.metadata = TableMetadata()
        self.memory = MemoryRecords()

    def device_code(self, device: Device) -> int:
        code = self._devices.get(device)
        if code is None:
            code = self._devices[device] = len(self._devices)
        return code

    def add(
        self,
        ts: float,
        dur: float,
        name: str,
        op_type: str,
        device: Device,
        lane: str,
        kind: Kind,
        step: int = -1,
        correlation: int = -1,
        nbytes: int = -1,
    ) -> None:
        c = self._columns
        code = self.strings.code
        c["ts"].append(ts)
        c["dur"].append(dur)
        c["name"].append(code(name))
        c["op_type"].append(code(op_type))
        c["device"].append(self.device_code(device))
        c["lane"].append(code(lane))
        c["kind"].append(int(kind))
        c["step"].append(step)
        c["correlation"].append(correlation)
        c["nbytes"].append(nbytes)

    def add_columns(
        self,
        *,
        ts,
        dur,
        name,
        op_type,
        device,
        lane,
        kind,
        step=-1,
        correlation=-1,
        nbytes=-1,
    ) -> None:
        """Append a chunk of events at once (the fast path for large traces).

        Numeric columns are arrays or scalars (broadcast). String columns are
        sequences of ``str`` or int arrays of codes from ``self.strings``;
        ``device`` is a ``Device``, a sequence of them, or codes from ``device_code``.
        """
        n = len(ts)
        if n == 0:
            return
        self._flush_rows()
        chunk = {"ts": np.asarray(ts, dtype=np.float64)}
        for column, value in (("name", name), ("op_type", op_type), ("lane", lane)):
            chunk[column] = self._string_column(value, n)
        if isinstance(device, Device):
            chunk["device"] = np.full(n, self.device_code(device), dtype=np.int16)
        elif len(device) and isinstance(device[0], Device):
            chunk["device"] = np.fromiter((self.device_code(d) for d in device), dtype=np.int16, count=n)
        else:
            chunk["device"] = np.asarray(device, dtype=np.int16)
        for column, value in (("dur", dur), ("kind", kind), ("step", step),
                              ("correlation", correlation), ("nbytes", nbytes)):
            dtype = _DTYPES[column]
            chunk[column] = np.full(n, value, dtype=dtype) if np.isscalar(value) else np.asarray(value, dtype=dtype)
        for column, values in chunk.items():
            if len(values) != n:
                raise ValueError(f"column {column} has {len(values)} rows, expected {n}")
        self._chunks.append(chunk)
        self._chunk_rows += n

    def _string_column(self, value, n: int) -> np.ndarray:
        if isinstance(value, str):
            return np.full(n, self.strings.code(value), dtype=np.int32)
        if isinstance(value, np.ndarray) and value.dtype.kind in "iu":
            return value.astype(np.int32, copy=False)
        return self.strings.codes(value)

    def _flush_rows(self) -> None:
        c = self._columns
        if c["ts"]:
            self._chunks.append({col: np.asarray(c[col], dtype=_DTYPES[col]) for col in EventTable.COLUMNS})
            self._chunk_rows += len(c["ts"])
            self._columns = {col: [] for col in EventTable.COLUMNS}

    def __len__(self) -> int:
        return len(self._columns["ts"]) + self._chunk_rows

    def build(self, time_base_us: float = 0.0) -> EventTable:
        self._flush_rows()
        columns = {
            col: (np.concatenate([chunk[col] for chunk in self._chunks]) if self._chunks
                  else np.zeros(0, dtype=_DTYPES[col]))
            for col in EventTable.COLUMNS
        }
        return EventTable(
            **columns,
            strings=tuple(self.strings.values),
            devices=tuple(self._devices),
            source_format=self.source_format,
            sources=self.sources,
            time_base_us=time_base_us,
            metadata=dataclasses.replace(self.metadata),
            memory=self.memory,
        )


# Why a trace's GPU work is in no step: the keys of a loader's ``metadata.outside_steps`` (counts of GPU
# kernels, copies and memsets), written where a trace has step markers.
OUTSIDE_NO_LAUNCH = "no_launch_in_trace"  # its runtime call (by correlation id) is not in the trace
OUTSIDE_LAUNCH = "launched_outside_steps"  # its runtime call lies outside every step marker
OUTSIDE_REASONS = (OUTSIDE_NO_LAUNCH, OUTSIDE_LAUNCH)


def outside_steps(table: EventTable) -> dict[str, int]:
    """GPU events in no step, by reason, as the loaders counted them (summed over a merged table's parts);
    empty when no loader counted any (no step markers, or a format whose GPU work has no launch link)."""
    found = table.metadata.outside_steps
    return {reason: found[reason] for reason in OUTSIDE_REASONS if reason in found}


def steps_in_spans(ts: np.ndarray, spans: Sequence[tuple[float, float, int]]) -> np.ndarray:
    """The step of each timestamp: the number of the ``(start, end, step)`` span it falls in, else -1.

    Spans are step markers (``ProfilerStep#N``, ``step_num`` ranges); when they overlap, the one
    that started last wins.
    """
    if not len(spans):
        return np.full(len(ts), -1, dtype=np.int32)
    spans = sorted(spans)
    starts = np.array([s[0] for s in spans], dtype=np.float64)
    ends = np.array([s[1] for s in spans], dtype=np.float64)
    numbers = np.array([s[2] for s in spans], dtype=np.int32)
    idx = np.searchsorted(starts, ts, side="right") - 1
    safe = np.maximum(idx, 0)
    inside = (idx >= 0) & (ts < ends[safe])
    return np.where(inside, numbers[safe], -1).astype(np.int32)


def match_correlation(keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """For each query id, the index of an element of ``keys`` with the same correlation id, else -1.

    Links a launch (runtime call) with the GPU work it started, in either direction.
    """
    if len(keys) == 0 or len(queries) == 0:
        return np.full(len(queries), -1, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    pos = np.minimum(np.searchsorted(sorted_keys, queries), len(sorted_keys) - 1)
    return np.where((sorted_keys[pos] == queries) & (queries >= 0), order[pos], -1)


def concat(tables: Sequence[EventTable], align: str = "absolute") -> EventTable:
    """Merge tables from several sources into one.

    ``align="absolute"`` puts every table on a common clock by adding its
    ``time_base_us`` (use when the sources share a wall clock, e.g. ranks of one
    job). ``align="start"`` shifts each table so its first event is at 0 (use when
    the clocks are unrelated). Strings and devices are re-coded into shared tables; the metadata is the
    tables' records merged field by field (``merge_metadata``: counts added, lists joined, a value all share kept).
    """
    if not tables:
        raise ValueError("concat needs at least one table")
    if align not in ("absolute", "start"):
        raise ValueError(f"unknown alignment {align!r}")
    strings = StringTable()
    devices: dict[Device, int] = {}
    parts: dict[str, list[np.ndarray]] = {c: [] for c in EventTable.COLUMNS}
    memory, collectives, rows = [], [], 0
    base = min(t.time_base_us for t in tables) if align == "absolute" else 0.0
    for table in tables:
        string_map = np.array([strings.code(s) for s in table.strings], dtype=np.int32)
        device_map = np.array([devices.setdefault(d, len(devices)) for d in table.devices] or [0], dtype=np.int16)
        if align == "absolute":
            shift = table.time_base_us - base
        else:
            shift = -float(table.ts.min()) if len(table) else 0.0
        for column in EventTable.COLUMNS:
            values = getattr(table, column)
            if column in ("name", "op_type", "lane"):
                values = string_map[values]
            elif column == "device":
                values = device_map[values]
            elif column == "ts":
                values = values + shift
            parts[column].append(values)
        memory.append(table.memory.remapped(device_map, string_map).shifted(shift))
        collectives.append(table.collectives.remapped(rows, string_map))
        rows += len(table)
    formats = sorted({t.source_format for t in tables})
    return EventTable(
        **{c: np.concatenate(v) for c, v in parts.items()},
        strings=tuple(strings.values),
        devices=tuple(devices),
        source_format="+".join(formats),
        sources=tuple(s for t in tables for s in t.sources),
        time_base_us=base,
        metadata=merge_metadata([t.metadata for t in tables]),
        memory=concat_records(memory),
        collectives=concat_collectives(collectives),
    )


__all__ = ["Alignment", "ClockOffset", "CollectiveArgs", "CollectiveRecords", "Device", "EventTable", "EventTableBuilder", "JsonCuts", "Kind",
           "LeftOutExample", "Manifest", "MemoryRecords", "ManifestDevice", "ManifestStepCpu", "ManifestStepTimes", "OUTSIDE_LAUNCH",
           "OUTSIDE_NO_LAUNCH", "OUTSIDE_REASONS", "ProcessGroup", "StepCpuTime", "StringTable", "TableMetadata", "concat",
           "match_correlation", "merge_metadata", "outside_steps", "parse_tf_device", "seconds_per_step",
           "steps_in_spans"]
