"""A 2-rank CPU (gloo) pipeline in which one stage does planted extra work: the oracle of ``rnnprof pipeline``'s
imbalance, by the script's own clock.

    rnnprof trace --out RUN --skip-steps 2 --steps 3 -- torchrun --nproc-per-node 2 \\
        tests/pipeline_slow_stage_job.py OUT_DIR EXTRA_MS [SLOW_RANK]

``torch.distributed.pipelining``'s ``Schedule1F1B``, 4 micro-batches, a small language model split in two stages
(the first: the embedding and two blocks; the second: two blocks and the head). In each micro-batch's forward,
stage ``SLOW_RANK`` (default 1) multiplies matrices until ``EXTRA_MS`` milliseconds have passed by
``time.perf_counter``; each rank writes ``OUT_DIR/rank{r}-planted.json``: the planted work's time in each step of
the loop, in µs, by that clock. The script marks nothing itself: the trace holds no range around a micro-batch, so
``pipeline`` tells the schedule from the sends and receives.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

STEPS = 6
MICRO_BATCHES = 4
VOCAB, DIM, BATCH, LENGTH = 64, 64, 16, 16


def main(out_dir: Path, extra_ms: float, slow_rank: int) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    planted: list[float] = []
    weight = torch.randn(128, 128)

    def plant() -> None:
        start = time.perf_counter()
        x = weight
        while time.perf_counter() - start < extra_ms / 1e3:
            x = torch.tanh(x @ weight)
        planted[-1] += (time.perf_counter() - start) * 1e6

    class Stage(nn.Module):
        def __init__(self, first: bool):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, DIM) if first else None
            self.blocks = nn.Sequential(*(nn.Sequential(nn.LayerNorm(DIM), nn.Linear(DIM, 4 * DIM), nn.GELU(),
                                                        nn.Linear(4 * DIM, DIM)) for _ in range(2)))
            self.head = None if first else nn.Linear(DIM, VOCAB)

        def forward(self, x):
            if self.embed is not None:
                x = self.embed(x)
            x = x + self.blocks(x)
            if rank == slow_rank:
                plant()
            return x if self.head is None else self.head(x)

    first = rank == 0
    module = Stage(first)
    stage = PipelineStage(module, rank, 2, torch.device("cpu"))
    loss = nn.CrossEntropyLoss()
    schedule = Schedule1F1B(stage, MICRO_BATCHES, loss_fn=lambda out, tgt: loss(out.reshape(-1, VOCAB), tgt.reshape(-1)))
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        planted.append(0.0)
        tokens = torch.randint(0, VOCAB, (BATCH, LENGTH + 1), generator=generator)
        if first:
            schedule.step(tokens[:, :-1].contiguous())
        else:
            schedule.step(target=tokens[:, 1:].contiguous())
        optimizer.step()
        optimizer.zero_grad()
    (out_dir / f"rank{rank}-planted.json").write_text(json.dumps(planted))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 1)
