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
import sys
import tempfile
from pathlib import Path

from _against_comm import compare, report, tiled
from _measure import Targets
from _tile import DEFAULT_FIXTURE
from whole_job import build_job

COMMANDS = {"comm": ["comm", "--json"], "whatif": ["whatif", "--comm", "0.5", "--json"]}


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
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
            tiled(args.events, path, args.fixture)
            report("tiled rank", compare(path, COMMANDS, args.repeat, out), "whatif", targets, 3.0, 2.0,
                   rss_absolute=False)
            path.unlink()
        if not args.no_job:
            folder = args.job or Path(tmp) / "job"
            build_job(folder, args.job_ranks, args.job_events, DEFAULT_FIXTURE)
            print(f"job: {args.job_ranks} ranks of ~{args.job_events:,} events in {folder}", flush=True)
            report(f"{args.job_ranks}-rank job", compare(folder, COMMANDS, args.job_repeat, out), "whatif", targets,
                   3.0, 1024.0, rss_absolute=True)
    return targets.report()


if __name__ == "__main__":
    sys.exit(main())
