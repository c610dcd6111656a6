"""Tensor parallelism: each block's MLP split over the ranks with ``parallelize_module`` (the first linear layer by
columns, the second by rows, their partial sums all-reduced); every rank trains the same batches. torch's encoder
layer keeps the attention's three input projections in one fused weight, so the attention stays whole here. Run:

    rnnprof trace --out runs/tp --steps 3 --skip-steps 2 -- torchrun --nproc-per-node 2 examples/tp_train.py
"""

import argparse

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from tiny_lm import TinyLM, batches, start, train_step

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
args = parser.parse_args()

device = start()
mesh = init_device_mesh(device.type, (dist.get_world_size(),))
model = TinyLM().to(device)
for block in model.blocks.values():
    parallelize_module(block.layer, mesh, {"linear1": ColwiseParallel(), "linear2": RowwiseParallel()})
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = batches(seed=0, device=device)  # one batch stream: the ranks share each batch
for step in range(args.steps):
    loss = train_step(model, optimizer, *next(data))
    if dist.get_rank() == 0:
        print(f"step {step}: loss {loss:.3f}")
dist.destroy_process_group()
