"""TF ``StepStats`` -> XSpace with lines per device, for TensorBoard's profile plugin (xprof).

tf.profiler attributes graph-mode ops to executor threads, not to the logical CPU
devices they were placed on; this XSpace shows each device as its own lines on the
host plane (``/host:CPU``). Events are named ``node:OpType`` like TF's own host
events so xprof's op statistics read them. Ops of one device that overlap go to extra
lines (``<device> ops/2``), as in the Chrome timelines: no line holds ops that overlap or nest.

Steps, as xprof finds them in tf.profiler's own capture: a step marker ``train`` with
``step_num`` and ``_r`` (a root event) per traced step, on a line named ``python`` like the
Python thread that records tf.profiler's markers (xprof takes no step markers from a line
named ``Steps``, a name it gives lines it derives itself). A marker alone is no step to xprof:
each op is tied to its step's marker by a TraceMe producer/consumer context (``_pt``/``_p``
on the marker, ``_ct``/``_c`` on the op), so the overview page gets step times and their
breakdown.
"""

from __future__ import annotations

from typing import Iterable

from rnnprof.rundir.chrome_trace import op_events, pack_threads

HOST_PLANE = "/host:CPU"
STEP_LINE = "python"
# The context type of the marker -> op ties (the id is the step number): TF's executor context,
# the one tying tf.profiler's executor events to their ``SessionRun``.
STEP_CONTEXT_TYPE = 2


def _xplane_pb2():
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    return xplane_pb2


def _metadata_ids(table):
    """name -> id in an XPlane metadata map (events or stats), adding the entry on first use."""
    ids: dict[str, int] = {}

    def id_of(name: str) -> int:
        if name not in ids:
            ids[name] = len(ids) + 1
            table[ids[name]].id = ids[name]
            table[ids[name]].name = name
        return ids[name]

    return id_of


def _step_line(plane, step_spans, origin_ns: int, offset_ps, event_id, stat_id) -> int:
    """The line of step markers (``step_num``, as TensorFlow's own steps are marked); the last line id used."""
    if not step_spans:
        return 0
    line = plane.lines.add(id=1, display_id=1, name=STEP_LINE, display_name=STEP_LINE, timestamp_ns=origin_ns)
    for step, start, end in step_spans:
        ev = line.events.add(metadata_id=event_id("train"), offset_ps=offset_ps(start),
                             duration_ps=max(1, offset_ps(end) - offset_ps(start)))
        ev.stats.add(metadata_id=stat_id("step_num"), int64_value=step)
        ev.stats.add(metadata_id=stat_id("_r"), int64_value=1)
        ev.stats.add(metadata_id=stat_id("_pt"), int64_value=STEP_CONTEXT_TYPE)
        ev.stats.add(metadata_id=stat_id("_p"), int64_value=step)
    return 1


def build_xspace(steps: Iterable[tuple[int, object]], hostname: str = "localhost", offsets: dict | None = None):
    """``steps`` is ``(step_number, step_stats)`` pairs; returns an ``XSpace`` proto."""
    pb = _xplane_pb2()
    space = pb.XSpace()
    space.hostnames.append(hostname)
    plane = space.planes.add(id=0, name=HOST_PLANE)
    event_id = _metadata_ids(plane.event_metadata)
    stat_id = _metadata_ids(plane.stat_metadata)

    per_line: dict[str, list] = {}
    step_spans = []
    for step, step_stats in steps:
        events = op_events(step_stats, offsets)  # each task's clock aligned to the chief's
        pack_threads(events)
        for e in events:
            per_line.setdefault(f"{e.device} {e.thread}", []).append((step, e))
        if events:
            step_spans.append((step, min(e.start_us for e in events), max(e.end_us for e in events)))

    all_starts = [e.start_us for group in per_line.values() for _, e in group]
    if not all_starts:
        return space
    origin_us = min(all_starts)
    # not origin_us * 1000: near 1.8e18 a double is 256 ns coarse
    origin_ns = int(origin_us) * 1000 + round(origin_us % 1 * 1000)

    def offset_ps(us: float) -> int:
        # differences of nearby doubles are exact: no op lands before the line's start
        return round((us - origin_us) * 1e6)

    line_id = _step_line(plane, step_spans, origin_ns, offset_ps, event_id, stat_id)
    for name in sorted(per_line):
        line_id += 1
        line = plane.lines.add(id=line_id, display_id=line_id, name=name, display_name=name, timestamp_ns=origin_ns)
        for step, e in sorted(per_line[name], key=lambda se: se[1].start_us):
            ev = line.events.add(metadata_id=event_id(f"{e.node}:{e.op}"), offset_ps=offset_ps(e.start_us),
                                 duration_ps=max(0, round(e.dur_us * 1e6)))
            ev.stats.add(metadata_id=stat_id("step_num"), int64_value=step)
            ev.stats.add(metadata_id=stat_id("device"), str_value=e.device)
            ev.stats.add(metadata_id=stat_id("_ct"), int64_value=STEP_CONTEXT_TYPE)
            ev.stats.add(metadata_id=stat_id("_c"), int64_value=step)
            if e.bytes:
                ev.stats.add(metadata_id=stat_id("bytes"), int64_value=e.bytes)
    return space
