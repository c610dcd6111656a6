"""PyTorch profiler (Kineto) JSON traces, plain or gzip, streamed chunk by chunk, into an ``EventTable``.

Mapping: ``cpu_op`` -> HOST_OP, ``cuda_runtime``/``cuda_driver`` -> RUNTIME, ``kernel`` -> KERNEL (NCCL kernels
-> COMMUNICATION), ``gpu_memcpy``/``gpu_memset`` -> MEMCPY/MEMSET, annotations -> ANNOTATION; other categories
are skipped. GPU events sit on ``Device("gpu", args.device or pid)``, host events on ``Device("host")``, on
worker ``rank<r>`` when the trace has ``distributedInfo``; lanes are thread ids or ``stream:<n>``. Steps come
from ``ProfilerStep#N``: host events by their start, GPU work through its launch's correlation id (a graph's
kernels through their graph launch); the rest is counted in ``metadata.outside_steps``.

A rank without GPU events or runtime calls (gloo) has its ``cpu_op``s on ``Device("cpu", 0, "rank<r>")`` and its
collectives (``names.CPU_COLLECTIVE``) as COMMUNICATION (``metadata.host_operator_devices``). NCCL kernels'
``Process Group Name``, ``Seq`` and ``Collective name`` are kept in ``metadata.collective_args`` for
matching and typing collectives. The format as the user reads it: docs/formats.md.
"""

from __future__ import annotations

import dataclasses
import re
import struct
from pathlib import Path
from typing import Any, Callable, Iterable

import msgspec
import numpy as np

from rnnprof.errors import InputError
from rnnprof.events.names import CPU_COLLECTIVE, NCCL_KERNEL, STEP_MARKER
from rnnprof.events import (OUTSIDE_LAUNCH, OUTSIDE_NO_LAUNCH, CollectiveArgs, Device, EventTable,
                            EventTableBuilder, JsonCuts, Kind, TableMetadata, match_correlation, steps_in_spans)
from rnnprof.traces.jsonstream import EventStream
from rnnprof.traces.kineto_collectives import CollectiveArgsReader, process_groups, with_collective_records
from rnnprof.traces.kineto_memory import MEMORY_EVENT, MemoryReader
from rnnprof.traces.recorded_groups import read_window
from rnnprof.traces.memo import remembered

FORMAT = "kineto"

CATEGORY_KIND = {
    "cpu_op": Kind.HOST_OP,
    "cuda_runtime": Kind.RUNTIME,
    "cuda_driver": Kind.RUNTIME,
    "kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "user_annotation": Kind.ANNOTATION,
    "python_function": Kind.ANNOTATION,
    "gpu_user_annotation": Kind.ANNOTATION,
}
_KIND_CODE = {cat: int(kind) for cat, kind in CATEGORY_KIND.items()}
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"})
# Markers that only a Kineto trace carries; checked on the first bytes of the content.
SIGNATURES = (b'"schemaVersion"', b'"distributedInfo"', b'"deviceProperties"', b'"cpu_op"',
              b'"cuda_runtime"', b'"python_function"', b'"user_annotation"', b'"gpu_memcpy"',
              b'"ac2g"', b'"kernel"')


class _Args(msgspec.Struct, gc=False):
    device: int | float | str | None = None  # scalars only: both become dict keys
    stream: int | float | str | None = None
    correlation: Any = None
    external_id: Any = msgspec.field(name="External id", default=None)
    bytes: Any = None
    # a collective's identity (newer Kineto, on NCCL kernels): its process group and sequence number
    group: Any = msgspec.field(name="Process Group Name", default=None)
    seq: Any = msgspec.field(name="Seq", default=None)
    collective: Any = msgspec.field(name="Collective name", default=None)  # allreduce, broadcast, ...
    pg_ranks: Any = msgspec.field(name="Process Group Ranks", default=None)
    pg_desc: Any = msgspec.field(name="Process Group Description", default=None)
    in_nelems: Any = msgspec.field(name="In msg nelems", default=None)
    out_nelems: Any = msgspec.field(name="Out msg nelems", default=None)
    dtype: Any = None
    group_size: Any = msgspec.field(name="Group size", default=None)
    # a send's or a receive's peer, its group-local rank (``record_param_comms`` of ``send``/``recv``)
    dst_rank: Any = msgspec.field(name="Dst Rank", default=None)
    src_rank: Any = msgspec.field(name="Src Rank", default=None)
    # a CPU rank's collective calls and runs: their recorded shapes, kept raw (kineto_collectives decodes them)
    dims: msgspec.Raw = msgspec.field(name="Input Dims", default=msgspec.Raw(b""))
    types: msgspec.Raw = msgspec.field(name="Input type", default=msgspec.Raw(b""))
    concrete: msgspec.Raw = msgspec.field(name="Concrete Inputs", default=msgspec.Raw(b""))
    # an allocator's record (``[memory]`` instant events): kineto_memory
    mem_bytes: Any = msgspec.field(name="Bytes", default=None)
    addr: Any = msgspec.field(name="Addr", default=None)
    total_allocated: Any = msgspec.field(name="Total Allocated", default=None)
    total_reserved: Any = msgspec.field(name="Total Reserved", default=None)
    device_type: Any = msgspec.field(name="Device Type", default=None)
    device_id: Any = msgspec.field(name="Device Id", default=None)


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Any = 0
    tid: Any = 0
    ts: float = 0.0
    dur: float = 0.0
    args: _Args | None = None


class _DecodedArgs(_Args, gc=False):
    """``_Args`` of a document already decoded (``load_decoded``): its shapes are Python values, not raw JSON."""

    dims: Any = msgspec.field(name="Input Dims", default=None)
    types: Any = msgspec.field(name="Input type", default=None)
    concrete: Any = msgspec.field(name="Concrete Inputs", default=None)


class _DecodedEvent(_Event, gc=False):
    args: _DecodedArgs | None = None


_DECODER = msgspec.json.Decoder(list[_Event])
_DECODED_PIECE = 1024  # events per column pass when converting an already decoded document
_NO_ARGS = _Args()


def looks_like(prefix: bytes) -> bool:
    return prefix.lstrip().startswith(b"{") and sum(s in prefix for s in SIGNATURES) >= 2


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _int(value, default: int = -1) -> int:
    """An integer field (id, stream, bytes); ``default`` (unknown) where it is not a number or does not fit in
    int64 (``1e30``, ``Infinity``)."""
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return default
    return number if _INT64[0] <= number <= _INT64[1] else default


def sniff(probe) -> bool:
    return not probe.is_dir and looks_like(probe.prefix)


def parse(path: Path) -> None:
    """None: nothing is parsed up front, as ``events`` streams the file, decoding it once, piece by piece."""
    return None


def events(path: Path, _parsed: None = None) -> EventTable:
    return load(path)


def load_kept(path: Path) -> EventTable:
    """``load``, or the table the active memo kept of ``path`` (``traces.memo``): a run directory's rank traces,
    read merged by one analysis and as a job's rank files by another, are read once."""
    return remembered("kineto", path, lambda: load(path))


def load(path: Path, block_bytes: int | None = None, piece_bytes: int | None = None) -> EventTable:
    """Load a Kineto trace; ``block_bytes``/``piece_bytes`` override the stream's read and decode sizes.

    Each column is one comprehension over a piece's events (~64 KB of JSON, a few hundred
    events), packed into bytes there: the decoded piece stays in the CPU cache, which is what makes
    this fast (pieces of 1 MB measured slower). Reading typed structs out with ``map``/``attrgetter``
    measured no faster; msgspec's decode is about two thirds of the time.
    """
    path = Path(path)
    sizes = {k: v for k, v in (("block_bytes", block_bytes), ("piece_bytes", piece_bytes)) if v}
    stream = EventStream(path, _DECODER.decode, **sizes)
    table = _build(path, stream, lambda: stream.header)
    table.metadata.json_bytes = stream.bytes_read
    table.metadata.json_cuts = JsonCuts(**stream.cuts)
    return table


def load_decoded(path: Path, trace_events: list, header: dict) -> EventTable:
    """A Kineto trace already decoded as plain JSON (recognised only once decoded): its events are
    converted to the loader's records, not decoded again; ``header`` holds the document's other keys."""
    try:
        records = msgspec.convert(trace_events, list[_DecodedEvent])
    except msgspec.ValidationError as exc:
        raise InputError(path, f"malformed trace event ({exc})", "Chrome trace events") from None
    pieces = (records[k:k + _DECODED_PIECE] for k in range(0, len(records), _DECODED_PIECE))
    return _build(path, pieces, lambda: header)


def _build(path: Path, chunks: Iterable[list], header_of: Callable[[], dict]) -> EventTable:
    """The table of the events in ``chunks``; ``header_of()`` (called after them) gives the document's other keys.

    A chunk's events are read in a few list comprehensions while they are in the CPU cache, and each
    column is packed into bytes there (``struct``, several times faster than numpy's conversion of a
    list); numpy sees every column once, at the end. Host-only chunks (most of them) skip the GPU
    columns' work. Step markers are found once per distinct name, at the end.
    """
    reader = _ChunkReader(EventTableBuilder(FORMAT, [str(path)]))
    for chunk in chunks:
        reader.add(chunk)
    builder = reader.finish()
    header = header_of()
    if len(builder) == 0:
        raise InputError(path, "no profiler events (cpu_op, kernel, cuda_runtime, ...) in traceEvents",
                         "a PyTorch profiler trace")
    info = header.get("distributedInfo") or {}
    worker = f"rank{info['rank']}" if isinstance(info, dict) and "rank" in info else ""
    _header_metadata(builder.metadata, header)
    builder.metadata.skipped_events = reader.skipped
    args = reader.collective_args
    if args["correlation"]:
        builder.metadata.collective_args = (CollectiveArgs(worker, **{k: tuple(v) for k, v in args.items()}),)
    builder.memory = reader.memory.records(builder, Device("host"))
    recorder = read_window(path)
    builder.metadata.process_groups = process_groups(info, reader.comms.found, recorder)
    table = builder.build()
    table = _mark_nccl(table)
    spans = _step_spans(table)
    table = _assign_steps(table, spans)
    table = dataclasses.replace(table, memory=table.memory.with_steps(steps_in_spans(table.memory.ts, spans)))
    if worker and _without_gpu(table):
        table = _cpu_rank(table)
    table = with_collective_records(table, reader.comms.found, table.metadata.process_groups, recorder)
    return on_worker(table, worker) if worker else table


def _header_metadata(metadata: TableMetadata, header: dict) -> None:
    """What the document's other keys say of the trace, in ``metadata`` (entries of the wrong type left out)."""
    info, base = header.get("distributedInfo"), header.get("baseTimeNanoseconds")
    listed, host = header.get("deviceProperties"), header.get("host_name")
    metadata.distributed = (info,) if isinstance(info, dict) and info else ()
    metadata.base_time_ns = base if isinstance(base, int) and not isinstance(base, bool) else None
    metadata.devices_properties = tuple(p for p in listed if isinstance(p, dict)) if isinstance(listed, list) else ()
    metadata.hostnames = (str(host),) if host else ()


def on_worker(table: EventTable, worker: str) -> EventTable:
    """The table with every device (those of ``host_operator_devices`` too) on ``worker``, and the machine its
    trace names as that worker's (``worker_hosts``)."""
    table = dataclasses.replace(table, devices=tuple(dataclasses.replace(d, worker=worker) for d in table.devices))
    table.metadata.host_operator_devices = tuple(dataclasses.replace(d, worker=worker)
                                                 for d in table.metadata.host_operator_devices)
    table.metadata.worker_hosts = tuple((worker, host) for host in table.metadata.hostnames[:1])
    return table


class _ChunkReader:
    """The columns of the profiler events of a stream of chunks of decoded events, into ``builder``; ``skipped``
    counts the other events, ``collective_args`` the args of GPU events that name their collective."""

    def __init__(self, builder: EventTableBuilder):
        self.builder = builder
        self.code = builder.strings.code
        self.known_code = builder.strings.known
        self.host_code = builder.device_code(Device("host"))
        self.gpu_codes: dict[Any, int] = {}
        self.lanes = _Lanes(self.code)
        self.columns = _Columns()
        self.skipped = 0
        self.collective_args: dict[str, list] = {"correlation": [], "group": [], "seq": [], "collective": []}
        self.comms = CollectiveArgsReader(builder.strings.values)
        self.memory = MemoryReader()

    def add(self, chunk: list) -> None:
        events = [e for e in chunk if e.ph == "X" and e.cat in _KIND_CODE]
        if len(events) < len(chunk):
            memory = [e for e in chunk if e.name == MEMORY_EVENT and e.ph == "i"]
            self.memory.add(memory)
            self.skipped += len(chunk) - len(events) - len(memory)
        n = len(events)
        if not n:
            return
        names = [e.name for e in events]
        codes = list(map(self.known_code, names))
        if None in codes:  # names seen for the first time, coded in the order of the events
            codes = [c if c is not None else self.code(v) for c, v in zip(codes, names)]
        cats = [e.cat for e in events]
        args = [e.args or _NO_ARGS for e in events]
        if GPU_CATEGORIES.isdisjoint(cats):
            on_gpu = None
            devices = [self.host_code] * n
            lane_keys = [e.tid for e in events]
        else:
            on_gpu, devices, lane_keys = self._places(events, args, cats)
            self._collectives(args, on_gpu)
        self.comms.add(len(self.columns), codes, args, on_gpu)
        self.columns.add(
            n,
            ts=[e.ts for e in events],
            dur=[e.dur for e in events],
            name=codes,
            device=devices,
            lane=self.lanes.codes(lane_keys, on_gpu),
            kind=bytes(map(_KIND_CODE.__getitem__, cats)),
            correlation=[a.correlation if a.correlation is not None
                         else (a.external_id if a.external_id is not None else -1) for a in args],
            nbytes=[a.bytes if a.bytes is not None else -1 for a in args],
        )

    def _places(self, events: list, args: list, cats: list) -> tuple[list[bool], list[int], list]:
        """Which events are on a GPU, each one's device code and lane key (a GPU event's stream, else its tid)."""
        host_code, gpu_code = self.host_code, self._gpu_code
        on_gpu = [c in GPU_CATEGORIES for c in cats]
        devices = [gpu_code(a, e) if g else host_code for e, a, g in zip(events, args, on_gpu)]
        lane_keys = [(a.stream if a.stream is not None else e.tid) if g else e.tid
                     for e, a, g in zip(events, args, on_gpu)]
        return on_gpu, devices, lane_keys

    def _gpu_code(self, args: _Args, event: _Event) -> int:
        """The device code of a GPU event: ``args.device``, else its pid."""
        c = self.gpu_codes.get(args.device)
        if c is None:
            index = _int(args.device if args.device is not None else event.pid, 0)
            c = self.gpu_codes.get(index)
            if c is None:
                c = self.gpu_codes[index] = self.builder.device_code(Device("gpu", index))
        return c

    def _collectives(self, args: list, on_gpu: list[bool]) -> None:
        """The args of the GPU events that name their collective (and have a correlation id)."""
        found = self.collective_args
        for a, g in zip(args, on_gpu):
            if g and (a.group is not None or a.seq is not None or a.collective is not None) \
                    and a.correlation is not None:
                found["correlation"].append(_int(a.correlation))
                found["group"].append("" if a.group is None else str(a.group))
                found["seq"].append(_int(a.seq))
                found["collective"].append("" if a.collective is None else str(a.collective))

    def finish(self) -> EventTableBuilder:
        if len(self.columns):
            arrays = self.columns.arrays()
            self.builder.add_columns(**arrays, op_type=arrays["name"])
        return self.builder


class _Lanes:
    """Lane codes: a host event's lane is its thread id, a GPU event's ``stream:<n>`` (its stream, else its tid)."""

    def __init__(self, code: Callable[[str], int]):
        self.code = code
        self.host: dict[Any, int] = {}
        self.gpu: dict[Any, int] = {}

    def codes(self, keys: list, on_gpu: list[bool] | None) -> list[int]:
        """The lane of each event (``keys``: its stream or thread id; ``on_gpu``: None when all are host events)."""
        host, gpu = self.host.get, self.gpu.get

        def known(keys: list) -> list:
            return list(map(host, keys)) if on_gpu is None else [gpu(k) if g else host(k) for k, g in zip(keys, on_gpu)]

        try:
            got = known(keys)
        except TypeError:  # a tid or stream that is a list or an object: name the lane by its text
            keys = [str(k) for k in keys]
            got = known(keys)
        if None in got:  # lanes seen for the first time, coded in the order of the events
            on_gpu = on_gpu or [False] * len(keys)
            got = [c if c is not None else self._new(k, g) for c, k, g in zip(got, keys, on_gpu)]
        return got

    def _new(self, key, on_gpu: bool) -> int:
        lanes = self.gpu if on_gpu else self.host
        c = lanes.get(key)
        if c is None:
            c = lanes[key] = self.code(f"stream:{key}" if on_gpu else str(key))
        return c


class _Columns:
    """The table's columns, packed chunk by chunk into bytes and turned into numpy arrays once."""

    FORMATS = {"ts": "d", "dur": "d", "name": "i", "device": "h", "lane": "i", "kind": "b",
               "correlation": "q", "nbytes": "q"}
    DTYPES = {"d": np.float64, "i": np.int32, "h": np.int16, "b": np.int8, "q": np.int64}

    def __init__(self):
        self.parts: dict[str, list[bytes]] = {column: [] for column in self.FORMATS}
        self.rows = 0

    def __len__(self) -> int:
        return self.rows

    def add(self, n: int, **columns) -> None:
        """``n`` rows: a list of ``n`` values per column (``kind``: bytes)."""
        for column, values in columns.items():
            fmt = self.FORMATS[column]
            if fmt == "b":
                packed = values
            elif fmt == "q":
                packed = _pack_ints(n, values)
            else:
                packed = _packer(n, fmt)(*values)
            self.parts[column].append(packed)
        self.rows += n

    def arrays(self) -> dict[str, np.ndarray]:
        return {column: np.frombuffer(bytearray().join(self.parts[column]), dtype=self.DTYPES[fmt])
                for column, fmt in self.FORMATS.items()}


_PACKERS: dict[tuple[int, str], Callable[..., bytes]] = {}


def _packer(n: int, fmt: str) -> Callable[..., bytes]:
    """``struct``'s packing of ``n`` values of ``fmt`` (native order, as numpy reads them)."""
    pack = _PACKERS.get((n, fmt))
    if pack is None:
        pack = _PACKERS[(n, fmt)] = struct.Struct(f"{n}{fmt}").pack
    return pack


def _pack_ints(n: int, values: list) -> bytes:
    """int64s; values that are not ints (a string, a float, null) as ``_int_column`` reads them."""
    try:
        return _packer(n, "q")(*values)
    except struct.error:
        return _int_column(values).tobytes()


def _step_spans(table: EventTable) -> list[tuple[float, float, int]]:
    """``(start, end, step)`` of every host event named ``ProfilerStep#N``.

    The GPU's own ``ProfilerStep#N`` annotations (``gpu_user_annotation``) are left out: they mark when
    the GPU ran a step's work, not the step, and a short one would hide the host's span it starts in.
    """
    numbers = np.full(len(table.strings), -1, dtype=np.int64)
    for code, text in enumerate(table.strings):
        if text.startswith("ProfilerStep#"):
            match = STEP_MARKER.match(text)
            if match:
                numbers[code] = int(match.group(1))
    on_host = np.array([d.kind != "gpu" for d in table.devices], dtype=bool)
    rows = np.flatnonzero((numbers[table.name] >= 0) & on_host[table.device]) if len(table) else np.zeros(0, int)
    return list(zip(table.ts[rows].tolist(), (table.ts[rows] + table.dur[rows]).tolist(),
                    numbers[table.name[rows]].tolist()))


def _without_gpu(table: EventTable) -> bool:
    """No GPU device and no CUDA runtime call: the process ran without a GPU (not a GPU trace missing its kernels)."""
    return all(d.kind == "host" for d in table.devices) and not (table.kind == Kind.RUNTIME).any()


def _cpu_rank(table: EventTable) -> EventTable:
    """A rank without a GPU: its operators move from the host to its CPU device, its collectives become communication."""
    is_collective = np.fromiter((bool(CPU_COLLECTIVE.match(s)) for s in table.strings), dtype=bool,
                                count=len(table.strings))[table.name]
    collective = is_collective & np.isin(table.kind, (Kind.HOST_OP, Kind.ANNOTATION))
    cpu = Device("cpu", 0)
    devices = (*table.devices, cpu)
    device = table.device.copy()
    device[(table.kind == Kind.HOST_OP) | collective] = len(devices) - 1
    kind = table.kind.copy()
    kind[collective] = Kind.COMMUNICATION
    metadata = dataclasses.replace(table.metadata, host_operator_devices=(cpu,))
    memory = table.memory
    if len(memory):  # CPU memory with the operators, on the CPU device
        on_host = np.array([d == Device("host") for d in table.devices], dtype=bool)
        moved = np.where(on_host[memory.device], len(devices) - 1, memory.device)
        memory = dataclasses.replace(memory, device=moved.astype(np.int16))
    return dataclasses.replace(table, devices=devices, device=device, kind=kind, metadata=metadata, memory=memory)


def _int_column(values: list) -> np.ndarray:
    try:
        return np.asarray(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.fromiter((_int(v) for v in values), dtype=np.int64, count=len(values))


def _mark_nccl(table: EventTable) -> EventTable:
    is_nccl = np.fromiter((bool(NCCL_KERNEL.match(s)) for s in table.strings), dtype=bool,
                          count=len(table.strings))
    table.kind[(table.kind == Kind.KERNEL) & is_nccl[table.name]] = Kind.COMMUNICATION
    return table


def _assign_steps(table: EventTable, spans: list[tuple[float, float, int]]) -> EventTable:
    """Each event's step: a host event's is the ``ProfilerStep#N`` its start falls in; GPU work's is the step of
    the runtime call that launched it (``cudaLaunchKernel``, ``cudaGraphLaunch``... with the same correlation id:
    a graph's kernels share the id of their graph launch), never its own start time. GPU work whose launch is not
    in the trace, or was made outside every step marker, is in no step (-1); how many, by reason, is
    ``metadata.outside_steps`` (``OUTSIDE_NO_LAUNCH``, ``OUTSIDE_LAUNCH``)."""
    if not spans:
        return table
    step = steps_in_spans(table.ts, spans)
    dev_codes = [i for i, d in enumerate(table.devices) if d.kind == "gpu"]
    gpu_idx = np.flatnonzero(np.isin(table.device, dev_codes) & (table.kind != Kind.RUNTIME))
    launch = np.flatnonzero((table.kind == Kind.RUNTIME) & (table.correlation >= 0))
    launcher = match_correlation(table.correlation[launch], table.correlation[gpu_idx])
    found = launcher >= 0
    step[gpu_idx] = np.where(found, step[launch[np.maximum(launcher, 0)]], -1)
    table.step[:] = step
    work = table.kind[gpu_idx] != Kind.ANNOTATION
    table.metadata.outside_steps = {
        OUTSIDE_NO_LAUNCH: int((work & ~found).sum()),
        OUTSIDE_LAUNCH: int((work & found & (step[gpu_idx] < 0)).sum()),
    }
    return table
