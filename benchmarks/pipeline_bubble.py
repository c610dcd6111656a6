"""Benchmark: ``rnnprof pipeline`` against a schedule's theory and a planted slow stage, on real pipelines.

    python benchmarks/pipeline_bubble.py [--keep DIR]

Real runs of the built-in Transformer LM as a 2-rank CPU (gloo) pipeline (``rnnprof trace --framework torch
--model transformer --parallel pp``: 4 blocks of 256 units, windows of 64 tokens, batch 64, 3 traced steps; a
micro-batch's work, tens of ms, well above what a transfer between the ranks takes on a loaded host): 1F1B
and GPipe with 4 and 8 micro-batches, interleaved 1F1B (2 stages per rank) with 4. The oracle is the schedule's
theory, (p-1)/(m+p-1) and (p-1)/(v*m+p-1): the measured bubble must track its trend (8 micro-batches leave less
bubble than 4, for each schedule: the median of 3 runs of each, as one run's bubble moves by 10 points on a loaded
host), and stand at or above it (transfers and unequal stages only add to it); the table also gives the part the
schedule makes (warm-up, cool-down, waiting on a neighbour), which the theory models. Then
two planted slow stages, which ``pipeline`` must name as the imbalance: ``--stage-layers 3,1`` (stage 0 holds 3
blocks, stage 1 one and the head), and ``tests/pipeline_slow_stage_job.py`` under ``rnnprof trace -- torchrun``
(a user's 1F1B script, no ranges: stage 1 multiplies matrices for 8 ms in each micro-batch's forward, timed by
the script's own clock), whose stage's excess over the other must be the planted time within 25 %. About five
minutes on 2 cores. Exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = ["--framework", "torch", "--model", "transformer", "--layers", "4", "--units", "256", "--heads", "4",
         "--vocab-size", "200", "--src-max-len", "64", "--batch-size", "64", "--optimizer", "sgd", "--devices", "2",
         "--warmup", "1", "--batches", "2", "--trace-steps", "3", "--parallel", "pp"]
REPEATS = 3  # the trend's runs, each traced this many times: one run's bubble moves by 10 points on a loaded host
RUNS = {"1f1b-m4": ["--schedule", "1f1b", "--micro-batches", "4"],
        "1f1b-m8": ["--schedule", "1f1b", "--micro-batches", "8"],
        "gpipe-m4": ["--schedule", "gpipe", "--micro-batches", "4"],
        "gpipe-m8": ["--schedule", "gpipe", "--micro-batches", "8"],
        "interleaved-m4": ["--schedule", "interleaved-1f1b", "--micro-batches", "4"],
        "stage-layers-3,1": ["--schedule", "1f1b", "--micro-batches", "4", "--stage-layers", "3,1"]}
PLANTED_MS = 8.0
SLOW_TOLERANCE = 0.25


def rnnprof(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run([sys.executable, "-m", "rnnprof", *argv], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=ROOT)


def pipeline(run: Path) -> dict:
    done = rnnprof("pipeline", str(run), "--json")
    if done.returncode != 0:
        raise SystemExit(f"rnnprof pipeline {run} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)


def traced(folder: Path, name: str, argv: list[str]) -> dict:
    out = folder / name
    shutil.rmtree(out, ignore_errors=True)
    done = rnnprof("trace", *MODEL, *argv, "--out", str(out))
    if done.returncode != 0:
        raise SystemExit(f"rnnprof trace {name} failed:\n{done.stderr[-2000:]}")
    return pipeline(out)


def schedule_part(doc: dict) -> float:
    """Of every rank's window, the share of warm-up, cool-down and waiting on a neighbour: the bubble the schedule
    makes, which the theory models (it takes transfers as free)."""
    window = sum(s["window_us"] for s in doc["stages"])
    made = sum(s["warm_up_us"] + s["cool_down_us"] + s["neighbour_us"] for s in doc["stages"])
    return 100 * made / window if window else 0.0


def slow_stage(folder: Path) -> tuple[dict, float]:
    """The user's script with its planted stage: ``pipeline``'s document, and the planted time per step (the
    median over the traced steps, by the script's clock)."""
    out, run = folder / "slow-out", folder / "slow-run"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(run, ignore_errors=True)
    out.mkdir()
    done = rnnprof("trace", "--out", str(run), "--skip-steps", "2", "--steps", "3", "--", "torchrun",
                   "--nproc-per-node", "2", str(ROOT / "tests" / "pipeline_slow_stage_job.py"), str(out),
                   str(PLANTED_MS))
    if done.returncode != 0:
        raise SystemExit(f"the slow stage's job failed:\n{done.stderr[-2000:]}")
    planted = json.loads((out / "rank1-planted.json").read_text())
    return pipeline(run), statistics.median(planted[2:5])


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="keep the run directories in this folder")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="rnnprof-pipeline-")) if args.keep is None else args.keep
    folder.mkdir(parents=True, exist_ok=True)
    failed = []
    try:
        found, bubbles = {}, {}
        for name, argv in RUNS.items():
            repeats = REPEATS if name[:4] in ("1f1b", "gpip") else 1
            docs = [traced(folder, f"{name}-{k}", argv) for k in range(repeats)]
            bubbles[name] = sorted(d["bubble_pct"] for d in docs)
            found[name] = {**docs[0], "bubble_pct": statistics.median(bubbles[name]),
                           "schedule_pct": statistics.median(schedule_part(d) for d in docs)}
        print(f"{'run':<18} {'schedule':<17} {'m':>2} {'theory %':>9} {'measured %':>11} {'runs':>18} "
              f"{'schedule part %':>16} {'imbalance (first run)':>28}")
        for name, doc in found.items():
            s, imbalance = doc["schedule"], doc["imbalance"]
            said = (f"stage {imbalance['stage']} {imbalance['excess_pct']:+.0f}% "
                    f"({imbalance['excess_us'] / 1000:.1f} ms)") if imbalance else "-"
            runs = ", ".join(f"{b:.1f}" for b in bubbles[name])
            print(f"{name:<18} {s['kind']:<17} {s['micro_batches']:>2} {s['theory_bubble_pct']:>9.1f} "
                  f"{doc['bubble_pct']:>11.1f} {runs:>18} {doc['schedule_pct']:>16.1f} {said:>28}")
        for kind in ("1f1b", "gpipe"):
            four, eight = found[f"{kind}-m4"]["bubble_pct"], found[f"{kind}-m8"]["bubble_pct"]
            if not eight < four:
                failed.append(f"{kind}: 8 micro-batches' bubble {eight:.1f}% is not below 4's {four:.1f}%")
        for name, doc in found.items():
            if doc["bubble_pct"] < doc["schedule"]["theory_bubble_pct"] - 1.0:
                failed.append(f"{name}: bubble {doc['bubble_pct']:.1f}% below the theory's")
        layers = found["stage-layers-3,1"]["imbalance"]
        if layers is None or layers["stage"] != 0:
            failed.append(f"--stage-layers 3,1: the imbalance names {layers}, not stage 0")
        doc, planted_us = slow_stage(folder)
        imbalance = doc["imbalance"]
        excess = imbalance["excess_us"] if imbalance else 0.0
        print(f"planted slow stage (script's clock): {planted_us / 1000:.1f} ms/step on rank1; pipeline names "
              f"{imbalance and imbalance['rank']}, {excess / 1000:.1f} ms/step above the other stage "
              f"({100 * (excess - planted_us) / planted_us:+.0f}%)")
        if not imbalance or imbalance["rank"] != "rank1" or abs(excess - planted_us) > SLOW_TOLERANCE * planted_us:
            failed.append("the planted slow stage is not named by its size")
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    for line in failed:
        print(f"FAILED: {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
