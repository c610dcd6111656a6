"""A 2-rank CPU DDP (gloo) job of short steps for ``rnnprof watch``, its faults planted at known steps.

    torchrun --nproc-per-node 2 benchmarks/_watch_job.py OUT_DIR --steps N [--straggle-at S --sleep-ms MS]
        [--grow-at S --grow-kb KB] [--stall-at S --stall-ms MS] [--step-ms MS] [--width W --batch B]
        [--cuda --matmuls K [--slow-at S --slow-matmuls K2]] [--loader]

Each rank trains an MLP (32 -> ``--width`` -> 32, batches of ``--batch``) with SGD for ``--steps`` steps (an
``optimizer.step()`` each); ``--step-ms``: each step also sleeps that long in its forward (a job whose steps are that
much longer, calmly: sleeping costs no core).
Planted: from step ``--straggle-at``, rank 1 sleeps ``--sleep-ms`` more between its forward and backward (a
straggler: rank 0 waits for it in the all-reduce); from ``--grow-at``, every rank keeps ``--grow-kb`` KB more a step
(a tensor over pages of its own, filled and kept: resident memory grows by exactly that much, whatever the
allocator holds free; a tensor from torch's allocator would first reuse memory the job freed, such as a capture
window's, and resident memory would grow by less); from ``--stall-at``, every rank sleeps ``--stall-ms`` before
taking its batch (an input stall). ``--cuda``: each rank on its own GPU over nccl, each step also ``--matmuls``
products (after its forward) of a 2048 x 2048 float32 matrix with itself, ``--slow-matmuls`` more from step
``--slow-at`` (a step-time regression on the GPU), the step's end synchronized with the GPU. Each rank writes
``rank{r}-clock.json`` into OUT_DIR: by the script's own clock (``time.perf_counter``), each step's time (from one
``optimizer.step()``'s end to the next's) and each planted sleep. ``--loader``: the batches come from a DataLoader
(its dataset makes each batch, the planted stall's sleep inside it), as a user's loop takes them.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--step-ms", type=float, default=0.0)
    parser.add_argument("--width", type=int, default=64, help="the MLP's hidden width (its compute)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--straggle-at", type=int, default=-1)
    parser.add_argument("--sleep-ms", type=float, default=30.0)
    parser.add_argument("--grow-at", type=int, default=-1)
    parser.add_argument("--grow-kb", type=int, default=1024)
    parser.add_argument("--stall-at", type=int, default=-1)
    parser.add_argument("--stall-ms", type=float, default=20.0)
    parser.add_argument("--cuda", action="store_true")
    parser.add_argument("--matmuls", type=int, default=0)
    parser.add_argument("--slow-at", type=int, default=-1)
    parser.add_argument("--slow-matmuls", type=int, default=10)
    parser.add_argument("--loader", action="store_true", help="the batches from a DataLoader")
    args = parser.parse_args()

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if args.cuda else torch.device("cpu")
    if args.cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if args.cuda else "gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(32, args.width), nn.ReLU(), nn.Linear(args.width, 32)).to(device)
    model = DistributedDataParallel(mlp, device_ids=[device.index] if args.cuda else None)
    a = torch.randn(2048, 2048, device=device) if args.matmuls or args.slow_at >= 0 else None
    product = torch.empty_like(a) if a is not None else None
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(1 + rank)
    kept, clock = [], {"step_s": [], "sleep_s": {}, "stall_s": {}}

    def batches():
        for step in range(args.steps):
            if step >= args.stall_at >= 0:
                t0 = time.perf_counter()
                time.sleep(args.stall_ms / 1000)
                clock["stall_s"][step] = time.perf_counter() - t0
            yield torch.randn(args.batch, 32, generator=generator)

    class Batches(torch.utils.data.IterableDataset):
        def __iter__(self):
            return batches()

    source = torch.utils.data.DataLoader(Batches(), batch_size=None) if args.loader else batches()
    last = time.perf_counter()
    for step, x in enumerate(source):
        x = x.to(device)
        loss = model(x).pow(2).mean()
        for _ in range(args.matmuls + (args.slow_matmuls if step >= args.slow_at >= 0 else 0)):
            torch.mm(a, a, out=product)
        if args.step_ms:
            time.sleep(args.step_ms / 1000)
        if rank == 1 and step >= args.straggle_at >= 0:
            t0 = time.perf_counter()
            time.sleep(args.sleep_ms / 1000)
            clock["sleep_s"][step] = time.perf_counter() - t0
        if step >= args.grow_at >= 0:
            pages = mmap.mmap(-1, args.grow_kb * 1024)  # anonymous pages, outside the allocator's heap
            kept.append(torch.frombuffer(pages, dtype=torch.float32).fill_(1.0))  # touched: resident
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if args.cuda:
            torch.cuda.synchronize()
        now = time.perf_counter()
        clock["step_s"].append(now - last)
        last = now
    (args.out / f"rank{rank}-clock.json").write_text(json.dumps(clock))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
