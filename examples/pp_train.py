"""Pipeline parallelism: the blocks split into one stage per rank (``PipelineStage``), each batch cut into
micro-batches that a schedule of ``torch.distributed.pipelining`` runs through the stages. Run:

    rnnprof trace --out runs/pp --steps 3 --skip-steps 2 -- torchrun --nproc-per-node 2 examples/pp_train.py

``--schedule gpipe`` runs every forward before any backward; ``--micro-batches`` sets how many.
"""

import argparse

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.profiler import record_function

from tiny_lm import BLOCKS, TinyLM, batches, loss_fn, start

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--micro-batches", type=int, default=4)
parser.add_argument("--schedule", choices=("1f1b", "gpipe"), default="1f1b")
args = parser.parse_args()

device = start()
rank, stages = dist.get_rank(), dist.get_world_size()
per_stage = BLOCKS // stages
stage_model = TinyLM(blocks=range(rank * per_stage, (rank + 1) * per_stage), first=rank == 0,
                     last=rank == stages - 1).to(device)
stage = PipelineStage(stage_model, rank, stages, device)
schedule = (Schedule1F1B if args.schedule == "1f1b" else ScheduleGPipe)(stage, args.micro_batches, loss_fn=loss_fn)
optimizer = torch.optim.AdamW(stage_model.parameters(), lr=1e-3)
data = batches(seed=0, device=device)  # every stage draws the same batches: the first takes the inputs, the last
for step in range(args.steps):         # the targets
    inputs, targets = next(data)
    optimizer.zero_grad(set_to_none=True)
    losses = []
    if rank == 0:
        schedule.step(inputs)
    elif rank == stages - 1:
        schedule.step(target=targets, losses=losses)
    else:
        schedule.step()
    with record_function("optimizer"):
        optimizer.step()
    if losses:
        print(f"step {step}: loss {sum(loss.item() for loss in losses) / len(losses):.3f}")
dist.destroy_process_group()
