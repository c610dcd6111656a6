"""What ``rnnprof watch`` costs a job: the median step time of a 2-rank gloo DDP job (``_watch_job.py``, an MLP
whose steps are compute, about 12 ms here) run plain (torchrun) and under ``rnnprof watch`` (every step measured,
written and judged; its baseline window included), in turns, ``--repeat`` times. Each run's median is rank 0's
steps by the script's own clock (``time.perf_counter``), its first 50 steps left out; the result is watched / plain
of each pair, its median and spread over the repeats. Held to: at most 1 % (docs/commands/watch.md).

    python benchmarks/watch_overhead.py [--steps 800] [--repeat 3] [--width 1024] [--batch 128]
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
JOB = HERE / "_watch_job.py"
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
SKIP = 50


def median_step(scratch: Path, name: str, watched: bool, args) -> float:
    clock, out = scratch / f"{name}-clock", scratch / f"{name}-run"
    clock.mkdir()
    job = [TORCHRUN, "--nproc-per-node", "2", str(JOB), str(clock), "--steps", str(args.steps), "--width",
           str(args.width), "--batch", str(args.batch)]
    command = [sys.executable, "-m", "rnnprof", "watch", "--out", str(out), "--", *job] if watched else job
    env = {**os.environ, "PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "localhost:0"}
    subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    steps = json.loads((clock / "rank0-clock.json").read_text())["step_s"][SKIP:]
    return statistics.median(steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=128)
    args = parser.parse_args()
    plain, watched = [], []
    with tempfile.TemporaryDirectory(prefix="rnnprof-watch-cost-") as scratch:
        for repeat in range(args.repeat):
            order = (False, True) if repeat % 2 == 0 else (True, False)
            for under_watch in order:
                value = median_step(Path(scratch), f"{repeat}-{int(under_watch)}", under_watch, args)
                (watched if under_watch else plain).append(value)
    ratios = [w / p for w, p in zip(watched, plain)]
    print(f"2 gloo ranks, MLP 32-{args.width}-32, batch {args.batch}, {args.steps} steps x {args.repeat} repeats "
          f"(rank 0's median step by the script's clock, first {SKIP} left out):")
    print("repeat | plain ms | watched ms | watched/plain")
    for k, (p, w) in enumerate(zip(plain, watched)):
        print(f"{k} | {p * 1e3:.3f} | {w * 1e3:.3f} | {w / p:.4f}")
    print(f"median watched/plain {statistics.median(ratios):.4f} (spread {min(ratios):.4f}-{max(ratios):.4f}); "
          f"held to <= 1.01: {'yes' if statistics.median(ratios) <= 1.01 else 'NO'}")


if __name__ == "__main__":
    main()
