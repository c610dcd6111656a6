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
import sys
import tempfile
from pathlib import Path

from _against_comm import compare, report, tiled
from _measure import Targets
from _tile import DEFAULT_FIXTURE, FIXTURES
from whole_job import build_job

A100 = FIXTURES / "kineto-8rank-rank3-a100.json.gz"
COMMANDS = {"comm": ["comm", "--json"], "critical-path": ["critical-path", "--json"]}


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
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
        tiled(args.events, path, args.fixture)
        report("tiled rank", compare(path, COMMANDS, args.repeat, out), "critical-path", targets, 2.5, 2.0,
               rss_absolute=False)
        path.unlink()
        if not args.no_job:
            folder = args.job or Path(tmp) / "job"
            build_job(folder, args.job_ranks, args.job_events, DEFAULT_FIXTURE)
            print(f"job: {args.job_ranks} ranks of ~{args.job_events:,} events in {folder}")
            report(f"{args.job_ranks}-rank job", compare(folder, COMMANDS, args.job_repeat, out), "critical-path",
                   targets, 3.0, 1024.0, rss_absolute=True)
    return targets.report()


if __name__ == "__main__":
    sys.exit(main())
