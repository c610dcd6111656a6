"""Each step's time from a trace's raw JSON alone (Kineto or a TF1 timeline; one file per rank, several ranks on one
clock): the oracle the replay's unchanged steps are held to, computed without rnnprof's event table, graph or
calibration.

A step's events are the work whose host start lies in the host's ``ProfilerStep#N`` range (operators, runtime and
driver calls, the collectives on gloo's and NCCL's threads), and the GPU work those calls launched (found by the
``correlation`` of the launch); a trace without step ranges is one step, -1. The step's time is from its first
event's start to its last event's end, over every rank; where GPU work of an earlier step, or launched before the
trace began (no launch in the file), still ran when the step's first event started and ended within the step, the
step is timed from that work's end: the host ran ahead of its GPU, or waited for it at the top of the step, and
counting from the step's first event would count the overlap in two steps."""

from __future__ import annotations

import bisect
import gzip
import msgspec
from pathlib import Path

GPU = ("kernel", "gpu_memcpy", "gpu_memset")
HOST_WORK = ("cpu_op", "cuda_runtime", "cuda_driver", "cuda_sync", "Op")  # "Op": a TF1 timeline's
LAUNCHES = ("cuda_runtime", "cuda_driver")
COLLECTIVES = ("gloo:", "nccl:")  # annotations that are work: a collective on its backend's thread or stream
MARKERS = ("user_annotation", "gpu_user_annotation")


class _Args(msgspec.Struct):
    correlation: int | None = None


class _Event(msgspec.Struct):
    """The fields of a trace event the oracle reads (the rest is skipped while decoding)."""

    ph: str = ""
    name: str | int = ""
    cat: str | None = None
    ts: float = 0.0
    dur: float = -1.0
    args: _Args | None = None


class _Trace(msgspec.Struct):
    traceEvents: list[_Event]


def _events(path: Path) -> list[_Event]:
    with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as f:
        data = f.read()
    try:
        events = msgspec.json.decode(data, type=_Trace).traceEvents
    except msgspec.ValidationError:  # a TF1 timeline written as a bare list
        events = msgspec.json.decode(data, type=list[_Event])
    return [e for e in events if e.ph == "X" and e.dur >= 0]


def _rank(events: list[_Event]) -> list[tuple[int, float, float, bool]]:
    """(step, start, end, on the GPU) of each event of work of one rank's trace."""
    spans = sorted((e.ts, e.ts + e.dur, int(str(e.name).split("#")[1])) for e in events
                   if str(e.name).startswith("ProfilerStep#") and e.cat == "user_annotation")
    starts = [s[0] for s in spans]

    def step_at(ts: float) -> int:
        k = bisect.bisect_right(starts, ts) - 1
        return spans[k][2] if k >= 0 and ts < spans[k][1] else -1

    launched = {e.args.correlation: step_at(e.ts) for e in events
                if e.cat in LAUNCHES and e.args is not None and e.args.correlation is not None}
    found = []
    for e in events:
        cat, name = e.cat, str(e.name)
        if not (cat in HOST_WORK or cat in GPU or (cat in MARKERS and name.startswith(COLLECTIVES))):
            continue
        on_gpu = cat in GPU
        if not spans:
            step = -1
        elif on_gpu:
            step = launched.get(e.args.correlation if e.args is not None else None, -1)
        else:
            step = step_at(e.ts)
        found.append((step, e.ts, e.ts + e.dur, on_gpu))
    return found


def step_times(paths: list[Path]) -> dict[int, float]:
    """Each step's time (µs) from the raw files of one job's ranks, on their own clocks as written."""
    work = [w for path in paths for w in _rank(_events(Path(path)))]
    stepped = sorted({s for s, *_ in work if s >= 0}) or [-1]
    times = {}
    for n in stepped:
        own = [(ts, end) for s, ts, end, _ in work if s == n]
        first, last = min(ts for ts, _ in own), max(end for _, end in own)
        # GPU work of an earlier step, or from before the trace (its launch not in the file: step -1)
        earlier = [end for s, _, end, on_gpu in work if on_gpu and s < n and first < end <= last]
        times[n] = last - max([first, *earlier])
    return times
