"""Benchmark: a 16-rank job of ~1M Kineto events per rank, analysed by ``rnnprof comm FOLDER``, and a
16-rank job of ~100k events per rank analysed by rnnprof and by holistictraceanalysis (HTA) side by side.

    python benchmarks/whole_job.py [--ranks 16] [--events 1000000] [--jobs N] [--no-hta]
                                   [--hta-ranks 16] [--hta-events 109000] [--keep DIR]

Each rank's file is the 2-rank NCCL fixture tiled to ``--events`` (``_tile.tile``) with its own
``distributedInfo`` (rank r of ``--ranks``), its own clock offset, and its own extra idle time between
copies: the last rank is the slowest, so it must come out as the straggler. ``rnnprof comm`` runs
once in a fresh process (one rank per worker process, ``--jobs`` default: the cores); its time, the
CPU time and the peak RSS of its whole process tree are printed. Targets on 2 cores: <= 25 s, <= 1 GB.
For scale, HTA parses one of its rank files (``parse_trace_dataframe``).

HTA keeps every rank of a job in memory (about 1.2 GB per million events), so it cannot hold the 16M
events of that job; the comparison runs on a second job built the same way, ``--hta-ranks`` files of
``--hta-events`` events (the fixture is tiled whole, so the count is rounded to a number of copies).
``rnnprof comm FOLDER`` and HTA's ``TraceAnalysis(trace_dir=FOLDER)`` with its temporal breakdown each
run in their own process, one after the other; the ratio of their times is the speed-up (target >= 10x),
and each one's peak RSS is that of its process tree (HTA parses ranks in forked workers: their RSS is
summed, pages they share counted in each). What each computes differs: HTA's temporal breakdown is, per
rank, the idle, compute and non-compute time of the GPU work launched in every ``ProfilerStep`` but the
last; ``rnnprof comm`` computes that over the whole trace and per step, and also communication and
overlap, idle time by cause per device and stream, and the collectives matched across ranks with their
skew and the straggler. HTA's comm/comp overlap and idle-time breakdown, which ``comm`` also covers, are
timed after its temporal breakdown and printed apart (not in the ratio). Exits 1 only when a target is missed.
"""

from __future__ import annotations

import argparse
import resource
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
import json, logging, sys, time, warnings
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_dir=sys.argv[1])
parsed = time.perf_counter()
breakdown = analysis.get_temporal_breakdown(visualize=False)
t1 = time.perf_counter()
analysis.get_comm_comp_overlap(visualize=False)
analysis.get_idle_time_breakdown(ranks=sorted(analysis.t.traces), visualize=False)
print(json.dumps({"s": t1 - t0, "parse_s": parsed - t0, "extra_s": time.perf_counter() - t1,
                  "ranks": len(breakdown), "maxrss_mb": peak_rss_mb()}))
"""


def build_job(folder: Path, ranks: int, events: int, fixture: Path) -> None:
    """``ranks`` tiled rank files in ``folder`` (kept when it already holds that many)."""
    folder.mkdir(parents=True, exist_ok=True)
    if len(list(folder.glob("rank*.json"))) == ranks:
        return
    t0 = time.perf_counter()
    built = run_child(TILE_CHILD, str(Path(__file__).resolve().parent), str(ranks), str(events), str(folder),
                      str(fixture))["events"]
    print(f"built {ranks} rank files, {built:,} trace events "
          f"({sum(p.stat().st_size for p in folder.glob('rank*.json')) / 1e6:,.0f} MB) "
          f"in {time.perf_counter() - t0:.0f} s")


def measured(code: str, *argv: str) -> dict:
    """``run_child``, with ``cpu_s``: the CPU time of the child's process tree (user + system, the
    processes it waited for included), which the load of a shared machine changes less than its time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = run_child(code, *argv)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result


def rnnprof_comm(folder: Path, jobs: int) -> dict:
    result = measured(RNNPROF_CHILD, str(folder), str(jobs))
    if result["code"] != 0:
        raise SystemExit(f"rnnprof comm exited {result['code']}")
    return result


def compare_with_hta(folder: Path, ranks: int, events: int, jobs: int, targets: Targets) -> None:
    """``rnnprof comm`` and HTA on the same folder of ``ranks`` rank files, one after the other."""
    ours = rnnprof_comm(folder, jobs)
    print(f"rnnprof comm FOLDER: {ours['s']:.1f} s (CPU {ours['cpu_s']:.1f} s), peak RSS of its process tree "
          f"{ours['maxrss_mb']:,.0f} MB")
    hta = measured(HTA_FOLDER_CHILD, str(folder))
    print(f"HTA TraceAnalysis + temporal breakdown of the folder: {hta['s']:.1f} s (parsing {hta['parse_s']:.1f} s; "
          f"CPU {hta['cpu_s']:.1f} s), peak RSS of its process tree {hta['maxrss_mb']:,.0f} MB; "
          f"then its comm/comp overlap and idle breakdown: {hta['extra_s']:.1f} s more")
    print(f"rnnprof is {hta['s'] / ours['s']:.1f}x faster than HTA on the folder "
          f"({hta['cpu_s'] / ours['cpu_s']:.1f}x less CPU time)")
    targets.at_least(f"speed vs HTA on {ranks} ranks of {events:,} events (1 run of each: HTA takes minutes)",
                     hta["s"] / ours["s"], 10.0, "x")
    targets.at_most("peak RSS of rnnprof's process tree on that job", ours["maxrss_mb"], 1024.0, "MB")


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=16)
    parser.add_argument("--events", type=int, default=1_000_000, help="trace events per rank file")
    parser.add_argument("--jobs", type=int, default=0, help="worker processes (default: rnnprof's, the cores)")
    parser.add_argument("--fixture", type=Path, default=DEFAULT_FIXTURE)
    parser.add_argument("--no-hta", action="store_true", help="skip holistictraceanalysis")
    parser.add_argument("--hta-ranks", type=int, default=16, help="rank files of the job compared with HTA")
    parser.add_argument("--hta-events", type=int, default=109_000,
                        help="trace events per rank file of the job compared with HTA (0: no comparison)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="build the job in this folder, the job compared with HTA in its hta/ (kept, reused)")
    args = parser.parse_args()

    targets = Targets()
    with tempfile.TemporaryDirectory(prefix="rnnprof-job-") as tmp:
        folder = args.keep or Path(tmp)
        build_job(folder, args.ranks, args.events, args.fixture)
        ours = rnnprof_comm(folder, args.jobs)
        print(f"rnnprof comm FOLDER: {ours['s']:.1f} s (CPU {ours['cpu_s']:.1f} s, "
              f"{ours['cpu_s'] / args.ranks:.2f} s per rank, start-up included), peak RSS of its process tree "
              f"{ours['maxrss_mb']:,.0f} MB; {ours['devices']} devices, {ours['steps']} steps, "
              f"{ours['stragglers']} straggler rows, most often last: {ours['most_last']}")
        targets.at_most("rnnprof comm on the job", ours["s"], 25.0, "s")
        targets.at_most("peak RSS of the process tree", ours["maxrss_mb"], 1024.0, "MB")
        targets.check("the slowest rank is the straggler", ours["most_last"] == f"rank{args.ranks - 1}/gpu:0",
                      f"{ours['most_last']} (expected rank{args.ranks - 1}/gpu:0)")
        if not args.no_hta:
            one = run_child(HTA_ONE_CHILD, str(folder / "rank0.json"))
            print(f"HTA parse_trace_dataframe of one rank file: {one['s']:.1f} s, peak RSS {one['maxrss_mb']:,.0f} MB; "
                  f"x{args.ranks} ranks = {one['s'] * args.ranks:.0f} s of parsing (an estimate), "
                  f"{one['s'] * args.ranks / ours['s']:.1f}x rnnprof's time for the whole job")
            if args.hta_events > 0:
                small = folder / "hta"
                print(f"compared with HTA: {args.hta_ranks} ranks of ~{args.hta_events:,} events")
                build_job(small, args.hta_ranks, args.hta_events, args.fixture)
                compare_with_hta(small, args.hta_ranks, args.hta_events, args.jobs, targets)
    return targets.report()


if __name__ == "__main__":
    sys.exit(main())
