"""Benchmark: ``rnnprof whatif --comm 0.5 --json`` against ``rnnprof comm --json``, on one ~1.09M-event Kineto
rank and on a 64-rank job, each command in its own process.

    python benchmarks/whatif.py [--events 1090000] [--fixture F] [--repeat 3]
                                [--job-ranks 64] [--job-events 200000] [--job-repeat 2] [--job DIR] [--no-job]

The rank is ``_tile.tile`` of the 2-rank NCCL fixture's rank 0 (each copy with its own steps and launches), as
benchmarks/critical_path.py writes its rank. The job is ``whole_job.build_job``'s (``--job DIR``: built there once
and reused), analysed as a folder: comm a rank per worker, whatif each rank's part in a worker, then each step's
replay in a worker (the cores). The replay: every step's graph built, replayed unchanged and with communication
halved. Both sides run as commands (``rnnprof.cli.main``, ``--json`` to a file) in fresh processes, taking turns;
each one's wall time, CPU time and peak RSS of its process tree (workers included). Targets on 2 cores: whatif
at most 3x comm's time (the ratio of the medians; each repeat's own ratio is the spread); on the rank at most 2x
comm's peak RSS, on the job at most 1 GB. Exits 1 only when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _measure import Targets, ratio_spread, run_child
from _tile import DEFAULT_FIXTURE
from whole_job import build_job, measured

CHILD = """
import json, sys, time
t0 = time.perf_counter()
from rich.console import Console
from rnnprof.cli import main
argv = json.loads(sys.argv[1])
with open(sys.argv[2], "w") as out:
    code = main(argv, console=Console(file=out, width=200))
print(json.dumps({"code": code, "s": time.perf_counter() - t0, "rss_mb": peak_rss_mb()}))
"""
TILE_CHILD = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from _tile import tile
print(json.dumps({"events": tile(int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))}))
"""
COMMANDS = {"comm": ["comm", "--json"], "whatif": ["whatif", "--comm", "0.5", "--json"]}


def compare(path: Path, repeat: int, out: Path) -> dict[str, list[dict]]:
    """Each side ``repeat`` times on ``path``, taking turns (the first side alternating)."""
    runs: dict[str, list[dict]] = {side: [] for side in COMMANDS}
    sides = tuple(COMMANDS)
    for k in range(max(1, repeat)):
        for side in sides if k % 2 == 0 else sides[::-1]:
            argv = [COMMANDS[side][0], str(path), *COMMANDS[side][1:]]
            result = measured(CHILD, json.dumps(argv), str(out))
            if result["code"] != 0:
                raise SystemExit(f"rnnprof {side} exited {result['code']}")
            runs[side].append(result)
            print(f"  {side}: {result['s']:.1f} s (CPU {result['cpu_s']:.1f} s), peak RSS {result['rss_mb']:,.0f} MB, "
                  f"--json {out.stat().st_size / 1e6:,.1f} MB", flush=True)
    return runs


def report(label: str, runs: dict[str, list[dict]], targets: Targets, rss_limit: float, rss_absolute: bool) -> None:
    comm, replay = runs["comm"], runs["whatif"]
    ratio, spread = ratio_spread([r["s"] for r in replay], [r["s"] for r in comm])
    cpu = statistics.median(r["cpu_s"] for r in replay) / statistics.median(r["cpu_s"] for r in comm)
    rss_w, rss_c = (statistics.median(r["rss_mb"] for r in rows) for rows in (replay, comm))
    print(f"{label}: whatif {statistics.median(r['s'] for r in replay):.1f} s / comm "
          f"{statistics.median(r['s'] for r in comm):.1f} s = {ratio:.2f}x ({spread}); CPU time {cpu:.2f}x; "
          f"peak RSS {rss_w:,.0f} MB / {rss_c:,.0f} MB = {rss_w / rss_c:.2f}x; load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    targets.at_most(f"{label}: whatif time / comm time", ratio, 3.0, "x")
    if rss_absolute:
        targets.at_most(f"{label}: whatif peak RSS of its process tree", rss_w, rss_limit, "MB")
    else:
        targets.at_most(f"{label}: whatif peak RSS / comm peak RSS", rss_w / rss_c, rss_limit, "x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_090_000, help="trace events of the tiled rank (all phases)")
    parser.add_argument("--fixture", type=Path, default=DEFAULT_FIXTURE)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--job-ranks", type=int, default=64)
    parser.add_argument("--job-events", type=int, default=200_000, help="trace events per rank file of the job")
    parser.add_argument("--job-repeat", type=int, default=2)
    parser.add_argument("--job", type=Path, default=None, help="build the job in this folder (kept, reused)")
    parser.add_argument("--no-job", action="store_true", help="the tiled rank only")
    parser.add_argument("--no-rank", action="store_true", help="the job only")
    args = parser.parse_args()

    targets = Targets()
    with tempfile.TemporaryDirectory(prefix="rnnprof-bench-", dir=args.job.parent if args.job else None) as tmp:
        path, out = Path(tmp) / "trace.json", Path(tmp) / "out.json"
        if not args.no_rank:
            t0 = time.perf_counter()
            # in a child: Linux keeps a process's peak RSS across fork and exec, so this one must stay small
            n = run_child(TILE_CHILD, str(Path(__file__).resolve().parent), str(args.events), str(path),
                          str(args.fixture))["events"]
            print(f"built {n:,} trace events of {args.fixture.name} tiled ({path.stat().st_size / 1e6:,.0f} MB "
                  f"JSON) in {time.perf_counter() - t0:.1f} s", flush=True)
            report("tiled rank", compare(path, args.repeat, out), targets, 2.0, rss_absolute=False)
            path.unlink()
        if not args.no_job:
            folder = args.job or Path(tmp) / "job"
            build_job(folder, args.job_ranks, args.job_events, DEFAULT_FIXTURE)
            print(f"job: {args.job_ranks} ranks of ~{args.job_events:,} events in {folder}", flush=True)
            report(f"{args.job_ranks}-rank job", compare(folder, args.job_repeat, out), targets, 1024.0,
                   rss_absolute=True)
    return targets.report()


if __name__ == "__main__":
    sys.exit(main())
