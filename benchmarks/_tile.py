"""Build a large Kineto trace by tiling a real one in time (shared by the benchmarks).

Each copy of the fixture's timed events is shifted past the end of the previous copy; its
``ProfilerStep#N`` numbers, correlation / ``External id`` values and flow ids are offset so that
every copy has its own steps and launches. Metadata events (``ph: "M"``) are written once.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

# The real traces the tests use (tests/data, with their provenance).
FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "data"
DEFAULT_FIXTURE = FIXTURES / "kineto-2rank-nccl-rank0.json.gz"
_ID_KEYS = ("correlation", "External id")
_STEP_PREFIX = "ProfilerStep#"


def _read(fixture: Path) -> dict:
    with gzip.open(fixture, "rt") if fixture.suffix == ".gz" else open(fixture) as f:
        return json.load(f)


def _int_arg(event: dict, key: str) -> int:
    value = (event.get("args") or {}).get(key)
    return value if isinstance(value, int) else 0


def tile(target_events: int, out: Path, fixture: Path = DEFAULT_FIXTURE, compress: bool = False,
         distributed: dict | None = None, offset_us: float = 0.0, gap_us: float = 0.0) -> int:
    """Write about ``target_events`` trace events (all of ``traceEvents``) to ``out``; returns the count.

    For one rank of a job: ``distributed`` replaces the fixture's ``distributedInfo``, ``offset_us``
    shifts every event, and ``gap_us`` more idle time goes between copies (a slower rank)."""
    doc = _read(fixture)
    events = doc.pop("traceEvents")
    if distributed is not None:
        doc["distributedInfo"] = distributed
    meta = [e for e in events if e.get("ph") == "M" or "ts" not in e]
    timed = [e for e in events if e.get("ph") != "M" and "ts" in e]
    start = min(float(e["ts"]) for e in timed)
    time_stride = max(float(e["ts"]) + float(e.get("dur", 0)) for e in timed) - start + 1000.0
    id_stride = 1 + max(max(_int_arg(e, k) for k in _ID_KEYS) for e in timed)
    id_stride = max(id_stride, 1 + max((e["id"] for e in timed if isinstance(e.get("id"), int)), default=0))
    steps = [int(e["name"][len(_STEP_PREFIX):]) for e in timed
             if str(e.get("name", "")).startswith(_STEP_PREFIX) and e["name"][len(_STEP_PREFIX):].isdigit()]
    step_stride = max(steps) - min(steps) + 1 if steps else 0
    copies = max(1, round((target_events - len(meta)) / len(timed)))

    written = len(meta)
    opener = gzip.open(out, "wt", compresslevel=1) if compress else open(out, "w")
    with opener as f:
        head = json.dumps(doc)[:-1]
        f.write(head + (", " if doc else "") + '"traceEvents": [\n')
        f.write(",\n".join(json.dumps(e) for e in meta))
        for k in range(copies):
            shift, offset = offset_us + k * (time_stride + gap_us), k * id_stride
            lines = []
            for e in timed:
                e2 = dict(e)
                e2["ts"] = float(e["ts"]) + shift
                name = e.get("name")
                if steps and isinstance(name, str) and name.startswith(_STEP_PREFIX) \
                        and name[len(_STEP_PREFIX):].isdigit():
                    e2["name"] = f"{_STEP_PREFIX}{int(name[len(_STEP_PREFIX):]) + k * step_stride}"
                args = e.get("args")
                if args and any(isinstance(args.get(key), int) for key in _ID_KEYS):
                    args = dict(args)
                    for key in _ID_KEYS:
                        if isinstance(args.get(key), int):
                            args[key] += offset
                    e2["args"] = args
                if isinstance(e.get("id"), int):
                    e2["id"] = e["id"] + offset
                lines.append(json.dumps(e2))
            f.write((",\n" if written else "") + ",\n".join(lines))
            written += len(lines)
        f.write("\n]}\n")
    return written


def count_events(path: Path) -> int:
    """The number of ``traceEvents`` in a trace written by ``tile`` (one event a line), to reuse one.

    Counted line by line: loading the document whole would raise this process's peak RSS, which
    the measuring children inherit (Linux keeps ``ru_maxrss`` across fork and exec).
    """
    with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as f:
        return sum(1 for line in f if line.startswith(b"{")) - 1  # the first line opens the document
