"""rnnprof watch held to its scenarios: a 2-rank gloo DDP job (``_watch_job.py``: about 12 ms steps, 10 ms of them a
sleep in the forward) of 2,000 steps, watched as a user runs it (``rnnprof watch --out RUN -- torchrun ...``):

* straggler: rank 1 sleeps 30 ms more a step from step 1,200;
* memory: every rank keeps 1 MiB more a step from step 1,500;
* balanced: nothing planted.

For each, the table gives the anomalies raised (kind, ranks, step, steps after the change), the windows every rank
captured (at the same steps), the verdict's headline and its cost against the script's own clock (``time.sleep``
timed by ``time.perf_counter`` in the script) or memory rate against the planted one, and how the job ended; then
whether each scenario holds what it is held to (docs/commands/watch.md):

* straggler: raised within 20 steps of the change; a window on both ranks; the verdict names rank 1 with its cost
  within 40 % of the script's clock; the job completes;
* memory: growth named, its rate within 10 % of the planted 1 MiB a step;
* balanced: no anomaly, and no window but the baseline one.

    python benchmarks/watch_scenarios.py [--steps 2000] [--only straggler] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from rnnprof import rundir  # noqa: E402
from rnnprof.rundir.manifest import read_manifest_json  # noqa: E402
from rnnprof.rundir.windows import read_lines, window_dirs  # noqa: E402

JOB = HERE / "_watch_job.py"
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
MIB = 1 << 20


def scenarios(steps: int) -> dict[str, tuple[list[str], int | None]]:
    """name -> (the job's planting flags, the step of the change)."""
    straggle, grow = int(steps * 0.6), int(steps * 0.75)
    return {"straggler": (["--straggle-at", str(straggle), "--sleep-ms", "30"], straggle),
            "memory": (["--grow-at", str(grow), "--grow-kb", "1024"], grow),
            "balanced": ([], None)}


def run(name: str, flags: list[str], steps: int, scratch: Path) -> dict:
    out, clock = scratch / name, scratch / f"{name}-clock"
    clock.mkdir()
    command = [sys.executable, "-m", "rnnprof", "watch", "--out", str(out), "--", TORCHRUN, "--nproc-per-node", "2",
               str(JOB), str(clock), "--steps", str(steps), "--step-ms", "10", *flags]
    env = {"PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "localhost:0"}
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env})
    lines = read_lines(out)
    clocks = {r: json.loads((clock / f"rank{r}-clock.json").read_text()) for r in (0, 1)
              if (clock / f"rank{r}-clock.json").is_file()}
    windows = []
    for folder in window_dirs(out):
        manifest = read_manifest_json(folder)
        steps_of = [r.get("steps") for r in manifest.get("ranks", [])]
        verdict = json.loads((folder / rundir.VERDICT).read_text()) if (folder / rundir.VERDICT).is_file() else {}
        windows.append({"name": folder.name, "traces": len(manifest["captured"].get("kineto", [])),
                        "same_steps": len(steps_of) == 2 and steps_of[0] == steps_of[1], "verdict": verdict})
    return {"exit": done.returncode, "anomalies": [line for line in lines if "anomaly" in line], "windows": windows,
            "clocks": clocks, "stderr": done.stderr[-2000:]}


def judge(name: str, change: int | None, got: dict) -> tuple[list[str], bool]:
    """The scenario's figures as table cells, and whether it holds what it is held to."""
    anomalies = [a["anomaly"] for a in got["anomalies"]]
    raised = "; ".join(f"{a['kind']} r{','.join(map(str, a['ranks']))} @{a['step']}"
                       + (f" (+{a['step'] - change})" if change is not None else "") for a in anomalies) or "none"
    captured = [w for w in got["windows"] if not w["name"].startswith("000-")]
    cells = [name, raised, f"{len(got['windows'])} ({', '.join(w['name'] for w in got['windows'])})"]
    if name == "straggler":
        first = next((a for a in anomalies if a["kind"] == "straggler"), None)
        slept = statistics.median(got["clocks"][1]["sleep_s"].values()) if got["clocks"] else float("nan")
        window = next((a["window"] for a in got["anomalies"] if a["anomaly"]["kind"] == "straggler"), None)
        headline = next((w["verdict"].get("headline") for w in captured if w["name"] == window), None) or {}
        cost = headline.get("cost", float("nan"))
        cells += [f"{headline.get('kind')} r{headline.get('ranks')} {cost * 1e3:.1f} ms",
                  f"{slept * 1e3:.1f} ms", f"{cost / slept:.2f}"]
        held = (first is not None and first["ranks"] == [1] and 0 <= first["step"] - change <= 20
                and any(w["traces"] == 2 and w["same_steps"] for w in captured if w["name"] == window)
                and headline.get("ranks") == [1] and abs(cost / slept - 1) <= 0.4 and got["exit"] == 0)
    elif name == "memory":
        growth = [a for a in anomalies if a["kind"] == "memory_growth"]
        rates = [a["cost"] for a in growth]
        cells += [", ".join(f"r{a['ranks']} {a['cost'] / 1e6:.3f} MB/step" for a in growth) or "none",
                  f"{MIB / 1e6:.3f} MB/step", ", ".join(f"{r / MIB:.3f}" for r in rates) or "-"]
        held = bool(growth) and all(abs(r / MIB - 1) <= 0.1 for r in rates) and got["exit"] == 0
    else:
        cells += ["-", "-", "-"]
        held = not anomalies and not captured and got["exit"] == 0
    return [*cells, str(got["exit"]), "yes" if held else "NO"], held


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--only", choices=("straggler", "memory", "balanced"), default=None)
    parser.add_argument("--keep", metavar="DIR", default=None, help="keep the run directories in DIR")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="rnnprof-watch-") as temporary:
        scratch = args.keep or temporary
        for name, (flags, change) in scenarios(args.steps).items():
            if args.only and name != args.only:
                continue
            got = run(name, flags, args.steps, Path(scratch))
            cells, held = judge(name, change, got)
            rows.append(cells)
            if got["exit"]:
                print(f"{name}: rnnprof watch exited {got['exit']}:\n{got['stderr']}", file=sys.stderr)
    header = ["scenario", "anomalies (step, +steps after the change)", "windows", "verdict", "script's clock",
              "ratio", "exit", "held"]
    print(f"rnnprof watch, 2 gloo ranks, {args.steps} steps of ~12 ms:")
    print(" | ".join(header))
    for cells in rows:
        print(" | ".join(cells))
    if any(cells[-1] != "yes" for cells in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
