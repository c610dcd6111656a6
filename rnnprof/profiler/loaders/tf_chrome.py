"""Chrome traces of TensorFlow step stats: TF1 ``timeline.Timeline`` output and rnnprof's own timelines.

Both put one trace process per TF device. Lanes and kinds:

* a device's executor (TF1 ``"<device> Compute"``, rnnprof thread ``"ops"``) -> lane ``ops``,
  ``HOST_OP``: one op execution by that device's executor. On a GPU device these are the
  host-side launches of the device's ops, not the GPU kernels themselves.
* ``/gpu:N/stream:<id>`` (rnnprof thread ``stream:<id>``) -> ``KERNEL`` on GPU N.
* ``/gpu:N/memcpy`` (rnnprof thread ``memcpy``) -> ``MEMCPY``.

TF's GPU tracer writes every kernel twice (``stream:all`` and its own stream) and every copy twice
(``memcpy`` and the stream that ran it). The loader keeps one record of each: ``stream:all`` is
dropped when per-stream lanes exist, and a stream record identical (name, start, duration) to a
``memcpy`` record is the copy, not a kernel. Ops that move data between devices or take part in
collectives (Send/Recv, Collective*, Nccl*) are ``COMMUNICATION``.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import numpy as np

from rnnprof.errors import InputError
from rnnprof.profiler.events import Device, EventTable, EventTableBuilder, Kind, parse_tf_device

TF1_FORMAT = "tf1-timeline"
RNNPROF_FORMAT = "rnnprof-trace"

COMMUNICATION_OP = re.compile(
    r"^(_?(Host)?(Send|Recv)|_?Collective\w*|Nccl\w*|\w*AllReduce\w*|\w*AllGather\w*|\w*AllToAll\w*)$")
_STREAM = re.compile(r"/stream:(\w+)")


def decode_json(path: Path, raw: bytes) -> object:
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise InputError(path, f"not valid JSON ({exc})", "a complete JSON document") from None


def trace_events(doc: object) -> list:
    if isinstance(doc, dict):
        events = doc.get("traceEvents")
        return events if isinstance(events, list) else []
    return doc if isinstance(doc, list) else []


def metadata_names(events: list) -> tuple[dict, dict]:
    processes, threads = {}, {}
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "M":
            name = (e.get("args") or {}).get("name")
            if e.get("name") == "process_name":
                processes[e.get("pid")] = str(name)
            elif e.get("name") == "thread_name":
                threads[(e.get("pid"), e.get("tid"))] = str(name)
    return processes, threads


def is_rnnprof(doc: object) -> bool:
    return isinstance(doc, dict) and (doc.get("otherData") or {}).get("producer") == "rnnprof"


def is_tf1_timeline(doc: object) -> bool:
    processes, _ = metadata_names(trace_events(doc))
    return any(n.endswith(" Compute") and parse_tf_device(n) for n in processes.values())


def _lane_kind(process: str, thread: str | None) -> tuple[Device, str, Kind] | None:
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
    rows = []
    lanes: dict[tuple, tuple | None] = {}
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        key = (e.get("pid"), e.get("tid"))
        if key not in lanes:
            process = processes.get(key[0], "")
            lanes[key] = _lane_kind(process, threads.get(key) if rnnprof else None)
        lane = lanes[key]
        if lane is None:
            continue
        args = e.get("args") or {}
        rows.append((lane, e, args))
    # Drop stream:all where the device also has per-stream lanes (same kernels twice).
    streams = {(lane[0], lane[1]) for lane, _, _ in rows if lane[2] == Kind.KERNEL}
    has_streams = {dev for dev, name in streams if name != "stream:all"}
    copies = {(lane[0], e.get("name"), e.get("ts"), e.get("dur")) for lane, e, _ in rows if lane[2] == Kind.MEMCPY}
    builder = EventTableBuilder(source_format, [str(path)])
    dropped_all = dropped_copies = 0
    for (device, lane, kind), e, args in rows:
        if kind == Kind.KERNEL:
            if lane == "stream:all" and device in has_streams:
                dropped_all += 1
                continue
            if (device, e.get("name"), e.get("ts"), e.get("dur")) in copies:
                dropped_copies += 1
                continue
        op = str(args.get("op") or e.get("name") or "")
        if kind == Kind.HOST_OP and COMMUNICATION_OP.match(op):
            kind = Kind.COMMUNICATION
        builder.add(
            ts=float(e.get("ts") or 0.0),
            dur=float(e.get("dur") or 0.0),
            name=str(args.get("name") or e.get("name") or ""),
            op_type=op,
            device=device,
            lane=lane,
            kind=kind,
            step=int(args["step"]) if isinstance(args.get("step"), int) else step,
            nbytes=int(args["bytes"]) if isinstance(args.get("bytes"), int) else -1,
        )
    if len(builder) == 0:
        raise InputError(path, "no op or kernel events on any TensorFlow device lane",
                         "a trace with '<device> Compute' or per-device processes")
    builder.metadata.update({"dropped_stream_all": dropped_all, "dropped_duplicate_copies": dropped_copies})
    if isinstance(doc, dict) and isinstance(doc.get("otherData"), dict):
        builder.metadata["otherData"] = doc["otherData"]
    return builder.build()


def load(path: Path, raw: bytes, source_format: str | None = None) -> EventTable:
    doc = decode_json(path, raw)
    if source_format is None:
        source_format = RNNPROF_FORMAT if is_rnnprof(doc) else TF1_FORMAT
    step = -1
    if is_rnnprof(doc):
        step = int(doc["otherData"].get("step", -1))
    return load_doc(path, doc, source_format, step=step)
