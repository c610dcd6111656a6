"""Luong (multiplicative) and Bahdanau (additive) attention for the loop decoder.

The decoder feeds each step's attention output into the next step's input
("input feeding"), as the standard NMT attention model does. Both kinds score
the top layer's new output (Bahdanau's original scores the previous state; the
cost profile is the same). Source padding gets a large negative score, so it
receives no weight.
"""

from __future__ import annotations

from dataclasses import dataclass

import tensorflow as tf

from rnnprof.models.tensorflow.lstm import uniform_init

tf1 = tf.compat.v1

NEG_INF = -1e9


@dataclass(frozen=True)
class Attention:
    kind: str  # "luong" | "bahdanau"
    memory: object  # [batch, src_time, units]
    keys: object  # memory after the memory layer, [batch, src_time, units]
    memory_mask: object  # [batch, src_time] bool
    query_kernel: object | None  # bahdanau only
    score_vector: object | None  # bahdanau only
    output_kernel: object  # [2 * units, units]

    def step(self, query):
        """The attention output for one decoder step's top-layer output ``query``."""
        if self.kind == "luong":
            scores = tf.squeeze(tf.matmul(self.keys, tf.expand_dims(query, 2)), 2)
        else:
            processed = tf.expand_dims(tf.matmul(query, self.query_kernel), 1)
            scores = tf.reduce_sum(self.score_vector * tf.tanh(self.keys + processed), 2)
        scores = tf.where(self.memory_mask, scores, tf.fill(tf.shape(scores), NEG_INF))
        weights = tf.nn.softmax(scores)
        context = tf.squeeze(tf.matmul(tf.expand_dims(weights, 1), self.memory), 1)
        return tf.tanh(tf.matmul(tf.concat([query, context], 1), self.output_kernel))


def build_attention(kind: str, encoder_outputs_tm, src_len, units: int) -> Attention:
    """Variables and the per-source precomputation (memory layer), in the current scope."""
    memory = tf.transpose(encoder_outputs_tm, [1, 0, 2])
    mask = tf.sequence_mask(src_len, tf.shape(memory)[1])
    memory_kernel = tf1.get_variable("memory_kernel", [units, units], initializer=uniform_init())
    keys = tf.reshape(tf.matmul(tf.reshape(memory, [-1, units]), memory_kernel), tf.shape(memory))
    query_kernel = score_vector = None
    if kind == "bahdanau":
        query_kernel = tf1.get_variable("query_kernel", [units, units], initializer=uniform_init())
        score_vector = tf1.get_variable("score_vector", [units], initializer=uniform_init())
    output_kernel = tf1.get_variable("output_kernel", [2 * units, units], initializer=uniform_init())
    return Attention(kind, memory, keys, mask, query_kernel, score_vector, output_kernel)
