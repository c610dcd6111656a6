"""A tiny next-token language model implementing the ``Workload`` protocol.

It keeps runner tests fast and independent of the real models: an embedding,
one tanh layer over the previous two tokens and a softmax, trained on random
sequences drawn from a fixed bigram table (so the loss can fall).
"""

from __future__ import annotations

from typing import Iterator, Mapping, Sequence

import numpy as np


class ToyLM:
    name = "toy-lm"
    words_definition = "target tokens"

    def __init__(self, vocab: int = 32, units: int = 16, length: int = 8):
        self.vocab = vocab
        self.units = units
        self.length = length
        rng = np.random.default_rng(0)
        # Each token has two likely successors: a learnable distribution.
        self._next = rng.integers(0, vocab, size=(vocab, 2))

    def make_inputs(self, tower: int) -> Mapping[str, object]:
        import tensorflow as tf

        tokens = tf.compat.v1.placeholder(tf.int32, [None, self.length + 1], name="tokens")
        return {"tokens": tokens}

    def build_tower(self, inputs, tower: int, device_names: Sequence[str]):
        import tensorflow as tf

        from rnnprof.models.base import TowerOutput

        tf1 = tf.compat.v1
        tokens = inputs["tokens"]
        source, target = tokens[:, :-1], tokens[:, 1:]
        embedding = tf1.get_variable("embedding", [self.vocab, self.units])
        hidden_w = tf1.get_variable("hidden/kernel", [self.units, self.units])
        hidden_b = tf1.get_variable("hidden/bias", [self.units], initializer=tf1.zeros_initializer())
        softmax_w = tf1.get_variable("softmax/kernel", [self.units, self.vocab])
        x = tf.reshape(tf.gather(embedding, source), [-1, self.units])
        h = tf.tanh(tf.matmul(x, hidden_w) + hidden_b)
        logits = tf.matmul(h, softmax_w)
        labels = tf.reshape(target, [-1])
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        return TowerOutput(loss=loss, words=tf.size(labels))

    def batches(self, batch_size: int, tower: int, seed: int) -> Iterator[Mapping[str, np.ndarray]]:
        rng = np.random.default_rng([seed, tower])
        while True:
            rows = np.empty((batch_size, self.length + 1), dtype=np.int32)
            rows[:, 0] = rng.integers(0, self.vocab, size=batch_size)
            for t in range(1, self.length + 1):
                choice = rng.integers(0, 2, size=batch_size)
                rows[:, t] = self._next[rows[:, t - 1], choice]
            yield {"tokens": rows}
