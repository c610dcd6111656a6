"""A PyTorch rank's flight-recorder entries of its traced window, written beside its Kineto trace.

torch's flight recorder (on where ``TORCH_FR_BUFFER_SIZE`` is above 0 as the process group is made: ``rnnprof
trace`` sets it for the hang watch unless the user did) keeps an entry per collective a process group makes work
for: the group's name and description, the operation, its sizes, when it was made. gloo's ranks record no
process group in the Kineto trace, so the window's entries are written beside it
(``rundir.flight_recorder_beside``): ``traces.recorded_groups`` reads them back and joins them to the trace's calls.
The dump is torch's JSON one, without stack traces (``_dump_fr_trace_json``; with a full buffer of 2000 entries
the whole write takes about 40 ms: docs/benchmarks.md); nothing is written where the recorder is off or made no
entry in the window.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from rnnprof import rundir
from rnnprof.files import atomic_write_bytes
from rnnprof.traces.recorded_groups import FORMAT, VERSION


def write_window(torch, trace: Path, rank: int, first_ns: int, last_ns: int) -> Path | None:
    """The entries made from ``first_ns`` to ``last_ns`` (``time.time_ns()``, the recorder's clock) written beside
    ``trace``; the file, or None where there is none to write (no process group, the recorder off, no entry)."""
    distributed = torch.distributed
    if not (distributed.is_available() and distributed.is_initialized()):
        return None
    try:
        dump = msgspec.json.decode(torch._C._distributed_c10d._dump_fr_trace_json())
    except Exception:  # a torch without the recorder's JSON dump, or one that fails: the trace stands alone
        return None
    entries = dump.get("entries") if isinstance(dump, dict) else None
    window = [e for e in entries or () if isinstance(e, dict) and isinstance(e.get("time_created_ns"), int)
              and first_ns <= e["time_created_ns"] <= last_ns]
    if not window:
        return None
    document = {"format": FORMAT, "version": VERSION, "rank": int(rank), "window_ns": [first_ns, last_ns],
                "recorder_version": dump.get("version"), "entries": window}
    path = rundir.flight_recorder_beside(trace)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, msgspec.json.encode(document))
    return path
