"""NMT seq2seq: LSTM encoder and decoder stacks, optional attention, softmax over the vocabulary.

``--direction bi`` makes encoder layer 0 bidirectional: a forward and a
backward LSTM of ``units`` each (the backward one reads the source through
``tf.reverse_sequence``, so padding stays at the end), their outputs
concatenated and projected back to ``units`` ("encoder/layer_0/bi_projection"); the
other layers are unidirectional. The decoder starts from the encoder layers'
final states (layer 0: the forward LSTM's).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import tensorflow as tf

from rnnprof.models.config import WorkloadConfig
from rnnprof.models.tensorflow.attention import build_attention
from rnnprof.models.tensorflow.base import TokenWorkload, TowerOutput
from rnnprof.models.data import NMTData
from rnnprof.models.tensorflow.layers import (embed_time_major, embedding_table, masked_mean, project,
                                   projection_weights, softmax_cross_entropy, token_count)
from rnnprof.models.tensorflow.lstm import (dynamic_rnn, fused_layer, lstm_weights, run_stack, stack_cell,
                                 uniform_init, wants_cudnn, zero_state)

tf1 = tf.compat.v1


class NMTWorkload(TokenWorkload):
    name = "nmt"
    words_definition = "non-padding source + target tokens (the target counts its </s>)"

    INPUTS = {"src_ids": 2, "src_len": 1, "tgt_in": 2, "tgt_out": 2, "tgt_len": 1}

    def __init__(self, config: WorkloadConfig):
        super().__init__(config)
        self.data = NMTData(config.vocab_size, config.src_max_len, config.tgt_max_len, config.data)

    def build_tower(self, inputs: Mapping[str, object], tower: int, device_names: Sequence[str]) -> TowerOutput:
        device = device_names[tower] if device_names else None
        use_cudnn = self.fused and wants_cudnn(device)
        vocab = self.config.vocab_size
        with tf1.variable_scope("embedding"):
            source = embed_time_major(embedding_table(vocab, self.embedding, "encoder"), inputs["src_ids"])
            target = embed_time_major(embedding_table(vocab, self.embedding, "decoder"), inputs["tgt_in"])
        with tf1.variable_scope("encoder"):
            memory, states = self._encoder(source, inputs["src_len"], use_cudnn)
        with tf1.variable_scope("decoder"):
            outputs = self._decoder(target, inputs["tgt_len"], states, memory, inputs["src_len"], use_cudnn)
        with tf1.variable_scope("projection"):
            logits = project(outputs, projection_weights(self.units, vocab))
        with tf.name_scope("softmax"):
            token_losses = softmax_cross_entropy(logits, inputs["tgt_out"])
        with tf.name_scope("loss"):
            loss = masked_mean(token_losses, inputs["tgt_len"])
        with tf.name_scope("words"):
            words = token_count(inputs["src_len"], inputs["tgt_len"])
        return TowerOutput(loss=loss, words=words)

    def _encoder(self, x, lengths, use_cudnn):
        units, layers = self.units, self.config.layers
        if self.config.direction == "uni":
            return run_stack(x, lengths, self.embedding, units, layers, self.fused, use_cudnn=use_cudnn)
        batch = tf.shape(x)[1]
        with tf1.variable_scope("layer_0"):
            with tf1.variable_scope("forward"):
                fw_out, fw_state = self._single_layer(x, lengths, zero_state(batch, units), use_cudnn)
            with tf1.variable_scope("backward"):
                reversed_x = tf.reverse_sequence(x, lengths, seq_axis=0, batch_axis=1)
                bw_out, _ = self._single_layer(reversed_x, lengths, zero_state(batch, units), use_cudnn)
                bw_out = tf.reverse_sequence(bw_out, lengths, seq_axis=0, batch_axis=1)
            with tf1.variable_scope("bi_projection"):
                kernel = tf1.get_variable("kernel", [2 * units, units], initializer=uniform_init())
                both = tf.concat([fw_out, bw_out], 2)
                x = tf.reshape(tf.matmul(tf.reshape(both, [-1, 2 * units]), kernel), tf.shape(fw_out))
        if layers == 1:
            return x, [fw_state]
        outputs, states = run_stack(x, lengths, units, units, layers - 1, self.fused,
                                    use_cudnn=use_cudnn, first_index=1)
        return outputs, [fw_state] + states

    def _single_layer(self, x, lengths, state, use_cudnn):
        input_size = int(x.shape[-1])
        w = lstm_weights(input_size, self.units)
        if self.fused:
            result = fused_layer(w, x, lengths, state, use_cudnn)
            return result.outputs, result.state
        outputs, (final,) = dynamic_rnn(stack_cell([w]), x, lengths, (state,), self.units)
        return outputs, final

    def _decoder(self, y, lengths, encoder_states, memory, src_len, use_cudnn):
        """Teacher forcing: the decoder reads the gold target shifted right by ``<s>``."""
        units, layers = self.units, self.config.layers
        if self.config.attention == "none":
            outputs, _ = run_stack(y, lengths, self.embedding, units, layers, self.fused,
                                   initial_states=encoder_states, use_cudnn=use_cudnn)
            return outputs
        weights = []
        for n in range(layers):
            with tf1.variable_scope(f"layer_{n}"):
                weights.append(lstm_weights(self.embedding + units if n == 0 else units, units))
        with tf1.variable_scope("attention"):
            attention = build_attention(self.config.attention, memory, src_len, units)
        stack = stack_cell(weights)

        def cell(x, state):
            layer_states, fed = state
            top, layer_states = stack(tf.concat([x, fed], 1), layer_states)
            with tf.name_scope("attention"):
                attended = attention.step(top)
            return attended, (layer_states, attended)

        initial = (tuple(encoder_states), tf.zeros(tf.stack([tf.shape(y)[1], units])))
        outputs, _ = dynamic_rnn(cell, y, lengths, initial, units)
        return outputs
