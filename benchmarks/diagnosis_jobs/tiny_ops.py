"""Planted fault: many tiny operators: every rank looks its tokens' embeddings up one token at a time (an
indexing operator per token, and its backward), where one embedding lookup would do. ``--control``: the one
lookup. The model and its numbers are the same either way.

    python -m torch.distributed.run --nproc-per-node 2 benchmarks/diagnosis_jobs/tiny_ops.py [--control] \
        [--clock DIR]
"""

from __future__ import annotations

from _ddp import arguments, language_model, random_batches, start, train


def main() -> None:
    args = arguments(__doc__.splitlines()[0]).parse_args()
    torch, rank, _ = start()
    base = language_model(torch)

    class OneTokenAtATime(base):
        def features(self, tokens):
            rows = [self.embed.weight[t] for t in tokens.reshape(-1).tolist()]
            return torch.stack(rows).reshape(*tokens.shape, -1)

    model = base() if args.control else OneTokenAtATime()
    train(torch, model, random_batches(torch, rank, args.steps, args.batch, args.length), rank, args.clock)


if __name__ == "__main__":
    main()
