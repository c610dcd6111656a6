"""RNN language model: embedding, LSTM layers, projection and softmax over the vocabulary.

Plant ``softmax-on-device0``: every tower computes its projection, softmax and
loss under ``tf.device(device_names[0])``, the way a stray device scope (or soft
placement of a kernel missing elsewhere) sends all replicas' largest matmul to
one device. The variables stay where the caller's scopes put them.
"""

from __future__ import annotations

import contextlib
from typing import Mapping, Sequence

import tensorflow as tf

from rnnprof.models.config import SOFTMAX_ON_DEVICE0, WorkloadConfig
from rnnprof.models.tensorflow.base import TokenWorkload, TowerOutput
from rnnprof.models.data import LMData
from rnnprof.models.tensorflow.layers import (embed_time_major, embedding_table, masked_mean, project,
                                   projection_weights, softmax_cross_entropy, token_count)
from rnnprof.models.tensorflow.lstm import run_stack, wants_cudnn

tf1 = tf.compat.v1


class RNNLMWorkload(TokenWorkload):
    name = "rnnlm"
    words_definition = "non-padding target tokens"

    INPUTS = {"inputs": 2, "targets": 2, "lengths": 1}

    def __init__(self, config: WorkloadConfig):
        super().__init__(config)
        self.seq_len = config.src_max_len
        self.data = LMData(config.vocab_size, self.seq_len, config.data)

    def build_tower(self, inputs: Mapping[str, object], tower: int, device_names: Sequence[str]) -> TowerOutput:
        device = device_names[tower] if device_names else None
        use_cudnn = self.fused and wants_cudnn(device)
        vocab = self.config.vocab_size
        with tf1.variable_scope("embedding"):
            x = embed_time_major(embedding_table(vocab, self.embedding, "table"), inputs["inputs"])
        with tf1.variable_scope("rnn"):
            outputs, _ = run_stack(x, inputs["lengths"], self.embedding, self.units, self.config.layers,
                                   self.fused, use_cudnn=use_cudnn, need_state=False)
        planted = self.config.plant == SOFTMAX_ON_DEVICE0 and bool(device_names)
        with tf1.variable_scope("projection"):
            weights = projection_weights(self.units, vocab)
            with _device(device_names[0] if planted else None):
                logits = project(outputs, weights)
        with _device(device_names[0] if planted else None):
            with tf.name_scope("softmax"):
                token_losses = softmax_cross_entropy(logits, inputs["targets"])
            with tf.name_scope("loss"):
                loss = masked_mean(token_losses, inputs["lengths"])
        with tf.name_scope("words"):
            words = token_count(inputs["lengths"])
        return TowerOutput(loss=loss, words=words)


def _device(name):
    return tf.device(name) if name else contextlib.nullcontext()
