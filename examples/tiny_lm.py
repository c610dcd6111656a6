"""A tiny causal language model from torch's own layers, random token batches and a marked training step, shared
by the --parallel examples (fsdp_train.py, tp_train.py, pp_train.py)."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.profiler import record_function

VOCAB, WIDTH, HEADS, LENGTH, BATCH, BLOCKS = 256, 64, 4, 32, 8, 4


class CausalBlock(nn.Module):
    """torch's pre-norm encoder layer, masked so that each token sees only those before it."""

    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(WIDTH, HEADS, 4 * WIDTH, dropout=0.0, batch_first=True,
                                                norm_first=True)

    def forward(self, x):
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device)
        return self.layer(x, src_mask=mask, is_causal=True)


class TinyLM(nn.Module):
    """Embedding, BLOCKS causal blocks, a head; ``first``/``last`` False leave the embedding or the head out (a
    pipeline stage in the middle of the model)."""

    def __init__(self, blocks=range(BLOCKS), first=True, last=True):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH) if first else None
        self.blocks = nn.ModuleDict({str(i): CausalBlock() for i in blocks})
        self.head = nn.Linear(WIDTH, VOCAB) if last else None

    def forward(self, x):
        x = self.embed(x) if self.embed is not None else x
        for block in self.blocks.values():
            x = block(x)
        return self.head(x) if self.head is not None else x


def loss_fn(logits, targets):
    return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def start() -> torch.device:
    """Join torchrun's process group: NCCL and this rank's GPU where there is one, gloo on the CPU otherwise."""
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    torch.manual_seed(0)  # every rank builds the same weights
    return device


def batches(seed: int, device):
    """Random token windows and their next tokens, forever."""
    generator = torch.Generator().manual_seed(seed)
    while True:
        tokens = torch.randint(0, VOCAB, (BATCH, LENGTH + 1), generator=generator).to(device)
        yield tokens[:, :-1], tokens[:, 1:]


def train_step(model, optimizer, inputs, targets) -> float:
    """One step, its phases marked as rnnprof's own workloads mark them."""
    with record_function("forward"):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), targets)
    with record_function("backward"):
        loss.backward()
    with record_function("optimizer"):
        optimizer.step()
    return loss.item()
