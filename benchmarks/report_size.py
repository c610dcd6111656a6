"""Benchmark: ``rnnprof report`` against ``rnnprof comm`` on a ~1M-event Kineto trace.

    python benchmarks/report_size.py [--events 1000000] [--repeat 3]

The trace is the one ``load_kineto.py`` and ``comm_1m.py`` use (``_tile.tile``: a real 2-rank NCCL
trace tiled in time). Each command runs as the user runs it, ``python -m rnnprof ...`` in its own
process, alternating, ``--repeat`` times; the first report builds the Vega bundle into the cache
folder if it is not there yet, and is not timed. Targets: the report's file is <= 5 MB and its best
wall-clock time is <= 2x the best of ``rnnprof comm`` on the same trace. CPU time (user + system) is
printed beside it: on a shared machine it moves less than the wall clock. Exits 1 only when a target
is missed.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _measure import Targets, spread, spread_of
from _tile import DEFAULT_FIXTURE, tile

ROOT = Path(__file__).resolve().parents[1]


def _timed(*argv: str) -> tuple[float, float]:
    """Wall-clock and CPU (user + system) seconds of ``python -m rnnprof ARGV``."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "rnnprof", *argv], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, env=env)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"rnnprof {argv[0]} failed:\n{done.stderr[-3000:]}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="trace events to write (all phases)")
    parser.add_argument("--fixture", type=Path, default=DEFAULT_FIXTURE)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="rnnprof-bench-") as tmp:
        trace, page = Path(tmp) / "trace.json", Path(tmp) / "report.html"
        t0 = time.perf_counter()
        n = tile(args.events, trace, args.fixture)
        print(f"built {n:,} trace events ({trace.stat().st_size / 1e6:,.0f} MB JSON) "
              f"in {time.perf_counter() - t0:.1f} s")
        _timed("report", str(trace), "-o", str(page), "--force")  # warms the Vega bundle cache
        comm, report = [], []
        for _ in range(max(1, args.repeat)):
            comm.append(_timed("comm", str(trace)))
            report.append(_timed("report", str(trace), "-o", str(page), "--force"))
        size_mb = page.stat().st_size / 1e6
    wall = {name: [w for w, _ in runs] for name, runs in (("comm", comm), ("report", report))}
    cpu = {name: [c for _, c in runs] for name, runs in (("comm", comm), ("report", report))}
    for name in ("comm", "report"):
        print(f"rnnprof {name:<7} wall {spread(wall[name])}; CPU {spread(cpu[name])}")
    print(f"report.html {size_mb:.2f} MB; report / comm (best): wall {min(wall['report']) / min(wall['comm']):.2f}x, "
          f"CPU {min(cpu['report']) / min(cpu['comm']):.2f}x")
    targets = Targets()
    targets.at_most("report size", size_mb, 5.0, "MB")
    pairs = spread_of([r / c for r, c in zip(wall["report"], wall["comm"])])  # each repeat's own ratio
    targets.at_most(f"report time / comm time (best wall-clock of each; {pairs})",
                    min(wall["report"]) / min(wall["comm"]), 2.0, "x")
    return targets.report()


if __name__ == "__main__":
    sys.exit(main())
