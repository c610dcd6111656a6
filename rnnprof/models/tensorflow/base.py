"""What a training workload gives the data-parallel runner.

A workload builds one tower's forward pass and loss in graph mode; the runner
decides where each tower runs and how variables are shared or replicated
(through variable scopes and device scopes it opens around ``build_tower``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping, Protocol, Sequence

import numpy as np


@dataclass(frozen=True)
class TowerOutput:
    loss: object  # scalar tf.Tensor: mean loss over non-padding tokens
    words: object  # scalar tf.Tensor (int): tokens this tower counts for words/s in one step


class Workload(Protocol):
    name: str
    words_definition: str  # e.g. "non-padding source+target tokens"

    def make_inputs(self, tower: int) -> Mapping[str, object]:
        """Placeholders for one tower's batch, created in the caller's device scope."""

    def build_tower(self, inputs: Mapping[str, object], tower: int, device_names: Sequence[str]) -> TowerOutput:
        """Forward pass and loss. Variables come from ``tf.compat.v1.get_variable`` so the
        caller's variable scope decides sharing. ``device_names`` lists every tower's device,
        for workloads that place something on another tower's device on purpose (plants)."""

    def batches(self, batch_size: int, tower: int, seed: int) -> Iterator[Mapping[str, np.ndarray]]:
        """An endless stream of numpy batches for one tower, keyed like ``make_inputs``."""


class TokenWorkload:
    """What the built-in workloads share: model sizes from the config, int32 token placeholders,
    and batches from ``self.data`` (set by the subclass)."""

    INPUTS: Mapping[str, int] = {}  # placeholder name -> rank

    def __init__(self, config):
        self.config = config
        self.units = config.units
        self.embedding = config.embedding or config.units
        self.fused = config.encoder == "fused"

    def make_inputs(self, tower: int) -> dict:
        import tensorflow as tf

        with tf.name_scope("inputs"):
            return {name: tf.compat.v1.placeholder(tf.int32, [None] * rank, name=name)
                    for name, rank in self.INPUTS.items()}

    def batches(self, batch_size: int, tower: int, seed: int):
        return self.data.batches(batch_size, tower, seed)
