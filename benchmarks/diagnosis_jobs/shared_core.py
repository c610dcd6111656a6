"""Planted fault: one rank shares its core with another process. Each rank is pinned to a core of its own (rank r
to core r), and ``--busy`` busy loops, processes of their own, are pinned to the slow rank's core, so that rank's
training thread waits in the run queue for most of each step (two thirds with 2 loops) and the other rank waits
for it at every gradient all-reduce. The rank's code is the same as the others'. ``--control``: no busy loop. Linux only
(``os.sched_setaffinity``), with at least 2 cores.

    python -m torch.distributed.run --nproc-per-node 2 benchmarks/diagnosis_jobs/shared_core.py \
        [--slow-rank 1] [--busy 2] [--control] [--clock DIR]
"""

from __future__ import annotations

import os
import subprocess
import sys

from _ddp import arguments, language_model, random_batches, start, train


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--slow-rank", type=int, default=1, help="the rank whose core is shared (default: %(default)s)")
    parser.add_argument("--busy", type=int, default=2, help="busy loops on its core (default: %(default)s)")
    args = parser.parse_args()
    torch, rank, _ = start()
    os.sched_setaffinity(0, {rank % os.cpu_count()})  # the busy loops below inherit it
    planted = not args.control and rank == args.slow_rank
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy if planted else 0)]
    try:
        train(torch, language_model(torch, args.hidden)(),
              random_batches(torch, rank, args.steps, args.batch, args.length), rank, args.clock)
    finally:
        for loop in busy:
            loop.kill()
            loop.wait()


if __name__ == "__main__":
    main()
