"""The built-in PyTorch RNNLM against a plain PyTorch script of the same model and training loop.

The built-in side is what ``rnnprof scale --framework torch --devices 1`` runs: ``TorchTraining``'s
step, in one rank started by torchrun's elastic agent (``torch_ddp.run_ranks``), with ``--threads``
intra-op threads (1 by default: with as many as the cores, which scale gives one rank, a parallel
region waits for whichever thread another process has descheduled, so on a shared machine a step's time
varies several-fold; ``--threads 2`` measures scale's setting on 2 cores).
The reference is written the way rnn_benchmark's ``run.py`` is, without rnnprof: an ``nn.Module``
(embedding, dropout, ``nn.LSTM``, dropout, linear decoder), ``nn.CrossEntropyLoss``, Adam, and a loop of
``zero_grad``, forward, loss, ``backward``, ``step``, ``loss.item()``. rnnprof only supplies the same numpy
batches (``LMData``) so both train on the same data; words are the target tokens, as rnnprof counts them.

Both sides live in the same rank process, so they have the same intra-op and inter-op threads, the same
environment and the same allocator, and their steps are interleaved (one step of each in turn, the
order swapped every pair; which side builds its model and steps first alternates between launches):
whatever else runs on the machine, and the CPU's clock, hit both sides alike, step by step. Each side times the same span of its steps (from ``zero_grad`` to ``loss.item()``);
warm-up steps of both sides run first, untimed. A side's words/s is its words per step over its median
step time (a step slowed by other work does not move a median). Each of ``--repeat`` repeats is a fresh
launch, whose two sides ran together: the result is the median over launches of a launch's ratio,
built-in words/s ÷ reference words/s, with the lowest and highest as its spread, target >= 1.0 (a
launch's speed varies with the load more than the two sides differ, so the launches' medians are not
compared with each other).

    python benchmarks/torch_rnnlm_reference.py                       # the small preset, 1 thread
    python benchmarks/torch_rnnlm_reference.py --threads 2           # scale's threads for one rank on 2 cores
    python benchmarks/torch_rnnlm_reference.py --preset rnn_benchmark --warmup 2 --batches 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from _measure import Targets, spread_of

SIDES = ("builtin", "reference")
FIRST_ENV = "RNNPROF_BENCHMARK_FIRST_SIDE"  # the side a launch builds and steps first


def _options(args):
    from rnnprof.config import TORCH_ADAM_LEARNING_RATE, TorchOptions, WorkloadConfig, model_defaults

    sizes = {**model_defaults("rnnlm", args.preset), "learning_rate": TORCH_ADAM_LEARNING_RATE}
    workload = WorkloadConfig(model="rnnlm", preset=args.preset, devices=1, variable_update="independent",
                              warmup=args.warmup, batches=args.batches, optimizer="adam",
                              intra_op_threads=args.threads, **sizes)
    return TorchOptions(workload=workload, dropout=0.5 if args.preset == "rnn_benchmark" else 0.0)


def _reference_step(options):
    """Plain PyTorch, as rnn_benchmark's run.py trains; rnnprof only supplies the same numpy batches.
    Returns one training step: () -> (seconds, words)."""
    config = options.workload
    from rnnprof.models.data import LMData

    batches = LMData(config.vocab_size, config.src_max_len, config.data).batches(config.batch_size, 0, config.seed)
    import torch
    import torch.nn as nn

    torch.manual_seed(config.seed)

    class RNNModel(nn.Module):
        def __init__(self, ntoken, ninp, nhid, nlayers, dropout):
            super().__init__()
            self.drop = nn.Dropout(dropout)
            self.encoder = nn.Embedding(ntoken, ninp)
            self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout if nlayers > 1 else 0.0, batch_first=True)
            self.decoder = nn.Linear(nhid, ntoken)

        def forward(self, data):
            emb = self.drop(self.encoder(data))
            output, _ = self.rnn(emb)
            return self.decoder(self.drop(output))

    ntokens = config.vocab_size
    model = RNNModel(ntokens, config.embedding or config.units, config.units, config.layers, options.dropout)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate)
    model.train()

    def train_batch():
        batch = next(batches)
        data = torch.from_numpy(batch["inputs"].astype("int64"))
        targets = torch.from_numpy(batch["targets"].astype("int64"))
        start = time.perf_counter()
        optimizer.zero_grad()
        output = model(data)
        loss = criterion(output.view(-1, ntokens), targets.view(-1))
        loss.backward()
        optimizer.step()
        loss.item()
        return time.perf_counter() - start, int(batch["lengths"].sum())

    return train_batch


def _builtin_step(options):
    """``TorchTraining``'s step, as ``rank_main`` runs it: () -> (seconds, words)."""
    from rnnprof.training.torch_training import TorchTraining

    training = TorchTraining(options)

    def step():
        result = training.step()
        return result.seconds, result.words

    return step


def both_sides(job) -> dict:
    """A rank's work (``run_ranks``' worker): set up as ``rank_main`` does, then both sides' steps in turn."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(job.threads)
    dist.init_process_group("gloo")
    try:
        order = SIDES if os.environ.get(FIRST_ENV, SIDES[0]) == SIDES[0] else SIDES[::-1]
        steps = {}
        for side in order:  # which side allocates its model first alternates between launches
            steps[side] = _builtin_step(job.options) if side == "builtin" else _reference_step(job.options)
        config = job.options.workload
        for _ in range(config.warmup):
            for side in order:
                steps[side]()
        timed = {side: [] for side in SIDES}
        for k in range(config.batches):
            for side in (order if k % 2 == 0 else order[::-1]):
                timed[side].append(steps[side]())
        return {"timed": timed, "threads": torch.get_num_threads(), "interop": torch.get_num_interop_threads()}
    finally:
        dist.destroy_process_group()


def _rate(steps) -> float:
    """Words per step over the median step time."""
    return statistics.median(words for _, words in steps) / statistics.median(seconds for seconds, _ in steps)


def main() -> int:
    from rnnprof.training.torch_ddp import run_ranks, threads_per_process

    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=("small", "rnn_benchmark"), default="small")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps of each side")
    parser.add_argument("--batches", type=int, default=100, help="timed steps of each side, interleaved")
    parser.add_argument("--repeat", type=int, default=9,
                        help="fresh launches (their ratios spread by a few percent: 3 are too few to settle 1.0)")
    parser.add_argument("--threads", type=int, default=1,
                        help=f"intra-op threads of the rank, for both sides (default 1; scale gives one rank "
                             f"the cores, here {threads_per_process(1)}: on a machine other work shares, as "
                             f"many threads as cores wait for each other and steps vary several-fold)")
    args = parser.parse_args()
    options = _options(args)
    rates, spreads, threads = {side: [] for side in SIDES}, {side: [] for side in SIDES}, set()
    for k in range(args.repeat):
        os.environ[FIRST_ENV] = SIDES[k % 2]  # the rank inherits it
        (rank,) = run_ranks(options, worker=both_sides)
        threads.add((rank["threads"], rank["interop"]))
        for side in SIDES:
            steps = [tuple(step) for step in rank["timed"][side]]
            rates[side].append(_rate(steps))
            seconds = sorted(s for s, _ in steps)
            spreads[side].append((seconds[len(seconds) // 4], seconds[3 * len(seconds) // 4]))
    config = options.workload
    print(f"PyTorch RNNLM {args.preset}: {config.layers} layer(s), embedding {config.embedding or config.units}, "
          f"{config.units} units, vocab {config.vocab_size}, seq {config.src_max_len}, batch {config.batch_size}, "
          f"Adam lr {config.learning_rate:g}, dropout {options.dropout:g}; 1 rank, threads (intra-op, inter-op) "
          f"{', '.join(map(str, sorted(threads)))} for both sides; {args.warmup} warm-up + {args.batches} timed "
          f"steps of each side, interleaved; {args.repeat} launches")
    print("words = target tokens; words/s = words per step / median step time")
    for side in SIDES:
        name = "rnnprof (scale --framework torch)" if side == "builtin" else "reference (plain PyTorch loop)"
        quartiles = ", ".join(f"{lo * 1000:.1f}-{hi * 1000:.1f}" for lo, hi in spreads[side])
        print(f"  {name:<36} median {statistics.median(rates[side]):>10,.0f} words/s "
              f"(range {min(rates[side]):,.0f}-{max(rates[side]):,.0f}; step ms quartiles per launch: {quartiles})")
    ratios = [b / r for b, r in zip(rates["builtin"], rates["reference"])]  # each launch's sides ran together
    print(f"  rnnprof / reference per launch: {', '.join(f'{r:.3f}' for r in ratios)}")
    targets = Targets()
    targets.at_least(f"rnnprof / reference words/s (median of launches; {spread_of(ratios)})",
                     statistics.median(ratios), 1.0, "x")
    return targets.report()


if __name__ == "__main__":
    sys.exit(main())
