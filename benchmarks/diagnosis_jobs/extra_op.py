"""Planted fault: one rank runs an extra operator every step, between its forward and backward passes: a batched
matrix product (``aten::bmm``, which the model itself never runs) of ``--size`` square matrices, so the other
ranks wait for it at every gradient all-reduce. The rank times the operator itself (the clock's ``extra_s``):
its known cost. ``--control``: nobody runs it.

    python -m torch.distributed.run --nproc-per-node 2 benchmarks/diagnosis_jobs/extra_op.py \
        [--size 384] [--slow-rank 1] [--control] [--clock DIR]
"""

from __future__ import annotations

import time

from _ddp import arguments, faulty, language_model, random_batches, start, swapped, train

MATRICES = 8


def main() -> None:
    parser = arguments(__doc__.splitlines()[0], swap=True)
    parser.add_argument("--size", type=int, default=384, help="the matrices' side (default: %(default)s)")
    parser.add_argument("--slow-rank", type=int, default=1, help="the rank that runs it (default: %(default)s)")
    args = parser.parse_args()
    torch, rank, _ = start()
    planted = rank == args.slow_rank
    a = torch.rand(MATRICES, args.size, args.size)

    def extra(step: int) -> float | None:
        if not planted or not faulty(args, step):
            return None
        t0 = time.perf_counter()
        torch.bmm(a, a)
        return time.perf_counter() - t0

    train(torch, language_model(torch, args.hidden)(), random_batches(torch, rank, args.steps, args.batch, args.length), rank,
          args.clock, before_backward=extra, was_swapped=lambda step: swapped(args, step))


if __name__ == "__main__":
    main()
