"""Planted fault: many tiny operators: every rank looks its tokens' embeddings up one token at a time (an
indexing operator per token, and its backward), where one embedding lookup would do. ``--control``: the one
lookup. The model and its numbers are the same either way.

Each rank times the lookup itself (the clock's ``extra_s``, and ``extra_cpu_s`` in its thread's CPU time): in the
forward pass, from the lookup's call to its result; in the backward pass, from the gradient reaching the lookup's
result to the embedding table's accumulated gradient.

    python -m torch.distributed.run --nproc-per-node 2 benchmarks/diagnosis_jobs/tiny_ops.py [--control] \
        [--clock DIR]
"""

from __future__ import annotations

import time

from _ddp import arguments, language_model, random_batches, start, train


class LookupClock:
    """The lookup's wall and CPU seconds in the current step (``spent``), and the backward pass's start."""

    def __init__(self):
        self.spent = [0.0, 0.0]
        self.backward_from = None

    def now(self) -> tuple[float, float]:
        return time.perf_counter(), time.thread_time()

    def add(self, since: tuple[float, float]) -> None:
        wall, cpu = self.now()
        self.spent[0] += wall - since[0]
        self.spent[1] += cpu - since[1]

    def backward_starts(self, grad) -> None:
        self.backward_from = self.now()

    def backward_ends(self, weight) -> None:
        if self.backward_from is not None:
            self.add(self.backward_from)
            self.backward_from = None

    def step_done(self, step: int) -> tuple[float, float]:
        spent, self.spent = tuple(self.spent), [0.0, 0.0]
        return spent


def main() -> None:
    args = arguments(__doc__.splitlines()[0]).parse_args()
    torch, rank, _ = start()
    base = language_model(torch)
    clock = LookupClock()

    class Timed(base):
        def features(self, tokens):
            since = clock.now()
            found = self.lookup(tokens)
            clock.add(since)
            if found.requires_grad:
                found.register_hook(clock.backward_starts)
            return found

        def lookup(self, tokens):
            if args.control:
                return self.embed(tokens)
            rows = [self.embed.weight[t] for t in tokens.reshape(-1).tolist()]
            return torch.stack(rows).reshape(*tokens.shape, -1)

    model = Timed()
    model.embed.weight.register_post_accumulate_grad_hook(clock.backward_ends)
    train(torch, model, random_batches(torch, rank, args.steps, args.batch, args.length), rank, args.clock,
          after_step=clock.step_done)


if __name__ == "__main__":
    main()
