"""What ``rnnprof watch`` costs a job, measured two ways, side by side:

* **a rank's watch, in one process**: a DDP model (gloo, one rank; an MLP 32 -> ``--width`` -> 32, batches of
  ``--batch``, steps of about 12 ms of compute here) trained in blocks of ``--block`` steps, every other block under a
  ``TorchRankWatch`` (its hooks, DDP's timed all-reduce, a series row written each step), each block on a model built
  afresh; the ratio of the watched blocks' median step to the plain ones', over ``--blocks`` pairs, by the wall clock
  and by the training thread's CPU time (which a busy machine's waits for a core do not move): the watch's own cost
  in the rank.
* **the whole job**: ``_watch_job.py`` on 2 gloo ranks run plain (torchrun) and under ``rnnprof watch`` (the ranks'
  watch, the watch's thread, the live view, the baseline window and its analysis), in turns, ``--repeat`` times;
  rank 0's median step by the script's own clock (its first 50 left out); watched / plain of each pair.

Held to: at most 1 % of the median step (docs/commands/watch.md).

    python benchmarks/watch_overhead.py [--blocks 20] [--repeat 5] [--steps 800] [--width 4096] [--batch 320]
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
WARM = 5  # steps of each block before its timed ones

IN_PROCESS = r'''
import json, os, statistics, sys, time
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from rnnprof.recording.watch_rank import TorchRankWatch

blocks, steps, width, batch, warm, out = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
                                          int(sys.argv[5]), sys.argv[6])
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
x = torch.randn(batch, 32)


def block(watched, k):
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(32, width), nn.ReLU(), nn.Linear(width, 32)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    watch = TorchRankWatch(os.path.join(out, str(k)), probe=False, records=False).start() if watched else None
    times, cpu, last, last_cpu = [], [], time.perf_counter(), time.thread_time()
    for step in range(warm + steps):
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        now, now_cpu = time.perf_counter(), time.thread_time()
        if step >= warm:
            times.append(now - last)
            cpu.append(now_cpu - last_cpu)
        last, last_cpu = now, now_cpu
    if watch is not None:
        watch.close()
    return statistics.median(times), statistics.median(cpu)


pairs = []
for k in range(blocks):
    order = (False, True) if k % 2 == 0 else (True, False)
    got = {watched: block(watched, 2 * k + watched) for watched in order}
    pairs.append((got[False][0], got[True][0], got[False][1], got[True][1]))
print(json.dumps(pairs))
dist.destroy_process_group()
'''


def rank_cost(args, scratch: Path) -> list[tuple[float, float, float, float]]:
    script = scratch / "blocks.py"
    script.write_text(IN_PROCESS)
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    done = subprocess.run([sys.executable, str(script), str(args.blocks), str(args.block), str(args.width),
                           str(args.batch), str(WARM), str(scratch / "series")], capture_output=True, text=True,
                          env=env, check=True)
    return [tuple(pair) for pair in json.loads(done.stdout.strip().splitlines()[-1])]


def median_step(scratch: Path, name: str, watched: bool, args) -> float:
    clock, out = scratch / f"{name}-clock", scratch / f"{name}-run"
    clock.mkdir()
    job = [TORCHRUN, "--nproc-per-node", "2", str(JOB), str(clock), "--steps", str(args.steps), "--width",
           str(args.width), "--batch", str(args.batch)]
    command = [sys.executable, "-m", "rnnprof", "watch", "--out", str(out), "--force", "--", *job] if watched else job
    env = {**os.environ, "PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "localhost:0"}
    for attempt in range(3):  # a gloo rendezvous on a loaded machine fails now and then before the first step
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        if done.returncode == 0:
            break
    done.check_returncode()
    steps = json.loads((clock / "rank0-clock.json").read_text())["step_s"][SKIP:]
    return statistics.median(steps)


def _table(title: str, pairs: list[tuple[float, float]]) -> bool:
    ratios = [w / p for p, w in pairs]
    print(title)
    print("pair | plain ms | watched ms | watched/plain")
    for k, (p, w) in enumerate(pairs):
        print(f"{k} | {p * 1e3:.3f} | {w * 1e3:.3f} | {w / p:.4f}")
    median = statistics.median(ratios)
    print(f"median watched/plain {median:.4f} (spread {min(ratios):.4f}-{max(ratios):.4f}); held to <= 1.01: "
          f"{'yes' if median <= 1.01 else 'NO'}")
    return median <= 1.01


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=20, help="pairs of blocks in one process")
    parser.add_argument("--block", type=int, default=50, help="timed steps of a block")
    parser.add_argument("--repeat", type=int, default=5, help="pairs of whole jobs")
    parser.add_argument("--steps", type=int, default=800, help="steps of a whole job")
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=320)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rnnprof-watch-cost-") as temporary:
        scratch = Path(temporary)
        measured = rank_cost(args, scratch)
        jobs = []
        for repeat in range(args.repeat):
            order = (False, True) if repeat % 2 == 0 else (True, False)
            got = {w: median_step(scratch, f"{repeat}-{int(w)}", w, args) for w in order}
            jobs.append((got[False], got[True]))
    blocks = [(p, w) for p, w, _, _ in measured]
    cpu = [(p_cpu, w_cpu) for _, _, p_cpu, w_cpu in measured]
    held = _table(f"a rank's watch in one process: MLP 32-{args.width}-32, batch {args.batch}, {args.blocks} pairs "
                  f"of {args.block}-step blocks (each block's median step):", blocks)
    held &= _table("the same blocks, the training thread's CPU time a step (what the machine's load does not move):",
                   cpu)
    held &= _table(f"the whole job: 2 gloo ranks, {args.steps} steps, {args.repeat} pairs of jobs (rank 0's median "
                   f"step by the script's clock, first {SKIP} left out):", jobs)
    if not held:
        sys.exit(1)


if __name__ == "__main__":
    main()
