"""Planted fault: one rank sleeps ``--sleep-ms`` every step, between its forward and backward passes, so the
other ranks wait for it at every gradient all-reduce. ``--control``: nobody sleeps.

    python -m torch.distributed.run --nproc-per-node 2 benchmarks/diagnosis_jobs/straggler_rank.py \
        [--sleep-ms 40] [--slow-rank 1] [--control] [--clock DIR]
"""

from __future__ import annotations

import time

from _ddp import arguments, faulty, language_model, random_batches, start, swapped, train


def main() -> None:
    parser = arguments(__doc__.splitlines()[0], swap=True)
    parser.add_argument("--sleep-ms", type=float, default=40.0, help="the slow rank's sleep per step")
    parser.add_argument("--slow-rank", type=int, default=1, help="the rank that sleeps (default: %(default)s)")
    args = parser.parse_args()
    torch, rank, _ = start()
    sleep_s = args.sleep_ms / 1000 if rank == args.slow_rank else 0.0

    def sleep(step: int) -> None:
        if sleep_s and faulty(args, step):
            time.sleep(sleep_s)

    train(torch, language_model(torch, args.hidden)(), random_batches(torch, rank, args.steps, args.batch, args.length), rank,
          args.clock, before_backward=sleep, was_swapped=lambda step: swapped(args, step))


if __name__ == "__main__":
    main()
