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

    python benchmarks/whole_job.py --3d [TPxPPxDP] [--rounds 1] [--repeat 2] [--keep DIR]

``--3d`` (default ``4x4x4``: 64 ranks) measures a job of 3-D process groups instead: ``_job3d.build_job3d``'s
ranks, each in its TP, PP and DP group, made from the stored gloo traces of the built-in Transformer LM run
tensor-parallel, pipelined and sharded (FSDP) on 2 ranks (``--rounds`` times the three). ``rnnprof comm``,
``critical-path`` and ``whatif --comm 0.5``, each with ``--json`` in a fresh process, take turns ``--repeat``
times; the best run of each is held against comm's (time and CPU time, the peak RSS of the process tree). Before
the targets, their outputs are checked: comm lists every mesh group with its members (each rank in one group of
each kind), each kind's collectives in its kind's groups only, every collective matched across exactly its group's
members and each send with its receive at the neighbouring stage; critical-path's path of a pipeline step crosses
stages by matched sends; whatif's unchanged replay reproduces each step and halving communication changes the
replay. Targets on 2 cores: critical-path and whatif each <= 3x comm's time, each command <= 1 GB.
"""

from __future__ import annotations

import argparse
import json
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


JOB3D_CHILD = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from _job3d import build_job3d
tp, pp, dp = (int(x) for x in sys.argv[3].split("x"))
print(json.dumps({"events": build_job3d(Path(sys.argv[2]), tp, pp, dp, rounds=int(sys.argv[4]))}))
"""
COMMANDS_3D = {"comm": ["comm", "--json"], "critical-path": ["critical-path", "--json"],
               "whatif": ["whatif", "--comm", "0.5", "--json"]}


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


def build_job3d(folder: Path, mesh: str, rounds: int) -> None:
    """``_job3d``'s ranks of a ``TPxPPxDP`` mesh in ``folder`` (kept when it already holds that job)."""
    folder.mkdir(parents=True, exist_ok=True)
    made = folder / "job3d.txt"  # not *.json: the folder is read as a job
    if made.exists() and json.loads(made.read_text()) == {"mesh": mesh, "rounds": rounds}:
        return
    t0 = time.perf_counter()
    built = run_child(JOB3D_CHILD, str(Path(__file__).resolve().parent), str(folder), mesh, str(rounds))["events"]
    made.write_text(json.dumps({"mesh": mesh, "rounds": rounds}))
    print(f"built a {mesh} job: {len(list(folder.glob('rank*.json')))} rank files, {built:,} trace events "
          f"({sum(p.stat().st_size for p in folder.glob('rank*.json')) / 1e6:,.0f} MB) in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)


def check_job3d(outs: dict[str, Path], mesh: str, targets: Targets) -> None:
    """The 3-D job's outputs as built (the module docstring lists the checks)."""
    from _job3d import coordinates
    tp, pp, dp = (int(x) for x in mesh.split("x"))
    world = tp * pp * dp
    comm = json.loads(outs["comm"].read_text())
    groups = {g["name"]: g for g in comm["process_groups"]["groups"] if g["description"].startswith("mesh_")}
    kinds = {"mesh_tp": ("tp", tp), "mesh_pp": ("pp", pp), "mesh_dp": ("dp", dp)}
    wrong = []
    for g in groups.values():
        dim, size = kinds[g["description"]]
        others = {tuple(v for d, v in coordinates(r, tp, dp).items() if d != dim) for r in g["ranks"]}
        if len(g["ranks"]) != size or len(others) != 1:
            wrong.append(g["name"])
    member = {(r, kind) for g in groups.values() for r in g["ranks"] for kind in [g["description"]]}
    counts = {kind: sum(g["description"] == kind for g in groups.values()) for kind in kinds}
    targets.check("comm lists each rank's TP, PP and DP groups with their members",
                  not wrong and len(member) == 3 * world and counts == {"mesh_tp": world // tp, "mesh_pp": world // pp,
                                                                         "mesh_dp": world // dp},
                  f"{counts}, {len(member)} memberships of {3 * world}; wrong members: {wrong or 'none'}")
    expected = {"all-reduce": "mesh_tp", "all-gather": "mesh_dp", "reduce-scatter": "mesh_dp", "send/recv": "mesh_pp"}
    rows = comm["process_groups"]["traffic"]
    misplaced = [(r["group"], r["collective"]) for r in rows
                 if groups.get(r["group"], {}).get("description") != expected.get(r["collective"])]
    targets.check("each kind's collectives in its kind's groups", not misplaced and bool(rows),
                  f"{len(rows)} group x collective x phase rows; misplaced: {misplaced[:5] or 'none'}")
    matched = comm["collectives"]
    bad, p2p = [], 0
    for c in matched["collectives"]:
        ranks = sorted(int(a["rank"].removeprefix("rank")) for a in c["arrivals"])
        listed = groups.get(c["group"], {}).get("ranks", [])
        if c["collective_type"] == "send/recv":
            p2p += 1
            if len(ranks) != 2 or not set(ranks) <= set(listed) or ranks[1] - ranks[0] != tp * dp:
                bad.append((c["group"], ranks))
        elif ranks != listed:
            bad.append((c["group"], ranks))
    targets.check("collectives matched across exactly their group's members, sends at the neighbouring stage",
                  not bad and matched["unmatched"] == 0 and matched["matched"] == len(matched["collectives"]),
                  f"{matched['matched']:,} matched ({p2p:,} sends with their receives), {matched['unmatched']} "
                  f"unmatched; wrong: {bad[:3] or 'none'}")
    path = json.loads(outs["critical-path"].read_text())
    crossing = {s["step"]: len({link["device"] for link in s["links"]}) for s in path["steps"]}
    by_collective = sum(link["edge"] == "collective" for s in path["steps"] for link in s["links"])
    targets.check("critical-path crosses ranks by matched collectives", max(crossing.values(), default=0) > 1
                  and by_collective > 0, f"ranks on each step's path: {crossing}; {by_collective} collective edges")
    whatif = json.loads(outs["whatif"].read_text())
    off = [s["step"] for s in whatif["steps"] if abs(s["replayed_us"] - s["measured_us"]) > 0.01 * s["measured_us"]]
    changed = sum(whatif["changed_nodes"].values())
    median = whatif["median"]
    targets.check("whatif replays every step unchanged within 1 %, and --comm 0.5 changes it",
                  not off and changed > 0 and median["predicted_us"] < median["replayed_us"],
                  f"{len(whatif['steps'])} steps, off: {off or 'none'}; {changed:,} nodes changed; median step "
                  f"{median['replayed_us'] / 1e3:.1f} ms -> {median['predicted_us'] / 1e3:.1f} ms")


def measure_job3d(folder: Path, mesh: str, repeat: int, scratch: Path, targets: Targets) -> None:
    """comm, critical-path and whatif on the 3-D job, taking turns (their outputs in ``scratch``); their outputs
    checked, then timed."""
    from _against_comm import compare, side_by_side
    outs = {side: scratch / f"{side}.json" for side in COMMANDS_3D}
    runs = compare(folder, COMMANDS_3D, repeat, outs)
    check_job3d(outs, mesh, targets)
    side_by_side(f"{mesh} job ({len(list(folder.glob('rank*.json')))} ranks)", runs,
                 {"critical-path": 3.0, "whatif": 3.0}, {}, targets)
    for side, rows in runs.items():
        targets.at_most(f"{side}: peak RSS of its process tree", min(r["rss_mb"] for r in rows), 1024.0, "MB")


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
    parser.add_argument("--3d", dest="mesh", nargs="?", const="4x4x4", default=None, metavar="TPxPPxDP",
                        help="measure comm, critical-path and whatif on a job of 3-D process groups instead "
                             "(default 4x4x4)")
    parser.add_argument("--rounds", type=int, default=1, help="--3d: the tp, pp and fsdp segments per rank")
    parser.add_argument("--repeat", type=int, default=2, help="--3d: runs of each command")
    args = parser.parse_args()

    targets = Targets()
    with tempfile.TemporaryDirectory(prefix="rnnprof-job-") as tmp:
        folder = args.keep or Path(tmp)
        if args.mesh:
            folder = args.keep or Path(tmp) / "job"
            build_job3d(folder, args.mesh, args.rounds)
            measure_job3d(folder, args.mesh, args.repeat, Path(tmp), targets)
            return targets.report()
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
