"""Benchmark: every command that reads a whole trace (critical-path, whatif, audit, report) against ``rnnprof comm``,
side by side in one run, on one ~1.09M-event Kineto rank and on the 16- and 64-rank jobs of ``whole_job.py``.

    python benchmarks/every_command.py [--repeat 2] [--keep DIR] [--inputs rank,16,64] [--commands audit,...]
                                       [--events 1090000] [--fixture F] [--job-events 109000,200000]

The rank is ``_tile.tile`` of ``kineto-8rank-rank3-a100.json.gz`` (an A100 rank of HTA's 8-GPU job) to 1.09M trace
events (311 MB of JSON). The jobs are ``whole_job.build_job``'s: 16 ranks of ~109,000 events (the job
``whole_job.py`` compares with HTA) and 64 ranks of ~200,000 (the job of ``critical_path.py`` and ``whatif.py``),
each rank its own file, read as a folder. ``--keep DIR`` builds the inputs there once and reuses them (3.6 GB in
all); without it they are built in a temporary folder and removed.

Each command runs as a user runs it (``rnnprof.cli.main``: comm, critical-path and audit with ``--json``, whatif
``--comm 1.0 --json``, report ``-o FILE``), in a fresh process, the commands taking turns, ``--repeat`` times; the
best of its runs is its figure: wall time, CPU time of its process tree and peak RSS of its process tree (workers
included). Each is printed with its ratio to comm's, against the targets: audit at most 2x comm's time, report at
most 3x, whatif at most 3x; critical-path and whatif at most 2x comm's peak RSS. A job's comm, critical-path and
whatif read its ranks in worker processes (the cores); audit and report read them into one process. Exits 1 when
a target is missed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from _against_comm import compare, side_by_side, tiled
from _measure import Targets
from _tile import DEFAULT_FIXTURE, FIXTURES
from whole_job import build_job

A100 = FIXTURES / "kineto-8rank-rank3-a100.json.gz"
JOB_RANKS = (16, 64)
TIME_TARGETS = {"audit": 2.0, "report": 3.0, "whatif": 3.0}  # x comm's wall time
MEMORY_TARGETS = {"critical-path": 2.0, "whatif": 2.0}  # x comm's peak RSS


def commands(html: Path) -> dict[str, list[str]]:
    """Each side: the command and its flags after the input."""
    return {"comm": ["comm", "--json"], "critical-path": ["critical-path", "--json"],
            "whatif": ["whatif", "--comm", "1.0", "--json"], "audit": ["audit", "--json", "--fail-on", "never"],
            "report": ["report", "-o", str(html), "--force"]}


def _events(text: str) -> tuple[int, ...]:
    values = tuple(int(v) for v in text.split(","))
    if len(values) != len(JOB_RANKS):
        raise argparse.ArgumentTypeError(f"expected {len(JOB_RANKS)} counts, one per job ({JOB_RANKS})")
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--repeat", type=int, default=2, help="runs of each command per input (the best counts)")
    parser.add_argument("--keep", type=Path, default=None, help="build the inputs in this folder (kept, reused)")
    parser.add_argument("--inputs", default="rank,16,64", help="which inputs: rank, 16 (ranks), 64 (ranks)")
    parser.add_argument("--commands", default=None,
                        help="which commands beside comm (default: critical-path,whatif,audit,report)")
    parser.add_argument("--events", type=int, default=1_090_000, help="trace events of the tiled rank (all phases)")
    parser.add_argument("--fixture", type=Path, default=A100, help=f"the rank to tile (default: {A100.name})")
    parser.add_argument("--job-events", type=_events, default=(109_000, 200_000),
                        help="trace events per rank file of the 16- and 64-rank jobs")
    args = parser.parse_args()
    wanted = set(args.inputs.split(","))

    targets = Targets()
    with tempfile.TemporaryDirectory(prefix="rnnprof-bench-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        sides = commands(Path(tmp) / "report.html")
        if args.commands:
            sides = {side: argv for side, argv in sides.items() if side == "comm" or side in args.commands.split(",")}
        out = Path(tmp) / "out.txt"
        print(f"{os.cpu_count()} cores; each command the best of {args.repeat} runs", flush=True)
        if "rank" in wanted:
            path = folder / f"rank-{args.fixture.name.split('.')[0]}-{args.events}.json"
            if not path.exists():
                tiled(args.events, path, args.fixture)
            side_by_side(f"tiled rank ({path.stat().st_size / 1e6:,.0f} MB of JSON)",
                         compare(path, sides, args.repeat, out), TIME_TARGETS, MEMORY_TARGETS, targets)
        for ranks, events in zip(JOB_RANKS, args.job_events):
            if str(ranks) in wanted:
                job = folder / f"job-{ranks}x{events}"
                build_job(job, ranks, events, DEFAULT_FIXTURE)
                size = sum(p.stat().st_size for p in job.glob("rank*.json"))
                side_by_side(f"{ranks}-rank job ({ranks} x ~{events:,} events, {size / 1e6:,.0f} MB of JSON)",
                             compare(job, sides, args.repeat, out), TIME_TARGETS, MEMORY_TARGETS, targets)
    return targets.report()


if __name__ == "__main__":
    sys.exit(main())
