"""The built-in PyTorch RNNLM against a plain PyTorch script of the same model and training loop.

The built-in side is what ``rnnprof scale --framework torch --devices 1`` runs: one rank started by
torchrun's elastic agent (``torch_ddp.run_ranks``), ``TorchTraining``'s step. The reference is written
the way rnn_benchmark's ``run.py`` is, without rnnprof: an ``nn.Module`` (embedding, dropout,
``nn.LSTM``, dropout, linear decoder), ``nn.CrossEntropyLoss``, Adam, and a loop of ``zero_grad``,
forward, loss, ``backward``, ``step``, ``loss.item()``. rnnprof only supplies the same numpy batches
(``LMData``) so both train on the same data; words are the target tokens, as rnnprof counts them.
Both sides use the same preset, seed, optimizer, learning rate, dropout and intra-op threads, time
the same span of each step (from ``zero_grad`` to ``loss.item()``), and run warm-up batches untimed,
then timed batches. Each side runs in its own process, alternately, ``--repeat`` times; the ratio is
the medians' built-in words/s ÷ reference words/s, target >= 1.0.

    python benchmarks/torch_rnnlm_reference.py                       # the small preset
    python benchmarks/torch_rnnlm_reference.py --preset rnn_benchmark --warmup 2 --batches 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from _measure import Targets

SIDES = ("builtin", "reference")


def _options(args):
    from rnnprof.config import TORCH_ADAM_LEARNING_RATE, TorchOptions, WorkloadConfig, model_defaults

    sizes = {**model_defaults("rnnlm", args.preset), "learning_rate": TORCH_ADAM_LEARNING_RATE}
    workload = WorkloadConfig(model="rnnlm", preset=args.preset, devices=1, variable_update="independent",
                              warmup=args.warmup, batches=args.batches, optimizer="adam",
                              intra_op_threads=args.threads, **sizes)
    return TorchOptions(workload=workload, dropout=0.5 if args.preset == "rnn_benchmark" else 0.0)


def _builtin(args) -> dict:
    from rnnprof.profiler.run.torch_ddp import run_ranks

    (rank,) = run_ranks(_options(args))
    seconds = sum(record[0] for record in rank["timed"])
    words = sum(record[1] for record in rank["timed"])
    return {"words_per_second": words / seconds, "seconds": seconds}


def _reference(args) -> dict:
    """Plain PyTorch; rnnprof only supplies the same numpy batches."""
    options = _options(args)
    config = options.workload
    from rnnprof.models.data import LMData

    batches = LMData(config.vocab_size, config.src_max_len, config.data).batches(config.batch_size, 0, config.seed)
    import torch
    import torch.nn as nn

    torch.set_num_threads(args.threads)
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

    for _ in range(args.warmup):
        train_batch()
    seconds = words = 0
    for _ in range(args.batches):
        s, w = train_batch()
        seconds += s
        words += w
    return {"words_per_second": words / seconds, "seconds": seconds}


def _run_side(side: str, argv: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, "--side", side, *argv], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONWARNINGS="ignore"))
    if out.returncode != 0:
        raise SystemExit(f"{side} run failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    from rnnprof.profiler.run.torch_ddp import threads_per_process

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=("small", "rnn_benchmark"), default="small")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=threads_per_process(1),
                        help="intra-op threads of both sides (default: the cores, as scale gives one rank)")
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps((_builtin if args.side == "builtin" else _reference)(args)))
        return 0

    argv = ["--preset", args.preset, "--warmup", str(args.warmup), "--batches", str(args.batches),
            "--threads", str(args.threads)]
    rates = {side: [] for side in SIDES}
    for k in range(args.repeat):
        for side in (SIDES if k % 2 == 0 else SIDES[::-1]):  # alternate, and which goes first, so load hits both alike
            rates[side].append(_run_side(side, argv)["words_per_second"])
    options = _options(args)
    config = options.workload
    print(f"PyTorch RNNLM {args.preset}: {config.layers} layer(s), embedding {config.embedding or config.units}, "
          f"{config.units} units, vocab {config.vocab_size}, seq {config.src_max_len}, batch {config.batch_size}, "
          f"Adam lr {config.learning_rate:g}, dropout {options.dropout:g}, {args.threads} thread(s), 1 process; "
          f"{args.warmup} warm-up + {args.batches} timed batches, {args.repeat} runs each")
    print("words = target tokens")
    for side in SIDES:
        name = "rnnprof (scale --framework torch)" if side == "builtin" else "reference (plain PyTorch loop)"
        print(f"  {name:<36} best {max(rates[side]):>10,.0f} words/s, median {statistics.median(rates[side]):>10,.0f}")
    ratio = statistics.median(rates["builtin"]) / statistics.median(rates["reference"])
    targets = Targets()
    targets.at_least("rnnprof / reference words/s (medians)", ratio, 1.0, "x")
    return targets.report()


if __name__ == "__main__":
    sys.exit(main())
