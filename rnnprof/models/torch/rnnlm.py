"""RNN language model in PyTorch: embedding, ``nn.LSTM``, a linear layer over the vocabulary, cross-entropy.

The same sizes and data as the TensorFlow RNNLM (``rnnprof.models.tensorflow.rnnlm``): windows of
the bundled corpus or ``--data`` from ``LMData``; words are the target tokens of a batch.
"""

from __future__ import annotations

import torch
from torch import nn

from rnnprof.models.config import TorchOptions
from rnnprof.models.data import LMData

WORDS_DEFINITION = "non-padding target tokens"


class RNNLM(nn.Module):
    def __init__(self, options: TorchOptions):
        super().__init__()
        config = options.workload
        embedding = config.embedding or config.units
        self.embedding = nn.Embedding(config.vocab_size, embedding)
        # a module per place it applies: a module called twice in one forward breaks torch's CommDebugMode, whose
        # module tracker registers a forward hook at each call
        self.input_dropout = nn.Dropout(options.dropout)
        self.output_dropout = nn.Dropout(options.dropout)
        self.lstm = nn.LSTM(embedding, config.units, num_layers=config.layers, batch_first=True,
                            dropout=options.dropout if config.layers > 1 else 0.0)
        self.projection = nn.Linear(config.units, config.vocab_size)
        if options.tied:
            self.projection.weight = self.embedding.weight

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy over the target tokens of ``inputs`` [batch, time]."""
        x = self.input_dropout(self.embedding(inputs))
        outputs, _ = self.lstm(x)
        logits = self.projection(self.output_dropout(outputs))
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def blocks(self) -> list[nn.Module]:
        """The units FSDP shards one by one: the LSTM (all its layers are one ``nn.LSTM``); the embedding and the
        projection are the root's."""
        return [self.lstm]


def lm_data(options: TorchOptions) -> LMData:
    """The batches the TensorFlow RNNLM trains on (a bad ``--data`` file raises ``InputError``)."""
    config = options.workload
    return LMData(config.vocab_size, config.src_max_len, config.data)
