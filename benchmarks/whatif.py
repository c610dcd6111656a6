"""Benchmark: load + ``rnnprof whatif`` (a replay of every step) against load + ``rnnprof comm`` on one
~1.09M-event Kineto rank.

    python benchmarks/whatif.py [--events 1090000] [--repeat 3]

The trace is written by ``_tile.tile`` (the 2-rank NCCL fixture's rank 0 tiled in time, each copy with its own
steps and launches), as benchmarks/critical_path.py writes it. Each side runs in its own process, the two taking
turns, ``--repeat`` times: wall time of load + analysis and the peak RSS of the process. The replay: every
step's graph built, replayed unchanged and with communication halved (``--comm 0.5``). Target: the replay's
time at most 3x comm's, its peak memory at most 2x (the ratios of the medians; each repeat's own ratio is
printed as the spread). Exits 1 only when a target is missed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _measure import Targets, ratio_spread, run_child
from _tile import DEFAULT_FIXTURE, tile

CHILD = """
import json, sys, time
from rnnprof.traces import load_events
t0 = time.perf_counter()
table = load_events(sys.argv[1])
t1 = time.perf_counter()
if sys.argv[2] == "comm":
    from rnnprof.analyzers.comm import analyze_comm
    report = analyze_comm(table)
    detail = {"steps": len(report.steps)}
else:
    from rnnprof.analyzers.replay import COMM, Change, whatif
    report = whatif(table, [Change(COMM, "", 0.5)])
    detail = {"steps": len(report.steps), "nodes": sum(s.chain_links for s in report.steps)}
t2 = time.perf_counter()
print(json.dumps({"load_s": t1 - t0, "analysis_s": t2 - t1, "total_s": t2 - t0, "events": len(table),
                  "rss_mb": peak_rss_mb(), **detail}))
"""
TARGET_RATIO = 3.0
TARGET_RSS = 2.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_090_000, help="trace events to write (all phases)")
    parser.add_argument("--fixture", type=Path, default=DEFAULT_FIXTURE)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="rnnprof-bench-") as tmp:
        path = Path(tmp) / "trace.json"
        t0 = time.perf_counter()
        n = tile(args.events, path, args.fixture)
        print(f"built {n:,} trace events ({path.stat().st_size / 1e6:,.0f} MB JSON) in {time.perf_counter() - t0:.1f} s")
        runs: dict[str, list[dict]] = {"comm": [], "whatif": []}
        for k in range(max(1, args.repeat)):
            sides = ("comm", "whatif") if k % 2 == 0 else ("whatif", "comm")
            for side in sides:
                runs[side].append(run_child(CHILD, str(path), side))
    comm, replay = runs["comm"], runs["whatif"]
    print(f"{replay[0]['events']:,} events kept, {replay[0]['steps']} steps replayed")
    for side, rows in runs.items():
        print(f"  {side}: load + analysis median {statistics.median(r['total_s'] for r in rows):.2f} s "
              f"(load {statistics.median(r['load_s'] for r in rows):.2f} s, analysis "
              f"{statistics.median(r['analysis_s'] for r in rows):.2f} s), peak RSS "
              f"{statistics.median(r['rss_mb'] for r in rows):,.0f} MB")
    ratio, spread = ratio_spread([r["total_s"] for r in replay], [r["total_s"] for r in comm])
    rss = statistics.median(r["rss_mb"] for r in replay) / statistics.median(r["rss_mb"] for r in comm)
    print(f"whatif / comm: time {ratio:.2f}x ({spread}), peak RSS {rss:.2f}x")
    targets = Targets()
    targets.at_most("whatif time / comm time", ratio, TARGET_RATIO, "x")
    targets.at_most("whatif peak RSS / comm peak RSS", rss, TARGET_RSS, "x")
    return targets.report()


if __name__ == "__main__":
    sys.exit(main())
