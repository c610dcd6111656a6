"""Chrome traces of TensorFlow step stats (TF1 ``timeline.Timeline`` output, rnnprof's timelines) into an ``EventTable``.

Which of the two a decoded document is, ``chrome_json`` decides; both hold one process per TF device. A
device's executor lane (TF1 ``"<device> Compute"``, rnnprof ``"ops"``) is HOST_OP (on a GPU: the host-side
launches); ``/gpu:N/stream:<id>`` is KERNEL, ``/gpu:N/memcpy`` MEMCPY. TF's GPU tracer writes every kernel and
copy twice; one record of each is kept (``stream:all`` dropped when per-stream lanes exist; a stream record
identical to a ``memcpy`` one is the copy). Send/Recv and collective ops are COMMUNICATION; a oneDNN-rewritten
op is the user's op, its kernel name in ``metadata.ran_as``. See docs/formats.md.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Iterator

from rnnprof.errors import InputError
from rnnprof.events.names import COMMUNICATION_OP, note_ran_as, user_op
from rnnprof.events import Device, EventTable, EventTableBuilder, Kind, parse_tf_device
from rnnprof.events.memory import MemoryRecords, memory_records

TF1_FORMAT = "tf1-timeline"
RNNPROF_FORMAT = "rnnprof-trace"

_STREAM = re.compile(r"/stream:(\w+)")


def as_dict(value) -> dict:
    """``value`` when it is a JSON object, else {}: fields of hostile traces may hold anything."""
    return value if isinstance(value, dict) else {}


def as_key(value):
    """A pid/tid usable as a dict key (JSON arrays and objects are not)."""
    return value if isinstance(value, (int, float, str)) or value is None else repr(value)


def as_float(value) -> float:
    """A timestamp or duration; anything that is not a finite number counts as 0."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = float(value)
        return value if value == value and abs(value) != float("inf") else 0.0
    return 0.0


def trace_events(doc: object) -> list:
    if isinstance(doc, dict):
        events = doc.get("traceEvents")
        return events if isinstance(events, list) else []
    return doc if isinstance(doc, list) else []


def metadata_names(events: list) -> tuple[dict, dict]:
    processes, threads = {}, {}
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "M":
            name = as_dict(e.get("args")).get("name")
            if e.get("name") == "process_name":
                processes[as_key(e.get("pid"))] = str(name)
            elif e.get("name") == "thread_name":
                threads[(as_key(e.get("pid")), as_key(e.get("tid")))] = str(name)
    return processes, threads


def complete_events(events: list, processes: dict, threads: dict, classify: Callable) -> Iterator[tuple]:
    """``(lane, event)`` for each complete ("X") event, ``lane = classify(process name, thread name)``
    computed once per (pid, tid); events on lanes classified None are skipped."""
    lanes: dict[tuple, object] = {}
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        key = (as_key(e.get("pid")), as_key(e.get("tid")))
        if key not in lanes:
            lanes[key] = classify(processes.get(key[0], ""), threads.get(key))
        lane = lanes[key]
        if lane is not None:
            yield lane, e


def lane_kind(process: str, thread: str | None) -> tuple[Device, str, Kind] | None:
    """Device, lane and kind for events of one (process, thread); None to skip the lane."""
    if process.endswith(" Tensors") or process == "Allocators":
        return None
    device_text = process[: -len(" Compute")] if process.endswith(" Compute") else process
    device = parse_tf_device(device_text)
    if device is None:
        return None
    stream = _STREAM.search(device_text)
    if stream:
        return device, f"stream:{stream.group(1)}", Kind.KERNEL
    if device_text.rstrip("/").endswith("/memcpy"):
        return device, "memcpy", Kind.MEMCPY
    lane = (thread or "ops").split("/", 1)[0]  # "ops/2": a second executor thread of lane "ops"
    if lane.startswith("stream:"):
        return device, lane, Kind.KERNEL
    if lane.startswith("memcpy"):
        return device, lane, Kind.MEMCPY
    return device, lane, Kind.HOST_OP


def load_doc(path: Path, doc: object, source_format: str, step: int = -1) -> EventTable:
    events = trace_events(doc)
    processes, threads = metadata_names(events)
    rnnprof = source_format == RNNPROF_FORMAT
    rows = [(lane, e, as_dict(e.get("args")))
            for lane, e in complete_events(events, processes, threads,
                                           lambda process, thread: lane_kind(process, thread if rnnprof else None))]
    # Drop stream:all where the device also has per-stream lanes (same kernels twice).
    streams = {(lane[0], lane[1]) for lane, _, _ in rows if lane[2] == Kind.KERNEL}
    has_streams = {dev for dev, name in streams if name != "stream:all"}
    copies = {(lane[0], as_key(e.get("name")), as_key(e.get("ts")), as_key(e.get("dur")))
              for lane, e, _ in rows if lane[2] == Kind.MEMCPY}
    builder = EventTableBuilder(source_format, [str(path)])
    dropped_all = dropped_copies = 0
    ran_as: dict[str, list[str]] = {}
    for (device, lane, kind), e, args in rows:
        if kind == Kind.KERNEL:
            if lane == "stream:all" and device in has_streams:
                dropped_all += 1
                continue
            if (device, as_key(e.get("name")), as_key(e.get("ts")), as_key(e.get("dur"))) in copies:
                dropped_copies += 1
                continue
        name, op, kind = _named(e, args, kind, ran_as)
        builder.add(
            ts=as_float(e.get("ts")),
            dur=as_float(e.get("dur")),
            name=name,
            op_type=op,
            device=device,
            lane=lane,
            kind=kind,
            step=args["step"] if _is_int(args.get("step"), 2**31) else step,
            nbytes=args["bytes"] if _is_int(args.get("bytes"), 2**63) else -1,
        )
    if len(builder) == 0:
        raise InputError(path, "no op or kernel events on any TensorFlow device lane",
                         "a trace with '<device> Compute' or per-device processes")
    builder.memory = tf_memory(builder, events, processes, threads, step)
    builder.metadata.dropped_stream_all, builder.metadata.dropped_duplicate_copies = dropped_all, dropped_copies
    builder.metadata.ran_as = {op: tuple(kernels) for op, kernels in sorted(ran_as.items())}
    if isinstance(doc, dict) and isinstance(doc.get("otherData"), dict):
        builder.metadata.other_data = doc["otherData"]
    return builder.build()


def _named(e: dict, args: dict, kind: Kind, ran_as: dict[str, list[str]]) -> tuple[str, str, Kind]:
    """An event's name, op type and kind: an op oneDNN rewrote is counted as the op of the user's graph (its
    kernel noted in ``ran_as``), and a communication op is communication."""
    op = str(args.get("op") or e.get("name") or "")
    name = str(args.get("name") or e.get("name") or "")
    if kind == Kind.HOST_OP:
        ran, op = op, user_op(op)
        if ran != op:
            note_ran_as(ran_as, op, ran)
            name = op if name == ran else name
        if COMMUNICATION_OP.match(op):
            kind = Kind.COMMUNICATION
    return name, op, kind


def _is_int(value, bound: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -bound <= value < bound


def tf_memory(builder: EventTableBuilder, events: list, processes: dict, threads: dict, step: int) -> MemoryRecords:
    """The ``[memory]`` instant events of an rnnprof timeline (``rundir.chrome_trace.memory_events``): each on
    its device and thread, its node the allocating operator; one without a number for Bytes is unusable."""
    rows: dict[str, list] = {c: [] for c in ("ts", "device", "lane", "nbytes", "addr", "step", "operator")}
    unusable = 0
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "i" or e.get("name") != "[memory]":
            continue
        args = as_dict(e.get("args"))
        place = lane_kind(processes.get(as_key(e.get("pid")), ""), threads.get((as_key(e.get("pid")),
                                                                                 as_key(e.get("tid")))))
        if place is None or not _is_int(args.get("Bytes"), 2**63):
            unusable += 1
            continue
        rows["ts"].append(as_float(e.get("ts")))
        rows["device"].append(builder.device_code(place[0]))
        rows["lane"].append(builder.strings.code(place[1]))
        rows["nbytes"].append(args["Bytes"])
        rows["addr"].append(args["Addr"] if _is_int(args.get("Addr"), 2**63) else -1)
        rows["step"].append(args["step"] if _is_int(args.get("step"), 2**31) else step)
        rows["operator"].append(builder.strings.code(str(args.get("node") or "")))
    return memory_records(unusable=unusable, **rows)
