"""xprof ``trace_viewer`` JSON: the Chrome-trace rendering of an XSpace.

Processes are planes (``/host:CPU``, ``/device:GPU:0``) and threads are lines, so events are
classified exactly as in ``xplane`` (same lanes, kinds and step markers). ``chrome_json`` recognises it.
"""

from __future__ import annotations

from pathlib import Path

from rnnprof.errors import InputError
from rnnprof.events import EventTable, EventTableBuilder
from rnnprof.traces import xplane
from rnnprof.traces.tf_chrome import as_dict, as_float, complete_events, metadata_names, trace_events

FORMAT = "xprof-trace-viewer"


def load_doc(path: Path, doc: object) -> EventTable:
    events = trace_events(doc)
    processes, threads = metadata_names(events)
    builder = EventTableBuilder(FORMAT, [str(path)])
    steps: list = []

    def classify(plane: str, thread: str | None):
        info = xplane.classify_line(plane, thread or "") if plane else None
        return None if info is None else (info, plane.startswith("/host:"))

    for (lane_info, on_host), e in complete_events(events, processes, threads, classify):
        xplane.add_event(builder, steps, lane_info, on_host, str(e.get("name", "")),
                         as_float(e.get("ts")), as_float(e.get("dur")), as_dict(e.get("args")))
    if len(builder) == 0:
        raise InputError(path, "trace_viewer JSON holds no op, kernel or annotation events", "a captured profile")
    return xplane.assign_steps(builder.build(), steps)
