"""Shared by the benchmarks that hold rnnprof commands against ``rnnprof comm`` (critical_path.py, whatif.py,
every_command.py): each command run by ``rnnprof.cli.main`` (its output to a file) in a fresh process, the sides
taking turns; each run's wall time, CPU time and the peak RSS of its process tree; the ratio of the medians
(``report``) or of the best runs (``side_by_side``) against targets."""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

from _measure import Targets, ratio_spread, run_child
from whole_job import measured

COMMAND_CHILD = """
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


def tiled(events: int, path: Path, fixture: Path) -> None:
    """``_tile.tile`` of ``fixture`` to ``events`` trace events in ``path``, built in a child: Linux keeps a
    process's peak RSS across fork and exec, so the benchmark itself must stay small."""
    t0 = time.perf_counter()
    n = run_child(TILE_CHILD, str(Path(__file__).resolve().parent), str(events), str(path), str(fixture))["events"]
    print(f"built {n:,} trace events of {fixture.name} tiled ({path.stat().st_size / 1e6:,.0f} MB JSON) "
          f"in {time.perf_counter() - t0:.1f} s", flush=True)


def compare(path: Path, commands: dict[str, list[str]], repeat: int, out: Path | dict[str, Path]) -> dict[str, list[dict]]:
    """Each side (``commands``: side -> the command and its flags after the input) ``repeat`` times on ``path``,
    taking turns (in order, then in reverse order, and so on), its output to ``out`` (or ``out[side]``: each
    side's last output kept)."""
    runs: dict[str, list[dict]] = {side: [] for side in commands}
    sides = tuple(commands)
    for k in range(max(1, repeat)):
        for side in sides if k % 2 == 0 else sides[::-1]:
            argv = [commands[side][0], str(path), *commands[side][1:]]
            written = out[side] if isinstance(out, dict) else out
            result = measured(COMMAND_CHILD, json.dumps(argv), str(written))
            if result["code"] != 0:
                raise SystemExit(f"rnnprof {side} exited {result['code']}")
            runs[side].append(result)
            print(f"  {side}: {result['s']:.1f} s (CPU {result['cpu_s']:.1f} s), peak RSS {result['rss_mb']:,.0f} MB, "
                  f"--json {written.stat().st_size / 1e6:,.1f} MB", flush=True)
    return runs


def report(label: str, runs: dict[str, list[dict]], side: str, targets: Targets, time_limit: float,
           rss_limit: float, rss_absolute: bool) -> None:
    """``side`` against comm: the ratio of the median wall times (each repeat's own ratio as the spread), of the
    median CPU times, and the peak RSS (``rss_absolute``: in MB, else as a ratio to comm's)."""
    comm, other = runs["comm"], runs[side]
    ratio, spread = ratio_spread([r["s"] for r in other], [r["s"] for r in comm])
    cpu = statistics.median(r["cpu_s"] for r in other) / statistics.median(r["cpu_s"] for r in comm)
    rss, rss_comm = (statistics.median(r["rss_mb"] for r in rows) for rows in (other, comm))
    print(f"{label}: {side} {statistics.median(r['s'] for r in other):.1f} s / comm "
          f"{statistics.median(r['s'] for r in comm):.1f} s = {ratio:.2f}x ({spread}); CPU time {cpu:.2f}x; "
          f"peak RSS {rss:,.0f} MB / {rss_comm:,.0f} MB = {rss / rss_comm:.2f}x; load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    targets.at_most(f"{label}: {side} time / comm time", ratio, time_limit, "x")
    if rss_absolute:
        targets.at_most(f"{label}: {side} peak RSS of its process tree", rss, rss_limit, "MB")
    else:
        targets.at_most(f"{label}: {side} peak RSS / comm peak RSS", rss / rss_comm, rss_limit, "x")


def side_by_side(label: str, runs: dict[str, list[dict]], time_targets: dict[str, float],
                 memory_targets: dict[str, float], targets: Targets) -> None:
    """A table of each side's best run (wall time, CPU time and peak RSS of its process tree, each the least of its
    runs) and its ratios to comm's, with the targets (``time_targets``, ``memory_targets``: side -> the most times
    comm's) PASS or FAIL; the targets join ``targets``. The load average is printed with it: the machine may be
    shared."""
    best = {side: {key: min(r[key] for r in rows) for key in ("s", "cpu_s", "rss_mb")} for side, rows in runs.items()}
    comm = best["comm"]
    print(f"\n{label}, best of {min(len(rows) for rows in runs.values())} runs each; load average "
          f"{' / '.join(f'{x:.1f}' for x in os.getloadavg())} (1 / 5 / 15 min) at the end", flush=True)
    print("| command | s | CPU s | peak MB | x comm time | x comm CPU | x comm peak | targets |")
    print("|---|---|---|---|---|---|---|---|")
    for side, b in best.items():
        time_x, cpu_x, rss_x = b["s"] / comm["s"], b["cpu_s"] / comm["cpu_s"], b["rss_mb"] / comm["rss_mb"]
        verdicts = []
        for what, ratio, limits in (("time", time_x, time_targets), ("peak", rss_x, memory_targets)):
            if side in limits:
                verdicts.append(f"{what} <= {limits[side]:g}x {'PASS' if ratio <= limits[side] else 'FAIL'}")
                targets.at_most(f"{label}: {side} {what} / comm {what}", ratio, limits[side], "x")
        print(f"| {side} | {b['s']:.2f} | {b['cpu_s']:.2f} | {b['rss_mb']:,.0f} | {time_x:.2f} | {cpu_x:.2f} | "
              f"{rss_x:.2f} | {'; '.join(verdicts)} |", flush=True)
