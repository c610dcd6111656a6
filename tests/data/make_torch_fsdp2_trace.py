"""Record ``torch-fsdp2-gloo/``: a 2-rank FSDP2 training of a small Transformer LM on CPU (gloo), captured by
``rnnprof trace`` over steps 3-8, with the script's own account of the memory it holds after each step.

Each rank builds the LM (an embedding, ``BLOCKS`` pre-norm blocks of causal self-attention and an MLP, a linear
head), applies ``fully_shard`` to each block and then to the root (torch 2.13, ``init_device_mesh("cpu", (2,))``),
and trains it with AdamW. gloo carries each reduce-scatter out as an all-reduce of a copy of its input; the frees of
such copies, and of all-gathers' outputs, are missing from the profiler's records (released with the collective's
work, outside its profiled scope). The
capture is the one a user runs::

    rnnprof trace --out OUT/run --steps 6 --skip-steps 3 -- python -m torch.distributed.run --nproc-per-node 2 \
        make_torch_fsdp2_trace.py --worker OUT

After each step every rank writes to ``OUT/held-rank<r>.json`` what it holds by its own count: the bytes of the
storages of every CPU tensor the garbage collector can reach (parameters, gradients, optimizer state: ``tensors``)
and glibc's bytes in use (``mallinfo2``: ``malloc``, which the profiler's own buffers also fill during the window).
The checkout's and the interpreter's folders are then shortened in the manifest, the traces' ``traceName`` to the
file's name, and the capture's bookkeeping files removed.

    python tests/data/make_torch_fsdp2_trace.py [OUT_DIR]   # default: this folder's torch-fsdp2-gloo
"""

from __future__ import annotations

import ctypes
import gc
import json
import sys
import warnings
from pathlib import Path


VOCAB, DIM, HEADS, BLOCKS, SEQ, BATCH = 128, 32, 2, 2, 16, 2
SKIP, WINDOW = 3, 6  # the capture's --skip-steps and --steps: steps 3-8 are traced
STEPS = SKIP + WINDOW + 3  # and a few more after the window, whose holdings the script records too
FOLDER = "torch-fsdp2-gloo"


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


def _held(torch) -> dict[str, int]:
    """The bytes of every reachable CPU tensor's storage (each storage once), and glibc's bytes in use."""
    gc.collect()
    storages = {}
    with warnings.catch_warnings():  # isinstance on deprecated objects of torch.distributed warns
        warnings.simplefilter("ignore")
        tensors = [obj for obj in gc.get_objects() if isinstance(obj, torch.Tensor) and obj.device.type == "cpu"]
    for tensor in tensors:
        try:
            storage = tensor.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
        except RuntimeError:  # a storage FSDP freed (resized to nothing): it holds no bytes
            continue
    held = {"tensors": sum(storages.values())}
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _Mallinfo2
        info = libc.mallinfo2()
        held["malloc"] = info.uordblks + info.hblkhd
    except (OSError, AttributeError):  # not glibc
        pass
    return held


def worker(out_dir: Path) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn import functional as F

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(DIM, bias=False), nn.LayerNorm(DIM, bias=False)
            self.qkv, self.proj = nn.Linear(DIM, 3 * DIM, bias=False), nn.Linear(DIM, DIM, bias=False)
            self.up, self.down = nn.Linear(DIM, 4 * DIM, bias=False), nn.Linear(4 * DIM, DIM, bias=False)

        def forward(self, x):
            q, k, v = self.qkv(self.norm1(x)).view(BATCH, SEQ, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
            attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(attended.transpose(1, 2).reshape(BATCH, SEQ, DIM))
            return x + self.down(F.gelu(self.up(self.norm2(x))))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, DIM)
            self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
            self.head = nn.Linear(DIM, VOCAB, bias=False)

        def forward(self, tokens):
            x = self.embed(tokens)
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    model = LM()
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(1 + rank)
    held = {}
    for step in range(STEPS):
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=generator)
        loss = F.cross_entropy(model(tokens[:, :-1]).reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        held[step] = _held(torch)
    (out_dir / f"held-rank{rank}.json").write_text(json.dumps(held) + "\n")
    dist.barrier()  # neither rank tears its group down while the other still talks to it
    dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(Path(sys.argv[2]))
    else:
        from make_torch_memory_held_trace import capture  # this folder's: the capture and its shortening

        out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / FOLDER
        print(capture(Path(__file__).resolve(), out, FOLDER, WINDOW, SKIP))
