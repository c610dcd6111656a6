"""A small data-parallel training job: an LSTM language model on random tokens, one process per rank.

    torchrun --nproc-per-node 2 examples/train.py [--steps 20] [--batch 16]
    rnnprof trace --out runs/ddp -- torchrun --nproc-per-node 2 examples/train.py

Each rank reads its own share of the batches (DistributedSampler through a DataLoader) and
DistributedDataParallel averages the gradients after each backward pass: over gloo on CPUs, over NCCL where
every rank has a GPU of its own. Nothing here knows rnnprof: `rnnprof trace` captures the script as it is,
each optimizer step a step (by default it skips the first and records the next 3).
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class LanguageModel(nn.Module):
    """Embedding, LSTM, a projection over the vocabulary: the next token from the ones before it."""

    def __init__(self, vocab: int, units: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, units)
        self.lstm = nn.LSTM(units, units, batch_first=True)
        self.out = nn.Linear(units, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.lstm(self.embed(tokens))
        return self.out(hidden)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps per rank (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=16, help="sequences per rank and step (default: %(default)s)")
    parser.add_argument("--length", type=int, default=32, help="tokens per sequence (default: %(default)s)")
    parser.add_argument("--units", type=int, default=64, help="embedding and LSTM width (default: %(default)s)")
    parser.add_argument("--vocab", type=int, default=1000, help="words in the vocabulary (default: %(default)s)")
    args = parser.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    on_gpu = torch.cuda.is_available() and local_rank < torch.cuda.device_count()
    device = torch.device("cuda", local_rank) if on_gpu else torch.device("cpu")
    if on_gpu:
        torch.cuda.set_device(device)
    else:  # ranks on one machine share its cores
        world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    dist.init_process_group("nccl" if on_gpu else "gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)  # every replica starts from the same weights
    model = DistributedDataParallel(LanguageModel(args.vocab, args.units).to(device),
                                    device_ids=[local_rank] if on_gpu else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()

    tokens = torch.randint(0, args.vocab, (args.steps * args.batch * world_size, args.length + 1),
                           generator=torch.Generator().manual_seed(1))
    sampler = DistributedSampler(TensorDataset(tokens), num_replicas=world_size, rank=rank, shuffle=False)
    batches = DataLoader(TensorDataset(tokens), batch_size=args.batch, sampler=sampler)

    for step, (batch,) in enumerate(batches):
        batch = batch.to(device, non_blocking=True)
        logits = model(batch[:, :-1])
        loss = loss_fn(logits.reshape(-1, args.vocab), batch[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()  # DDP all-reduces the gradients here
        optimizer.step()
        if rank == 0 and (step + 1) % 10 == 0:
            print(f"step {step + 1}: loss {loss.item():.3f}", flush=True)

    dist.barrier()  # no rank tears the group down while another still talks to it
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
