"""Benchmark: ``rnnprof roofline`` against ``rnnprof comm`` on the same ~1M-event Kineto trace.

    python benchmarks/roofline.py [--events 1000000] [--repeat 3] [--fixture tests/data/X.json.gz]

The trace is written by ``_tile.tile`` from an A100 training trace recorded with shapes
(``tests/data/kineto-8rank-rank3-a100.json.gz`` by default; the other benchmarks' default, the 2-rank NCCL
fixture, records no shapes and leaves the roofline nothing to model). Each
repeat runs comm (load + analysis) and roofline (load + shapes + analysis) one after the other, each in its own
process. Target: roofline <= 1.5x comm, on the median of the repeats' own ratios. Exits 1 only when missed.
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

DEFAULT_FIXTURE = FIXTURES / "kineto-8rank-rank3-a100.json.gz"

COMM = """
import json, sys, time
from rnnprof.analyzers.comm import analyze_comm
from rnnprof.traces import load_events
t0 = time.perf_counter()
table = load_events(sys.argv[1])
report = analyze_comm(table)
print(json.dumps({"s": time.perf_counter() - t0, "events": len(table)}))
"""

ROOFLINE = """
import json, sys, time
from rnnprof.analyzers.peaks import lookup
from rnnprof.analyzers.roofline import analyze_roofline
from rnnprof.traces import load_events
from rnnprof.traces.shapes import load_shapes
t0 = time.perf_counter()
table = load_events(sys.argv[1])
t1 = time.perf_counter()
shapes = load_shapes(sys.argv[1], table)
t2 = time.perf_counter()
report = analyze_roofline(table, shapes, lookup("NVIDIA A100-SXM4-80GB"))
t3 = time.perf_counter()
print(json.dumps({"s": t3 - t0, "load_s": t1 - t0, "shapes_s": t2 - t1, "analysis_s": t3 - t2,
                  "ops_with_shapes": len(shapes), "attributed": report.counts["gpu_activities_attributed"],
                  "gpu_activities": report.counts["gpu_activities"]}))
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
        comm, roof = [], []
        for _ in range(max(1, args.repeat)):
            comm.append(run_child(COMM, str(path)))
            roof.append(run_child(ROOFLINE, str(path)))
    r = roof[0]
    print(f"roofline: {r['ops_with_shapes']:,} operators with shapes, {r['attributed']:,} of "
          f"{r['gpu_activities']:,} GPU activities attributed")
    print(f"  comm {spread([x['s'] for x in comm])}; roofline {spread([x['s'] for x in roof])} "
          f"(load {statistics.median(x['load_s'] for x in roof):.2f} s, shapes "
          f"{statistics.median(x['shapes_s'] for x in roof):.2f} s, analysis "
          f"{statistics.median(x['analysis_s'] for x in roof):.2f} s, medians)")
    ratio, repeats = ratio_spread([x["s"] for x in roof], [x["s"] for x in comm])
    print(f"  roofline / comm: {ratio:.2f}x ({repeats})")
    targets = Targets()
    targets.at_most("roofline / comm (medians)", ratio, 1.5, "x")
    return targets.report()


if __name__ == "__main__":
    sys.exit(main())
