"""Record ``torch-memory-held-from-step5/``: a 2-rank CPU DDP (gloo) training whose rank 0 takes a 64 MiB buffer at
step 5 and keeps it to the end, captured by ``rnnprof trace`` over steps 3-10.

A small MLP trained by two processes under ``torch.distributed.run`` (``--nproc-per-node 2``), gradients
all-reduced by DDP over gloo. Rank 0 appends ``torch.ones`` of ``PLANT_BYTES`` to a list before the forward pass of
step ``PLANT_STEP`` and never lets it go. The capture is the one a user runs::

    rnnprof trace --out OUT/run --steps 8 --skip-steps 3 -- python -m torch.distributed.run --nproc-per-node 2 \
        make_torch_memory_held_trace.py --worker OUT

(the capture's ``profile_memory`` records every allocation and free). Each rank writes ``OUT/planted-rank<r>.json``:
the step, the bytes of the buffer's storage (``untyped_storage().nbytes()``) and whether this rank took it: the
script's own account, the oracle of the tests. The checkout's and the interpreter's folders are then shortened in
the manifest (``tests/data/...``, ``python``), the traces' ``traceName`` to the file's name, and the capture's
bookkeeping files (``.lock``, ``.rank<r>.facts.json``) are removed: the manifest already holds what they said.

    python tests/data/make_torch_memory_held_trace.py [OUT_DIR]   # default: this folder's torch-memory-held-from-step5
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

PLANT_STEP = 5  # the step whose forward pass rank 0 takes the buffer before
PLANT_BYTES = 64 << 20  # 64 MiB
PLANT_RANK = 0
SKIP, WINDOW = 3, 8  # the capture's --skip-steps and --steps: steps 3-10 are traced
STEPS = SKIP + WINDOW + 1  # one more so the window's last step closes
FOLDER = "torch-memory-held-from-step5"


def worker(out_dir: Path) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(1 + rank)
    kept: list = []
    for step in range(STEPS):
        batch = torch.randn(32, 64, generator=generator)
        if rank == PLANT_RANK and step == PLANT_STEP:
            kept.append(torch.ones(PLANT_BYTES // 4, dtype=torch.float32))
        loss = model(batch).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    (out_dir / f"planted-rank{rank}.json").write_text(json.dumps(
        {"step": PLANT_STEP, "bytes": sum(t.untyped_storage().nbytes() for t in kept), "rank": rank,
         "took": bool(kept)}) + "\n")
    dist.barrier()  # neither rank tears its group down while the other still talks to it
    dist.destroy_process_group()


def shorten_run(run: Path, out_dir: Path, folder: str) -> None:
    """This machine's folders out of the manifest (the job's output folder as ``tests/data/<folder>``, this folder as
    ``tests/data``, the interpreter as ``python``) and each trace's ``traceName``; the capture's bookkeeping files
    removed."""
    manifest = run / "manifest.json"
    text = manifest.read_text()
    for long, short in ((sys.executable, "python"), (str(out_dir.resolve()), f"tests/data/{folder}"),
                        (str(out_dir), f"tests/data/{folder}"), (str(Path(__file__).resolve().parent), "tests/data")):
        text = text.replace(json.dumps(long)[1:-1], short)
    manifest.write_text(text)
    for trace in sorted((run / "torch").glob("rank*.json.gz")):
        with gzip.open(trace, "rt") as f:
            doc = json.load(f)
        doc["traceName"] = trace.name.removesuffix(".gz")
        with gzip.open(trace, "wt", compresslevel=9) as f:
            json.dump(doc, f)
    for extra in (run / "torch").glob(".*"):
        extra.unlink()


def capture(script: Path, out_dir: Path, folder: str, steps: int, skip: int, timeout_s: float = 300) -> Path:
    """``rnnprof trace --steps STEPS --skip-steps SKIP`` of ``script --worker OUT_DIR`` on 2 gloo ranks under torchrun,
    into ``out_dir/run``, shortened (``shorten_run``, ``folder``: its name in tests/data); returns the run."""
    out_dir.mkdir(parents=True, exist_ok=True)
    run = out_dir / "run"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, "-m", "rnnprof", "trace", "--out", str(run), "--force", "--steps", str(steps),
                    "--skip-steps", str(skip), "--", sys.executable, "-m", "torch.distributed.run",
                    "--nproc-per-node", "2", "--master-port", "0", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                    "localhost:0", str(script), "--worker", str(out_dir)],
                   check=True, env=env, timeout=timeout_s)
    shorten_run(run, out_dir, folder)
    return run


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(Path(sys.argv[2]))
    else:
        out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / FOLDER
        print(capture(Path(__file__).resolve(), out, FOLDER, WINDOW, SKIP))
