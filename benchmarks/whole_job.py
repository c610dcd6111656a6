"""Benchmark: a 16-rank job of ~1M Kineto events per rank, analysed by ``rnnprof comm FOLDER``.

    python benchmarks/whole_job.py [--ranks 16] [--events 1000000] [--jobs N] [--hta-folder] [--keep DIR]

Each rank's file is the 2-rank NCCL fixture tiled to ``--events`` (``_tile.tile``) with its own
``distributedInfo`` (rank r of ``--ranks``), its own clock offset, and its own extra idle time between
copies: the last rank is the slowest, so it must come out as the straggler. ``rnnprof comm`` runs
once in a fresh process (one rank per worker process, ``--jobs`` default: the cores); its time and
the peak RSS of its whole process tree are printed. Targets on 2 cores: <= 25 s, <= 1 GB.

For scale, holistictraceanalysis parses one rank file (``parse_trace_dataframe``); with ``--hta-folder``
it also runs its TraceAnalysis over the whole folder and its temporal breakdown (needs about 1.2 GB of
memory per million events of the job: only for small ``--events``). Exits 1 only when a target is missed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from _measure import Targets, run_child
from _tile import DEFAULT_FIXTURE

TILE_CHILD = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from _tile import tile
ranks, events, folder, fixture = int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]), Path(sys.argv[5])
total = 0
for r in range(ranks):
    total += tile(events, folder / f"rank{r}.json", fixture,
                  distributed={"backend": "nccl", "rank": r, "world_size": ranks},
                  offset_us=137.0 * r, gap_us=20.0 * r)
print(json.dumps({"events": total}))
"""

RNNPROF_CHILD = """
import io, json, sys, time
from rich.console import Console
t0 = time.perf_counter()
from rnnprof.cli import main
out = io.StringIO()
argv = ["comm", sys.argv[1], "--json"] + (["--jobs", sys.argv[2]] if sys.argv[2] != "0" else [])
code = main(argv, console=Console(file=out, width=200))
t1 = time.perf_counter()
doc = json.loads(out.getvalue())
last = [s["last_to_finish"] for s in doc["stragglers"]]
print(json.dumps({"code": code, "s": t1 - t0, "devices": len(doc["devices"]), "steps": len(doc["steps"]),
                  "stragglers": len(last), "most_last": max(set(last), key=last.count) if last else None,
                  "maxrss_mb": peak_rss_mb()}))
"""

HTA_ONE_CHILD = """
import json, logging, sys, time
logging.disable(logging.WARNING)
from hta.common.trace_parser import parse_trace_dataframe
from hta.configs.parser_config import ParserConfig
t0 = time.perf_counter()
meta, df, symbols = parse_trace_dataframe(sys.argv[1], ParserConfig())
print(json.dumps({"s": time.perf_counter() - t0, "rows": len(df), "maxrss_mb": peak_rss_mb()}))
"""

HTA_FOLDER_CHILD = """
import json, logging, sys, time
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
breakdown = analysis.get_temporal_breakdown(visualize=False)
print(json.dumps({"s": time.perf_counter() - t0, "ranks": len(breakdown), "maxrss_mb": peak_rss_mb()}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=16)
    parser.add_argument("--events", type=int, default=1_000_000, help="trace events per rank file")
    parser.add_argument("--jobs", type=int, default=0, help="worker processes (default: rnnprof's, the cores)")
    parser.add_argument("--fixture", type=Path, default=DEFAULT_FIXTURE)
    parser.add_argument("--no-hta", action="store_true", help="skip holistictraceanalysis")
    parser.add_argument("--hta-folder", action="store_true", help="also run HTA over the whole folder")
    parser.add_argument("--keep", type=Path, default=None, help="build the job in this folder (kept, reused)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="rnnprof-job-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        if len(list(folder.glob("rank*.json"))) != args.ranks:
            built = run_child(TILE_CHILD, str(Path(__file__).resolve().parent), str(args.ranks), str(args.events),
                              str(folder), str(args.fixture))["events"]
            print(f"built {args.ranks} rank files, {built:,} trace events "
                  f"({sum(p.stat().st_size for p in folder.glob('rank*.json')) / 1e6:,.0f} MB) "
                  f"in {time.perf_counter() - t0:.0f} s")
        ours = run_child(RNNPROF_CHILD, str(folder), str(args.jobs))
        if ours["code"] != 0:
            raise SystemExit(f"rnnprof comm exited {ours['code']}")
        print(f"rnnprof comm FOLDER: {ours['s']:.1f} s, peak RSS of its process tree {ours['maxrss_mb']:,.0f} MB; "
              f"{ours['devices']} devices, {ours['steps']} steps, {ours['stragglers']} straggler rows, "
              f"most often last: {ours['most_last']}")
        targets = Targets()
        targets.at_most("rnnprof comm on the job", ours["s"], 25.0, "s")
        targets.at_most("peak RSS of the process tree", ours["maxrss_mb"], 1024.0, "MB")
        targets.check("the slowest rank is the straggler", ours["most_last"] == f"rank{args.ranks - 1}/gpu:0",
                      f"{ours['most_last']} (expected rank{args.ranks - 1}/gpu:0)")
        if not args.no_hta:
            one = run_child(HTA_ONE_CHILD, str(folder / "rank0.json"))
            print(f"HTA parse_trace_dataframe of one rank file: {one['s']:.1f} s, peak RSS {one['maxrss_mb']:,.0f} MB; "
                  f"x{args.ranks} ranks = {one['s'] * args.ranks:.0f} s of parsing (an estimate), "
                  f"{one['s'] * args.ranks / ours['s']:.1f}x rnnprof's time for the whole job")
            if args.hta_folder:
                whole = run_child(HTA_FOLDER_CHILD, str(folder))
                print(f"HTA TraceAnalysis + temporal breakdown of the folder: {whole['s']:.1f} s, peak RSS "
                      f"{whole['maxrss_mb']:,.0f} MB; {whole['s'] / ours['s']:.1f}x rnnprof's time")
                targets.at_least("speed vs HTA on the folder", whole["s"] / ours["s"], 10.0, "x")
    return targets.report()


if __name__ == "__main__":
    sys.exit(main())
