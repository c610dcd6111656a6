"""Benchmark: ``rnnprof memory`` against ``rnnprof comm`` on the same ~1M-event Kineto trace with memory events.

    python benchmarks/memory.py [--events 1000000] [--repeat 3] [--fixture tests/data/X.json.gz]

The trace is written by ``_tile.tile`` from an H100 trace recorded with ``profile_memory=True``
(``tests/data/kineto-h100-vit-shapes.json.gz`` by default: 620 ``[memory]`` events in 25,000). Each repeat runs
comm (load + analysis) and memory (load + analysis) one after the other, each in its own process. Target:
memory <= 1.5x comm, on the median of the repeats' own ratios. Exits 1 only when missed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _measure import Targets, ratio_spread, run_child, spread
from _tile import FIXTURES, tile

DEFAULT_FIXTURE = FIXTURES / "kineto-h100-vit-shapes.json.gz"

COMM = """
import json, sys, time
from rnnprof.analyzers.comm import analyze_comm
from rnnprof.traces import load_events
t0 = time.perf_counter()
table = load_events(sys.argv[1])
report = analyze_comm(table)
print(json.dumps({"s": time.perf_counter() - t0, "events": len(table)}))
"""

MEMORY = """
import json, sys, time
from rnnprof.analyzers.memory import analyze_memory
from rnnprof.traces import load_events
t0 = time.perf_counter()
table = load_events(sys.argv[1])
t1 = time.perf_counter()
report = analyze_memory(table)
t2 = time.perf_counter()
print(json.dumps({"s": t2 - t0, "load_s": t1 - t0, "analysis_s": t2 - t1, "records": len(table.memory),
                  "events": len(table), "devices": len(report.devices)}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="trace events to write (all phases)")
    parser.add_argument("--fixture", type=Path, default=DEFAULT_FIXTURE)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="rnnprof-bench-") as tmp:
        path = Path(tmp) / "trace.json"
        t0 = time.perf_counter()
        n = tile(args.events, path, args.fixture)
        print(f"built {n:,} trace events ({path.stat().st_size / 1e6:,.0f} MB JSON) from {args.fixture.name} "
              f"in {time.perf_counter() - t0:.1f} s")
        comm, memory = [], []
        for _ in range(max(1, args.repeat)):
            comm.append(run_child(COMM, str(path)))
            memory.append(run_child(MEMORY, str(path)))
    m = memory[0]
    print(f"memory: {m['records']:,} allocator records on {m['devices']} device(s), {m['events']:,} events")
    print(f"  comm {spread([x['s'] for x in comm])}; memory {spread([x['s'] for x in memory])} "
          f"(load {statistics.median(x['load_s'] for x in memory):.2f} s, analysis "
          f"{statistics.median(x['analysis_s'] for x in memory):.2f} s, medians)")
    ratio, repeats = ratio_spread([x["s"] for x in memory], [x["s"] for x in comm])
    print(f"  memory / comm: {ratio:.2f}x ({repeats})")
    targets = Targets()
    targets.at_most("memory / comm (median of the repeats' ratios)", ratio, 1.5, "x")
    return targets.report()


if __name__ == "__main__":
    sys.exit(main())
