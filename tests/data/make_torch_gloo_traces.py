"""Record the two Kineto traces of a 2-rank CPU DDP (gloo) training: ``torch-gloo-rank{0,1}.json.gz``.

A tiny LSTM language model trained for a few steps by two processes under ``torch.distributed.run``
(``--nproc-per-node 2``), gradients all-reduced by DDP over gloo, each rank profiled with
``torch.profiler`` (``schedule(wait=1, warmup=1, active=2)``, ``record_shapes=True``, ``ProfilerStep#N``
markers, ``record_function`` ranges ``forward``/``backward``/``optimizer``) and writing one gzipped
Kineto JSON.

    python tests/data/make_torch_gloo_traces.py [OUT_DIR]      # default: this folder

The launcher re-runs this file as each rank's worker (``--worker OUT_DIR``).
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

STEPS = 5  # wait 1 + warmup 1 + active 2, and one more so the schedule completes
VOCAB, EMBED, HIDDEN, BATCH, LENGTH = 64, 16, 32, 4, 8


def worker(out_dir: Path) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, EMBED)
            self.lstm = nn.LSTM(EMBED, HIDDEN, batch_first=True)
            self.out = nn.Linear(HIDDEN, VOCAB)

        def forward(self, tokens):
            hidden, _ = self.lstm(self.embed(tokens))
            return self.out(hidden)

    model = DistributedDataParallel(LM())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(1 + rank)

    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2), record_shapes=True,
                 on_trace_ready=lambda prof: export_gzipped(prof, out_dir / f"torch-gloo-rank{rank}.json")) as prof:
        for _ in range(STEPS):
            tokens = torch.randint(0, VOCAB, (BATCH, LENGTH + 1), generator=generator)
            with record_function("forward"):
                logits = model(tokens[:, :-1])
                loss = loss_fn(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
            with record_function("backward"):
                optimizer.zero_grad()
                loss.backward()
            with record_function("optimizer"):
                optimizer.step()
            prof.step()
    dist.barrier()  # neither rank tears its group down while the other still talks to it
    dist.destroy_process_group()


def export_gzipped(prof, plain: Path) -> None:
    """Write the profiler's trace to ``plain`` + ``.gz``: its ``traceName`` the file's name, not this machine's path."""
    prof.export_chrome_trace(str(plain))
    data = plain.read_bytes().replace(f'"traceName": "{plain}"'.encode(), f'"traceName": "{plain.name}"'.encode())
    with gzip.open(f"{plain}.gz", "wb", compresslevel=9) as dst:
        dst.write(data)
    plain.unlink()


def launch(out_dir: Path, timeout_s: float = 120) -> list[Path]:
    """Run the 2-rank job; returns the two trace paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                    "--master-port", "0", "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0",
                    __file__, "--worker", str(out_dir)],
                   check=True, env=env, timeout=timeout_s)
    return [out_dir / f"torch-gloo-rank{r}.json.gz" for r in range(2)]


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(Path(sys.argv[2]))
    else:
        print("\n".join(map(str, launch(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent))))
