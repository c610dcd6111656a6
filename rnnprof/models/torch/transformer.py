"""A decoder-only Transformer language model in PyTorch: token and position embeddings, ``--layers`` blocks of
causal self-attention and an MLP (pre-norm, residual), a final norm and a linear head over the vocabulary.

Built from torch's own modules (``nn.Embedding``, ``nn.LayerNorm``, ``nn.Linear``,
``F.scaled_dot_product_attention``). The attention keeps its query, key, value and output projections as four
``nn.Linear`` so that tensor parallelism can slice them (``tensor_parallel_plan``): ``nn.MultiheadAttention`` (and
so ``nn.TransformerDecoderLayer``) holds the three input projections in one fused weight that ColwiseParallel
cannot split by head. It trains on the RNNLM's data (``rnnlm.lm_data``): windows of the bundled corpus.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from rnnprof.models.config import TorchOptions

WORDS_DEFINITION = "target tokens"


class SelfAttention(nn.Module):
    """Causal multi-head self-attention; under tensor parallelism each rank holds ``heads / tp`` of the heads (the
    views take the head count from the projections' width)."""

    def __init__(self, units: int, heads: int):
        super().__init__()
        self.head_units = units // heads
        self.query = nn.Linear(units, units, bias=False)
        self.key = nn.Linear(units, units, bias=False)
        self.value = nn.Linear(units, units, bias=False)
        self.out = nn.Linear(units, units, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, time, _ = x.shape
        q, k, v = (p(x).view(batch, time, -1, self.head_units).transpose(1, 2)
                   for p in (self.query, self.key, self.value))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(batch, time, -1))


class MLP(nn.Module):
    def __init__(self, units: int):
        super().__init__()
        self.up = nn.Linear(units, 4 * units)
        self.down = nn.Linear(4 * units, units)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """Pre-norm: x + attention(norm(x)), then x + mlp(norm(x)); dropout on each branch's output."""

    def __init__(self, units: int, heads: int, dropout: float):
        super().__init__()
        self.attention_norm = nn.LayerNorm(units)
        self.attention = SelfAttention(units, heads)
        self.mlp_norm = nn.LayerNorm(units)
        self.mlp = MLP(units)
        # one module per branch: a module called twice in one forward breaks torch's CommDebugMode (its module
        # tracker registers a forward hook at each call)
        self.attention_dropout = nn.Dropout(dropout)
        self.mlp_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention_dropout(self.attention(self.attention_norm(x)))
        return x + self.mlp_dropout(self.mlp(self.mlp_norm(x)))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of ``logits`` [batch, time, vocab] against ``targets`` [batch, time] (a pipeline's
    loss function)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


class TransformerLM(nn.Module):
    """``forward(inputs, targets)``: the mean cross-entropy; ``forward(inputs)``: the logits (a pipeline's last
    stage), or the hidden states where the head is not on this stage (``keep_stage``)."""

    def __init__(self, options: TorchOptions):
        super().__init__()
        config = options.workload
        units = config.units
        self.embedding = nn.Embedding(config.vocab_size, units)
        self.position = nn.Embedding(config.src_max_len, units)
        self.dropout = nn.Dropout(options.dropout)
        # a ModuleDict: a pipeline stage keeps its blocks under their own names ("layers.2")
        self.layers = nn.ModuleDict({str(i): Block(units, options.heads, options.dropout)
                                     for i in range(config.layers)})
        self.norm = nn.LayerNorm(units)
        self.head = nn.Linear(units, config.vocab_size, bias=False)
        if options.tied:
            self.head.weight = self.embedding.weight

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        x = inputs
        if self.embedding is not None:
            positions = torch.arange(inputs.shape[1], device=inputs.device)
            x = self.dropout(self.embedding(inputs) + self.position(positions))
        for block in self.layers.values():
            x = block(x)
        if self.head is None:
            return x
        logits = self.head(self.norm(x))
        return logits if targets is None else lm_loss(logits, targets)

    loss = staticmethod(lm_loss)

    def blocks(self) -> list[nn.Module]:
        """The units that FSDP shards one by one, in forward order."""
        return list(self.layers.values())

    def keep_stage(self, blocks: range, first: bool, last: bool) -> None:
        """Keep only a pipeline stage's part: its ``blocks``, the embeddings if ``first``, the head if ``last``."""
        for name in list(self.layers.keys()):
            if int(name) not in blocks:
                del self.layers[name]
        if not first:
            self.embedding = self.position = None
        if not last:
            self.norm = self.head = None

    @staticmethod
    def tensor_parallel_plan() -> dict:
        """``parallelize_module``'s plan for one block: the attention's query, key and value and the MLP's up
        projection split by output columns (each rank computes some heads, some hidden units), the attention's output
        and the MLP's down projection by input rows. A block's step all-reduces six times per rank: the two row-split
        outputs' partial sums in forward, the four column-split projections' input gradients in backward."""
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

        return {"attention.query": ColwiseParallel(), "attention.key": ColwiseParallel(),
                "attention.value": ColwiseParallel(), "attention.out": RowwiseParallel(),
                "mlp.up": ColwiseParallel(), "mlp.down": RowwiseParallel()}
