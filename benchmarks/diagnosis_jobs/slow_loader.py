"""Planted fault: one rank's data loader is slow: its dataset takes ``--load-ms`` to produce each batch (a
``torch.utils.data.DataLoader`` with no worker process, so the loading runs in the training loop), and the
other ranks wait for it at every gradient all-reduce. ``--control``: every rank's batches come at once.

    python -m torch.distributed.run --nproc-per-node 2 benchmarks/diagnosis_jobs/slow_loader.py \
        [--load-ms 40] [--slow-rank 1] [--control] [--clock DIR]
"""

from __future__ import annotations

from _ddp import arguments, faulty, language_model, loader, random_batches, start, swapped, train


def main() -> None:
    parser = arguments(__doc__.splitlines()[0], swap=True)
    parser.add_argument("--load-ms", type=float, default=40.0, help="the slow rank's loading time per batch")
    parser.add_argument("--slow-rank", type=int, default=1, help="the rank whose loader is slow (default: %(default)s)")
    args = parser.parse_args()
    torch, rank, _ = start()
    delay_s = args.load_ms / 1000 if rank == args.slow_rank else 0.0
    made = random_batches(torch, rank, args.steps, args.batch, args.length)
    train(torch, language_model(torch, args.hidden)(), loader(torch, made, delay_s, lambda step: faulty(args, step)),
          rank, args.clock, was_swapped=lambda step: swapped(args, step))


if __name__ == "__main__":
    main()
