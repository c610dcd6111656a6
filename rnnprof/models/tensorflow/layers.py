"""Embedding, vocabulary projection and the masked softmax loss shared by the workloads."""

from __future__ import annotations

import tensorflow as tf

from rnnprof.models.tensorflow.lstm import sequence_mask_tm, uniform_init

tf1 = tf.compat.v1


def embedding_table(vocab_size: int, dim: int, name: str):
    return tf1.get_variable(name, [vocab_size, dim], initializer=uniform_init())


def embed_time_major(table, ids):
    """``ids`` ``[batch, time]`` -> embeddings ``[time, batch, dim]``."""
    return tf.nn.embedding_lookup(table, tf.transpose(ids))


def projection_weights(units: int, vocab_size: int):
    """The output layer's kernel and bias (the bias learns word frequencies fast)."""
    kernel = tf1.get_variable("kernel", [units, vocab_size], initializer=uniform_init())
    bias = tf1.get_variable("bias", [vocab_size], initializer=tf1.zeros_initializer())
    return kernel, bias


def project(outputs, weights):
    """``[time, batch, units]`` -> logits ``[time, batch, vocab]`` as one big matmul."""
    kernel, bias = weights
    units = tf.shape(outputs)[2]
    flat = tf.reshape(outputs, tf.stack([-1, units]))
    logits = tf.nn.bias_add(tf.matmul(flat, kernel), bias)
    vocab = int(kernel.shape[1])
    return tf.reshape(logits, tf.concat([tf.shape(outputs)[:2], [vocab]], 0))


def softmax_cross_entropy(logits, labels_batch_major):
    """Per-token loss ``[time, batch]``; labels arrive ``[batch, time]`` like the inputs."""
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.transpose(labels_batch_major), logits=logits)


def masked_mean(token_losses, lengths):
    """Mean over real tokens: padding contributes nothing to the sum or the count."""
    mask = tf.squeeze(sequence_mask_tm(lengths, tf.shape(token_losses)[0]), 2)
    return tf.reduce_sum(token_losses * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)


def token_count(*lengths):
    total = tf.add_n([tf.reduce_sum(n) for n in lengths]) if len(lengths) > 1 else tf.reduce_sum(lengths[0])
    return tf.identity(total, name="words")
