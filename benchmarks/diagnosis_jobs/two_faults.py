"""Planted faults, two at once on different ranks: rank 1 sleeps ``--sleep-ms`` every step between its forward
and backward passes, and rank 0's data loader takes ``--load-ms`` per batch (``_ddp.loader``). Fixing one alone
buys the difference only; fixing both, the whole of the larger. ``--control``: neither.

    python -m torch.distributed.run --nproc-per-node 2 benchmarks/diagnosis_jobs/two_faults.py \
        [--sleep-ms 40] [--load-ms 20] [--control] [--clock DIR]
"""

from __future__ import annotations

import time

from _ddp import arguments, faulty, language_model, loader, random_batches, start, swapped, train

SLEEPER, LOADER = 1, 0  # the rank that sleeps, the rank whose loader is slow


def main() -> None:
    parser = arguments(__doc__.splitlines()[0], swap=True)
    parser.add_argument("--sleep-ms", type=float, default=40.0, help="rank 1's sleep per step")
    parser.add_argument("--load-ms", type=float, default=20.0, help="rank 0's loading time per batch")
    args = parser.parse_args()
    torch, rank, _ = start()
    sleep_s = args.sleep_ms / 1000 if rank == SLEEPER else 0.0
    delay_s = args.load_ms / 1000 if rank == LOADER else 0.0

    def sleep(step: int) -> None:
        if sleep_s and faulty(args, step):
            time.sleep(sleep_s)

    made = random_batches(torch, rank, args.steps, args.batch, args.length)
    batches = loader(torch, made, delay_s, lambda step: faulty(args, step))
    train(torch, language_model(torch, args.hidden)(), batches, rank, args.clock, before_backward=sleep,
          was_swapped=lambda step: swapped(args, step))


if __name__ == "__main__":
    main()
