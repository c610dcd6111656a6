"""Benchmark: ``rnnprof critical-path --json`` against ``rnnprof comm --json``, on one ~1.09M-event rank of a real
8-GPU job tiled in time and on a 64-rank job, each command in its own process.

    python benchmarks/critical_path.py [--events 1090000] [--fixture F] [--repeat 3]
                                       [--job-ranks 64] [--job-events 200000] [--job-repeat 2] [--job DIR]
                                       [--no-job]

The rank is ``_tile.tile`` of ``kineto-8rank-rank3-a100.json.gz`` (an A100 rank of an 8-GPU job, each copy with
its own steps and launches). The job is ``whole_job.build_job``'s: ``--job-ranks`` files of ``--job-events``
events (the 2-rank NCCL fixture tiled, each rank with its own clock offset and a slower last rank), analysed as a
folder, a rank per worker process (the cores). Both sides run as commands (``rnnprof.cli.main``, ``--json`` to a
file) in fresh processes, taking turns; each one's wall time and the peak RSS of its process tree (workers
included). Targets on 2 cores: on the rank, critical-path at most 2.5x comm's time (the ratio of the medians;
each repeat's own ratio is the spread) and 2x its peak RSS; on the job, at most 3x comm's time and 1 GB. ``--job
DIR`` builds the job there once and reuses it (2.8 GB of JSON at 64 x 200,000 events). Exits 1 only when a target
is missed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _measure import Targets, ratio_spread, run_child
from _tile import DEFAULT_FIXTURE, FIXTURES
from whole_job import build_job, measured

CHILD = """
import json, sys, time
t0 = time.perf_counter()
from rich.console import Console
from rnnprof.cli import main
with open(sys.argv[3], "w") as out:
    code = main([sys.argv[1], sys.argv[2], "--json"], console=Console(file=out, width=200))
print(json.dumps({"code": code, "s": time.perf_counter() - t0, "rss_mb": peak_rss_mb()}))
"""
TILE_CHILD = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from _tile import tile
print(json.dumps({"events": tile(int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))}))
"""
A100 = FIXTURES / "kineto-8rank-rank3-a100.json.gz"
SIDES = ("comm", "critical-path")


def compare(path: Path, repeat: int, out: Path) -> dict[str, list[dict]]:
    """Each side ``repeat`` times on ``path``, taking turns (the first side alternating)."""
    runs: dict[str, list[dict]] = {side: [] for side in SIDES}
    for k in range(max(1, repeat)):
        for side in SIDES if k % 2 == 0 else SIDES[::-1]:
            result = measured(CHILD, side, str(path), str(out))
            if result["code"] != 0:
                raise SystemExit(f"rnnprof {side} exited {result['code']}")
            result["out_mb"] = out.stat().st_size / 1e6
            runs[side].append(result)
            print(f"  {side}: {result['s']:.1f} s (CPU {result['cpu_s']:.1f} s), peak RSS {result['rss_mb']:,.0f} MB, "
                  f"--json {result['out_mb']:,.1f} MB", flush=True)
    return runs


def report(label: str, runs: dict[str, list[dict]], targets: Targets, time_limit: float, rss_limit: float,
           rss_absolute: bool) -> None:
    comm, cp = runs["comm"], runs["critical-path"]
    ratio, spread = ratio_spread([r["s"] for r in cp], [r["s"] for r in comm])
    cpu = statistics.median(r["cpu_s"] for r in cp) / statistics.median(r["cpu_s"] for r in comm)
    rss_cp, rss_comm = (statistics.median(r["rss_mb"] for r in rows) for rows in (cp, comm))
    print(f"{label}: critical-path {statistics.median(r['s'] for r in cp):.1f} s / comm "
          f"{statistics.median(r['s'] for r in comm):.1f} s = {ratio:.2f}x ({spread}); CPU time {cpu:.2f}x; "
          f"peak RSS {rss_cp:,.0f} MB / {rss_comm:,.0f} MB = {rss_cp / rss_comm:.2f}x; load average "
          f"{os.getloadavg()[0]:.1f}")
    targets.at_most(f"{label}: critical-path time / comm time", ratio, time_limit, "x")
    if rss_absolute:
        targets.at_most(f"{label}: critical-path peak RSS of its process tree", rss_cp, rss_limit, "MB")
    else:
        targets.at_most(f"{label}: critical-path peak RSS / comm peak RSS", rss_cp / rss_comm, rss_limit, "x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_090_000, help="trace events of the tiled rank (all phases)")
    parser.add_argument("--fixture", type=Path, default=A100, help=f"the rank to tile (default: {A100.name})")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--job-ranks", type=int, default=64)
    parser.add_argument("--job-events", type=int, default=200_000, help="trace events per rank file of the job")
    parser.add_argument("--job-repeat", type=int, default=2)
    parser.add_argument("--job", type=Path, default=None, help="build the job in this folder (kept, reused)")
    parser.add_argument("--no-job", action="store_true", help="the tiled rank only")
    args = parser.parse_args()

    targets = Targets()
    with tempfile.TemporaryDirectory(prefix="rnnprof-bench-", dir=args.job.parent if args.job else None) as tmp:
        path, out = Path(tmp) / "trace.json", Path(tmp) / "out.json"
        t0 = time.perf_counter()
        # in a child: Linux keeps a process's peak RSS across fork and exec, so this one must stay small
        n = run_child(TILE_CHILD, str(Path(__file__).resolve().parent), str(args.events), str(path),
                      str(args.fixture))["events"]
        print(f"built {n:,} trace events of {args.fixture.name} tiled ({path.stat().st_size / 1e6:,.0f} MB JSON) "
              f"in {time.perf_counter() - t0:.1f} s")
        report("tiled rank", compare(path, args.repeat, out), targets, 2.5, 2.0, rss_absolute=False)
        path.unlink()
        if not args.no_job:
            folder = args.job or Path(tmp) / "job"
            build_job(folder, args.job_ranks, args.job_events, DEFAULT_FIXTURE)
            print(f"job: {args.job_ranks} ranks of ~{args.job_events:,} events in {folder}")
            report(f"{args.job_ranks}-rank job", compare(folder, args.job_repeat, out), targets, 3.0, 1024.0,
                   rss_absolute=True)
    return targets.report()


if __name__ == "__main__":
    sys.exit(main())
