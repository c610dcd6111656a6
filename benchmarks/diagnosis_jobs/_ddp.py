"""What the diagnosis jobs share: a tiny LSTM language model trained with DistributedDataParallel over gloo on
the CPU, one step per ``optimizer.step()``, and each rank's own clock of its steps.

A job script builds its batches and its model and calls ``train``; ``--clock DIR`` makes every rank write
``DIR/rank<r>.json``: ``{"rank", "step_s": [duration of each step by time.perf_counter, from one step's start
to the next's], "thread_cpu_s": [the training thread's CPU time in each step, by time.thread_time]}``, and
``extra_s`` where the job times a planted operator of its own (``extra_cpu_s``: the training thread's CPU time in
it, where the job gives one), and ``swapped`` in the jobs that can take turns (``--swap-from``): whether each
step ran the other configuration. The training thread's CPU time leaves out what other processes take of the cores
(and the rank's other threads: gloo's, the capture's compression), so a fault that is the rank's own work costs
about the same in it on a busy machine as on an idle one. The step time the benchmark compares is the median of a rank's steps after ``--warmup``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

VOCAB, EMBED, HIDDEN = 64, 16, 32


def arguments(description: str, swap: bool = False) -> argparse.ArgumentParser:
    """The jobs' arguments; ``swap``: also ``--swap-from`` and ``--swap-block`` (``swapped``)."""
    parser = argparse.ArgumentParser(allow_abbrev=False, description=description)
    parser.add_argument("--steps", type=int, default=14, help="training steps (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=8, help="sequences per rank and step (default: %(default)s)")
    parser.add_argument("--length", type=int, default=16, help="tokens per sequence (default: %(default)s)")
    parser.add_argument("--hidden", type=int, default=HIDDEN, help="the LSTM's units (default: %(default)s)")
    parser.add_argument("--clock", type=Path, default=None, help="folder for each rank's own step times")
    parser.add_argument("--control", action="store_true", help="run without the fault (the control)")
    if swap:
        parser.add_argument("--swap-from", type=int, default=None, metavar="STEP",
                            help="from this step on, every other block of --swap-block steps, the first one "
                                 "included, runs the other configuration (the control in a faulty run, the fault "
                                 "in a control): both measured in one run, on the same cores at the same time")
        parser.add_argument("--swap-block", type=int, default=6, metavar="STEPS",
                            help="steps in each block of --swap-from (default: %(default)s)")
    return parser


def swapped(args, step: int) -> bool:
    """Whether ``step`` runs the other configuration than the run's (``--swap-from``)."""
    first = getattr(args, "swap_from", None)
    return first is not None and step >= first and (step - first) // args.swap_block % 2 == 0


def faulty(args, step: int) -> bool:
    """Whether the fault runs in ``step``: in a faulty run where it is not swapped, in a control where it is."""
    return args.control == swapped(args, step)


def start():
    """Initialise gloo; (torch, the process group's rank, world size)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    return torch, dist.get_rank(), dist.get_world_size()


def language_model(torch, hidden: int = HIDDEN):
    from torch import nn

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, EMBED)
            self.lstm = nn.LSTM(EMBED, hidden, batch_first=True)
            self.out = nn.Linear(hidden, VOCAB)

        def features(self, tokens):
            return self.embed(tokens)

        def forward(self, tokens):
            hidden, _ = self.lstm(self.features(tokens))
            return self.out(hidden)

    return LM


def train(torch, model, batches, rank: int, clock: Path | None, before_backward=None, before_forward=None,
          after_step=None, was_swapped=None) -> None:
    """Train ``model`` (wrapped in DDP here) on ``batches`` (an iterable of token tensors), one optimizer step
    each; ``before_backward(step)`` runs between the forward pass and the backward pass (what it returns, a
    duration in seconds or None, goes to the clock's ``extra_s``), ``before_forward(step)`` and
    ``after_step(step)`` at a step's start and after its optimizer step (what ``after_step`` returns, where
    ``before_backward`` gave none, goes to ``extra_s``; a pair ``(wall, cpu)`` to ``extra_s`` and
    ``extra_cpu_s``); ``was_swapped(step)``: whether the step ran the other configuration (the clock's ``swapped``)."""
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    starts, cpu, extra = [], [], []
    for step, tokens in enumerate(batches):
        starts.append(time.perf_counter())
        cpu.append(time.thread_time())
        if before_forward is not None:
            before_forward(step)
        logits = model(tokens[:, :-1])
        loss = loss_fn(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        timed = before_backward(step) if before_backward is not None else None
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if after_step is not None:
            timed = after_step(step) if timed is None else timed
        extra.append(timed)
    dist.barrier()
    starts.append(time.perf_counter())
    cpu.append(time.thread_time())
    if clock is not None:
        clock.mkdir(parents=True, exist_ok=True)
        durations = [b - a for a, b in zip(starts, starts[1:])]
        record = {"rank": rank, "step_s": durations, "thread_cpu_s": [b - a for a, b in zip(cpu, cpu[1:])]}
        if any(e is not None for e in extra):
            record["extra_s"] = [e[0] if isinstance(e, tuple) else e for e in extra]
        if any(isinstance(e, tuple) for e in extra):
            record["extra_cpu_s"] = [e[1] if isinstance(e, tuple) else None for e in extra]
        if was_swapped is not None:
            record["swapped"] = [was_swapped(step) for step in range(len(durations))]
        (clock / f"rank{rank}.json").write_text(json.dumps(record))
    dist.destroy_process_group()


def random_batches(torch, rank: int, steps: int, batch: int, length: int):
    generator = torch.Generator().manual_seed(1 + rank)
    return [torch.randint(0, VOCAB, (batch, length + 1), generator=generator) for _ in range(steps)]


def loader(torch, made: list, delay_s: float, slow=None):
    """A ``DataLoader`` with no worker process over ``made``, its dataset taking ``delay_s`` per batch (the loading
    runs in the training loop, traced as ``enumerate(DataLoader)#...__next__``); ``slow(index)``: whether that
    batch takes it (by default every one)."""
    from torch.utils.data import DataLoader, Dataset

    class Batches(Dataset):
        def __len__(self) -> int:
            return len(made)

        def __getitem__(self, index: int):
            if delay_s and (slow is None or slow(index)):
                time.sleep(delay_s)  # reading and decoding, as a slow storage or transform would take
            return made[index]

    return DataLoader(Batches(), batch_size=None, shuffle=False, num_workers=0)
