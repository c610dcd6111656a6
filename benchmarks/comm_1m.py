"""Time `rnnprof comm` (load + analyze) on a Kineto trace of about one million events.

The trace is the 2-rank NCCL fixture tiled in time: each copy is shifted past the previous one,
with its ProfilerStep numbers and correlation ids renumbered so steps and launches stay distinct.
Budget: load + comm analysis <= 3 s.
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / ".." / "shared" / "fixtures" / "kineto-2rank-nccl-rank0.json.gz"
FIXTURE = FIXTURE if FIXTURE.exists() else Path("/work/shared/fixtures/kineto-2rank-nccl-rank0.json.gz")
TARGET_EVENTS = 1_000_000
BUDGET_S = 3.0


def tiled_trace(target: int, events_per_copy: int) -> dict:
    """Enough copies of the fixture for ``target`` loaded events (``events_per_copy`` loaded events each)."""
    with gzip.open(FIXTURE, "rt") as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    meta = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    timed = [e for e in body if "ts" in e]
    start = min(float(e["ts"]) for e in timed)
    shift = max(float(e["ts"]) + float(e.get("dur", 0)) for e in timed) - start + 1000.0
    steps = [int(e["name"].split("#")[1]) for e in body if str(e.get("name", "")).startswith("ProfilerStep#")]
    step_stride = max(steps) - min(steps) + 1 if steps else 0
    id_stride = 1 + max(int(e.get("args", {}).get("correlation", 0) or 0) for e in body)
    copies = -(-target // events_per_copy)
    out = list(meta)
    for k in range(copies):
        for e in body:
            e = dict(e)
            if "ts" in e:
                e["ts"] = float(e["ts"]) + k * shift
            name = e.get("name", "")
            if isinstance(name, str) and name.startswith("ProfilerStep#"):
                e["name"] = f"ProfilerStep#{int(name.split('#')[1]) + k * step_stride}"
            args = e.get("args")
            if isinstance(args, dict) and "correlation" in args:
                e["args"] = dict(args, correlation=int(args["correlation"]) + k * id_stride)
            if e.get("cat") == "ac2g" and "id" in e:
                e["id"] = int(e["id"]) + k * id_stride
            out.append(e)
    return dict(trace, traceEvents=out)


def main() -> int:
    from rnnprof.analyzers.comm import analyze_comm
    from rnnprof.profiler.loaders import load_events

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kineto-1m.json"
        path.write_text(json.dumps(tiled_trace(TARGET_EVENTS, len(load_events(FIXTURE)))))
        t0 = time.perf_counter()
        table = load_events(path)
        t1 = time.perf_counter()
        report = analyze_comm(table)
        t2 = time.perf_counter()
    load_s, comm_s = t1 - t0, t2 - t1
    device = report.devices[0]
    print(f"comm_1m: {len(table):,} events, {len(report.steps)} steps on {len(report.devices)} device(s): "
          f"load {load_s:.2f} s + comm {comm_s:.2f} s = {load_s + comm_s:.2f} s (budget {BUDGET_S:.1f} s); "
          f"idle {device.total.pct(device.total.idle_us):.1f}%, overlap {device.total.overlap_pct:.1f}%")
    return 0 if load_s + comm_s <= BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
