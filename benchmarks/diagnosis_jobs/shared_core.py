"""Planted fault: one rank shares its core with another process. Each rank is pinned to a core of its own (rank r
to core r), and ``--busy`` busy loops, processes of their own, are pinned to the slow rank's core, so that rank's
training thread waits in the run queue for most of each step (two thirds with 2 loops) and the other rank waits
for it at every gradient all-reduce. The rank's code is the same as the others'. ``--control``: no busy loop.
``--busy-steps FIRST:LAST``: the loops run from step FIRST's start to step LAST's end (0-based) only, say around a
capture's window, instead of through the whole job (each loop burns a core's share for as long as it runs). Linux
only (``os.sched_setaffinity``), with at least 2 cores.

    python -m torch.distributed.run --nproc-per-node 2 benchmarks/diagnosis_jobs/shared_core.py \
        [--slow-rank 1] [--busy 2] [--busy-steps FIRST:LAST] [--control] [--clock DIR]
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
    parser.add_argument("--busy-steps", metavar="FIRST:LAST", default=None,
                        help="run the busy loops from step FIRST's start to step LAST's end (0-based; default: the "
                             "whole training)")
    args = parser.parse_args()
    first, last = map(int, args.busy_steps.split(":")) if args.busy_steps else (0, args.steps - 1)
    torch, rank, _ = start()
    os.sched_setaffinity(0, {rank % os.cpu_count()})  # the busy loops below inherit it
    planted = not args.control and rank == args.slow_rank
    busy: list[subprocess.Popen] = []

    def begin(step: int) -> None:
        if planted and step == first:
            busy.extend(subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy))

    def end(step: int) -> None:
        if step == last:
            stop()

    def stop() -> None:
        while busy:
            loop = busy.pop()
            loop.kill()
            loop.wait()

    try:
        train(torch, language_model(torch, args.hidden)(),
              random_batches(torch, rank, args.steps, args.batch, args.length), rank, args.clock,
              before_forward=begin, after_step=end)
    finally:
        stop()


if __name__ == "__main__":
    main()
