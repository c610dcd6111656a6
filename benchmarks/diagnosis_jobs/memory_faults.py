"""Planted memory faults: ``--fault leak``: one rank keeps ``--bytes`` more every step (a list of tensors that
only grows); ``--fault buffer``: one rank holds an extra buffer of ``--bytes`` through every step (allocated
before its forward pass, freed after its optimizer step). ``--control``: the same job without the fault.

    python -m torch.distributed.run --nproc-per-node 2 benchmarks/diagnosis_jobs/memory_faults.py \
        --fault leak [--rank 1] [--bytes 1000000] [--control]
"""

from __future__ import annotations

from _ddp import arguments, language_model, random_batches, start, train


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--fault", choices=("leak", "buffer"), required=True)
    parser.add_argument("--rank", type=int, default=None,
                        help="the rank with the fault (default: 1 for a leak, 0 for a buffer)")
    parser.add_argument("--bytes", type=int, default=1_000_000, help="bytes leaked per step, or the buffer's size")
    args = parser.parse_args()
    torch, rank, _ = start()
    faulty = (1 if args.fault == "leak" else 0) if args.rank is None else args.rank
    planted = not args.control and rank == faulty
    kept: list = []

    def fault(step: int) -> None:
        if not planted:
            return
        if args.fault == "leak":
            kept.append(torch.ones(args.bytes, dtype=torch.uint8))
        else:
            kept[:] = [torch.ones(args.bytes, dtype=torch.uint8)]

    def release(step: int) -> None:
        if args.fault == "buffer":
            kept.clear()

    train(torch, language_model(torch, args.hidden)(), random_batches(torch, rank, args.steps, args.batch, args.length), rank,
          args.clock, before_forward=fault, after_step=release)


if __name__ == "__main__":
    main()
