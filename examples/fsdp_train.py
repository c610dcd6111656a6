"""FSDP2: each block, then the whole model, sharded over the ranks with ``fully_shard``; each rank trains its own
batches. Run it under rnnprof:

    rnnprof trace --out runs/fsdp --steps 3 --skip-steps 2 -- torchrun --nproc-per-node 2 examples/fsdp_train.py

``--prefetch`` has each block's forward issue the next block's all-gather (and its backward the previous one's).
"""

import argparse

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

from tiny_lm import TinyLM, batches, start, train_step

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--prefetch", action="store_true")
args = parser.parse_args()

device = start()
model = TinyLM().to(device)
blocks = list(model.blocks.values())
for block in blocks:
    fully_shard(block)
fully_shard(model)
if args.prefetch:
    for before, after in zip(blocks, blocks[1:]):
        before.set_modules_to_forward_prefetch([after])
        after.set_modules_to_backward_prefetch([before])
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = batches(seed=dist.get_rank(), device=device)
for step in range(args.steps):
    loss = train_step(model, optimizer, *next(data))
    if dist.get_rank() == 0:
        print(f"step {step}: loss {loss:.3f}")
dist.destroy_process_group()
