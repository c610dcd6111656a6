"""TensorFlow profiler XSpace files (``*.xplane.pb``) into an ``EventTable``.

* ``/device:GPU:k`` planes: each ``Stream #n`` line is a stream of kernels (NCCL: COMMUNICATION), copies and
  memsets; lines the profiler derives from the streams ("XLA Ops", "Steps", ...) are skipped.
* ``/host:CPU``: TraceMe ``"<node>:<OpType>"`` events are HOST_OPs (a oneDNN-rewritten op is the user's op,
  its kernel name in ``metadata.ran_as``); user ranges are ANNOTATIONs; ``step_num`` stats mark steps;
  tf.data's threads become ANNOTATIONs on lane ``tf_data`` named by pipeline stage.
* rnnprof's own XSpaces: a plane per device whose lines are lanes of ops.

The proto module is TensorFlow's installed ``xplane_pb2.py``, loaded by file, so TensorFlow itself is never
imported. The format as the user reads it: docs/formats.md.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

from rnnprof import rundir
from rnnprof.errors import TENSORFLOW_EXTRAS, InputError, MissingDependency
from rnnprof.traces import wire
from rnnprof.traces.jsonstream import read_content
from rnnprof.events.names import COMMUNICATION_OP, NCCL_KERNEL, user_op
from rnnprof.events import Device, EventTable, EventTableBuilder, Kind, concat, parse_tf_device, steps_in_spans

FORMAT = "xplane"
_STREAM_LINE = re.compile(r"^Stream #(\d+)")
_DERIVED_LINES = {"XLA Ops", "TensorFlow Ops", "XLA Modules", "Launch Stats",
                  "TensorFlow Name Scope", "Framework Name Scope", "Source code", "XLA TraceMe",
                  "SparseCore Ops", "Async XLA Ops", "Sync Flags", "Counters"}
TF_DATA_LANE = "tf_data"
_OP_EVENT = re.compile(r"^(?P<name>[^:]+(?::\d+)?[^:]*):(?P<op>[A-Za-z_][\w]*)$")
_pb2 = None


def xplane_pb2():
    """TensorFlow's xplane proto module, without importing TensorFlow when it is not loaded yet."""
    global _pb2
    if _pb2 is not None:
        return _pb2
    if sys.modules.get("tensorflow") is not None:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2 as module  # type: ignore
    else:
        module = None
        spec = importlib.util.find_spec("tensorflow")
        if spec and spec.submodule_search_locations:
            for root in spec.submodule_search_locations:
                candidate = Path(root, "tsl", "profiler", "protobuf", "xplane_pb2.py")
                if candidate.is_file():
                    file_spec = importlib.util.spec_from_file_location("_rnnprof_xplane_pb2", candidate)
                    module = importlib.util.module_from_spec(file_spec)
                    file_spec.loader.exec_module(module)
                    break
        if module is None:
            try:
                from tsl.profiler.protobuf import xplane_pb2 as module  # type: ignore
            except ImportError:
                raise MissingDependency("TensorFlow", "reading an XSpace (.xplane.pb)", TENSORFLOW_EXTRAS) from None
    _pb2 = module
    return module


_XSPACE_FIELDS = {1: wire.LEN, 2: wire.LEN, 3: wire.LEN, 4: wire.LEN}  # planes, errors, warnings, hostnames
_XPLANE_FIELDS = {1: wire.VARINT, 2: wire.LEN, 3: wire.LEN, 4: wire.LEN, 5: wire.LEN, 6: wire.LEN}
_PLANE_NAMES = (b"/host:", b"/device:")


def sniff(probe) -> bool:
    """XSpace fields only, and a plane among the first ones named ``/host:...`` or ``/device:...``."""
    if probe.is_dir or not wire.only(probe.prefix, _XSPACE_FIELDS):
        return False
    for field in wire.fields(probe.prefix):
        if field.number == 1 and wire.only(field.value, _XPLANE_FIELDS):
            name = wire.first(field.value, 2)
            if name is not None and name.startswith(_PLANE_NAMES):
                return True
    return False


def parse(path: Path):
    """The XSpace proto: the one full parse of the file."""
    from google.protobuf.message import DecodeError

    data = read_content(Path(path))
    space = xplane_pb2().XSpace()
    try:
        space.ParseFromString(data)
    except (DecodeError, ValueError) as exc:
        raise InputError(path, f"not a readable XSpace protobuf ({exc})", "a complete .xplane.pb file") from None
    return space


def _is_xspace(space) -> bool:
    return any(p.name.startswith(("/host:", "/device:", "/job:")) or parse_tf_device(p.name)
               or any(parse_tf_device(line.name) for line in p.lines) for p in space.planes)


def _stat_value(stat):
    which = stat.WhichOneof("value")
    return getattr(stat, which) if which else None


def events(path: Path, space) -> EventTable:
    path = Path(path)
    if not _is_xspace(space):
        raise InputError(path, "protobuf has no /host: or /device: planes", "a TensorFlow XSpace (.xplane.pb)")
    builder = EventTableBuilder(FORMAT, [str(path)])
    steps: list[tuple[float, float, int]] = []
    for plane in space.planes:
        _load_plane(plane, builder, steps)
    if len(builder) == 0:
        raise InputError(path, "XSpace holds no op, kernel or annotation events", "a captured profile")
    builder.metadata.hostnames = tuple(space.hostnames)
    table = builder.build()
    return assign_steps(table, steps)


def load(path: Path) -> EventTable:
    """Parse and load one file known to be an XSpace (a run directory's capture)."""
    return events(path, parse(path))


def sniff_dir(probe) -> bool:
    """A folder (not a run directory) holding ``*.xplane.pb`` files, e.g. a tf.profiler log directory."""
    return probe.is_dir and not rundir.is_run_dir(probe.path) and next(probe.path.rglob("*.xplane.pb"), None) is not None


def parse_dir(path: Path) -> list[Path]:
    """The folder's XSpace files; each is parsed when its events are read."""
    return sorted(Path(path).rglob("*.xplane.pb"))


def events_dir(path: Path, files: list[Path]) -> EventTable:
    tables = [load(f) for f in files]
    return tables[0] if len(tables) == 1 else concat(tables, align="absolute")


def classify_line(plane_name: str, line_name: str) -> tuple[Device, str, Kind] | None:
    """Device, lane and default kind of one XPlane line (or trace_viewer thread); None to skip it."""
    if line_name in _DERIVED_LINES:
        return None
    plane_device = parse_tf_device(plane_name.replace("/host:CPU", "/device:CPU:0"))
    is_host = plane_name.startswith("/host:")
    on_gpu = plane_device is not None and plane_device.kind == "gpu"
    line_device = parse_tf_device(line_name)
    stream = _STREAM_LINE.match(line_name)
    if on_gpu and stream:
        return plane_device, f"stream:{stream.group(1)}", Kind.KERNEL
    if line_device is not None:  # rnnprof XSpace: a line per device lane, "<device> <thread>"
        thread = line_name.split(" ", 1)[1] if " " in line_name.strip() else "ops"
        return line_device, thread.split("/", 1)[0] or "ops", Kind.HOST_OP
    if line_name == "Steps":
        return (Device("host") if is_host else plane_device or Device("host")), "steps", Kind.ANNOTATION
    if is_host and line_name.startswith("tf_data_iterator"):
        return Device("host"), TF_DATA_LANE, Kind.ANNOTATION
    if is_host:
        annotation = line_name.startswith("python") or line_name == "TraceContext"
        return Device("host"), line_name, Kind.ANNOTATION if annotation else Kind.HOST_OP
    if plane_device is not None:
        return plane_device, line_name or "ops", Kind.KERNEL if on_gpu else Kind.HOST_OP
    return None


def classify_event(default_kind: Kind, raw_name: str, stats: dict, on_host: bool) -> tuple[Kind, str, str] | None:
    """Kind, node name and op type of one event; None for profiler bookkeeping that is no op."""

    kind, name, op = default_kind, raw_name, raw_name
    if default_kind == Kind.KERNEL:
        lowered = raw_name.lower()
        if "memcpy" in lowered or "memcpy_details" in stats:
            kind = Kind.MEMCPY
        elif "memset" in lowered:
            kind = Kind.MEMSET
        elif NCCL_KERNEL.match(raw_name):
            kind = Kind.COMMUNICATION
    elif default_kind == Kind.HOST_OP:
        match = _OP_EVENT.match(raw_name)
        tf_op = stats.get("tf_op") or stats.get("op")
        if match:
            name, op = match.group("name"), match.group("op")
        elif isinstance(tf_op, str) and tf_op:
            op = tf_op.rsplit(":", 1)[-1]
        elif on_host:
            return None  # executor/threadpool bookkeeping, not an op
        if COMMUNICATION_OP.match(op):
            kind = Kind.COMMUNICATION
    return kind, name, op


def _as_int(value) -> int | None:
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return None


def add_event(builder: EventTableBuilder, steps: list, lane_info: tuple, on_host: bool,
              raw_name: str, ts: float, dur: float, stats: dict) -> None:
    """Classify one event and append it (shared by the XSpace and trace_viewer readers)."""
    device, lane, default_kind = lane_info
    step_num = _as_int(stats.get("step_num"))
    if step_num is not None and default_kind == Kind.ANNOTATION:
        steps.append((ts, ts + dur, step_num))  # a step marker: its span gives other events their step
    long_name = stats.get("long_name")  # trace_viewer shortens "node:Op" to "Op"
    classified = classify_event(default_kind, long_name if isinstance(long_name, str) and long_name else raw_name,
                                stats, on_host)
    if classified is None:
        return
    kind, name, op = classified
    if default_kind == Kind.HOST_OP:
        ran, op = op, user_op(op)
        if ran != op:  # a oneDNN kernel (_MklNativeConv2D): counted as the op of the user's graph
            builder.metadata.ran_as = _noted(builder.metadata.ran_as, op, ran)
            name = op if name == ran else name
    step = _as_int(stats.get("step"))
    step = step if step is not None else (step_num if default_kind != Kind.ANNOTATION else None)
    nbytes = _as_int(stats.get("bytes"))
    builder.add(ts, dur, name, op, device, lane, kind,
                step=step if step is not None else -1, nbytes=nbytes if nbytes is not None else -1)


def _noted(ran_as: dict[str, tuple[str, ...]], op: str, kernel: str) -> dict[str, tuple[str, ...]]:
    """``ran_as`` with ``op`` run as ``kernel`` noted (ops and names sorted)."""
    if kernel in ran_as.get(op, ()):
        return ran_as
    return dict(sorted({**ran_as, op: tuple(sorted({*ran_as.get(op, ()), kernel}))}.items()))


def _load_plane(plane, builder: EventTableBuilder, steps: list) -> None:
    metadata = {k: v for k, v in plane.event_metadata.items()}
    stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
    on_host = plane.name.startswith("/host:")
    for line in plane.lines:
        lane_info = classify_line(plane.name, line.display_name or line.name)
        if lane_info is None:
            continue
        base_us = line.timestamp_ns / 1e3
        for event in line.events:
            meta = metadata.get(event.metadata_id)
            stats = {stat_names.get(s.metadata_id, ""): _stat_value(s) for s in event.stats}
            if meta is not None:
                for s in meta.stats:
                    stats.setdefault(stat_names.get(s.metadata_id, ""), _stat_value(s))
            add_event(builder, steps, lane_info, on_host, meta.name if meta is not None else "",
                      base_us + event.offset_ps / 1e6, event.duration_ps / 1e6, stats)


def assign_steps(table: EventTable, spans: list[tuple[float, float, int]]) -> EventTable:
    """Events without a step of their own take the step of the marker span they start in."""
    if not spans:
        return table
    unset = table.step < 0
    table.step[unset] = steps_in_spans(table.ts[unset], spans)
    return table
