"""LSTM layers from raw TensorFlow ops: a cell in ``tf.while_loop`` or one fused op per layer.

Both kinds share one weight layout, BlockLSTM's: ``kernel`` is
``[input + units, 4 * units]`` applied to ``[x, h]`` with gates in the order
input, candidate, forget, output, and a forget bias of 1 added at run time.
So the loop and fused graphs of one config have the same variables.

All sequences here are time-major ``[time, batch, features]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import tensorflow as tf

tf1 = tf.compat.v1

FORGET_BIAS = 1.0
INIT_SCALE = 0.1  # uniform(-0.1, 0.1), the usual NMT initialisation


def uniform_init():
    return tf1.random_uniform_initializer(-INIT_SCALE, INIT_SCALE)


@dataclass(frozen=True)
class LSTMWeights:
    kernel: object
    bias: object
    input_size: int
    units: int


@dataclass(frozen=True)
class LayerResult:
    outputs: object  # [time, batch, units], zero past each sequence's end
    state: tuple  # (c, h) at each sequence's last step, [batch, units] each


def lstm_weights(input_size: int, units: int) -> LSTMWeights:
    """Variables of one layer in the current variable scope."""
    kernel = tf1.get_variable("kernel", [input_size + units, 4 * units], initializer=uniform_init())
    bias = tf1.get_variable("bias", [4 * units], initializer=tf1.zeros_initializer())
    return LSTMWeights(kernel, bias, input_size, units)


def lstm_step(w: LSTMWeights, x, state):
    """One time step: ``state`` and the result are ``(c, h)``."""
    c, h = state
    z = tf.nn.bias_add(tf.matmul(tf.concat([x, h], 1), w.kernel), w.bias)
    return gate_update(z, c, FORGET_BIAS)


def gate_update(z, c, forget_bias: float):
    """The LSTM update from the gate pre-activations ``z`` (input, candidate, forget, output)."""
    i, ci, f, o = tf.split(z, 4, axis=1)
    if forget_bias:
        f = f + forget_bias
    c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(ci)
    h = tf.sigmoid(o) * tf.tanh(c)
    return h, (c, h)


def zero_state(batch, units: int):
    z = tf.zeros(tf.stack([batch, units]))
    return (z, z)


def dynamic_rnn(cell: Callable, inputs, lengths, initial_state, output_size: int, carry_state: bool = True):
    """Run ``cell(x_t, state) -> (output, state)`` over time in a ``tf.while_loop``.

    Outputs past a sequence's length are zero, so padding never reaches the outputs
    or the loss. With ``carry_state`` the state is also carried unchanged past the
    length, so the final state is each sequence's own; callers that never read the
    final state skip that per-step select. ``initial_state`` may be any nest of
    ``[batch, n]`` tensors.
    """
    steps = tf.shape(inputs)[0]
    inputs_ta = tf.TensorArray(inputs.dtype, size=steps, element_shape=inputs.shape[1:],
                               name="inputs").unstack(inputs)
    outputs_ta = tf.TensorArray(tf.float32, size=steps, element_shape=tf.TensorShape([None, output_size]),
                                name="outputs")

    def body(t, state, outputs_ta):
        out, new_state = cell(inputs_ta.read(t), state)
        if carry_state:
            alive = tf.expand_dims(t < lengths, 1)  # [batch, 1]
            new_state = tf.nest.map_structure(lambda new, old: tf.where(alive, new, old), new_state, state)
        return t + 1, new_state, outputs_ta.write(t, out)

    _, final_state, outputs_ta = tf1.while_loop(
        lambda t, *_: t < steps, body, (tf.constant(0), initial_state, outputs_ta),
        name="dynamic_rnn")
    outputs = outputs_ta.stack() * sequence_mask_tm(lengths, steps)  # one mask for all steps
    outputs.set_shape([None, None, output_size])
    return outputs, final_state


def stack_cell(layers: list[LSTMWeights], first_index: int = 0) -> Callable:
    """Several layers as one cell, so the whole stack runs in one loop (like MultiRNNCell)."""
    def cell(x, states):
        new_states = []
        for i, w in enumerate(layers):
            with tf.name_scope(f"layer_{first_index + i}"):
                x, s = lstm_step(w, x, states[i])
            new_states.append(s)
        return x, tuple(new_states)
    return cell


def sequence_mask_tm(lengths, steps, dtype=tf.float32):
    """``[time, batch, 1]`` mask: 1 on real tokens."""
    return tf.expand_dims(tf.transpose(tf.sequence_mask(lengths, steps, dtype=dtype)), 2)


def last_step(seq, lengths):
    """``seq[length - 1, b]`` for every batch entry of a time-major ``seq``."""
    batch = tf.shape(lengths)[0]
    index = tf.stack([tf.maximum(lengths - 1, 0), tf.range(batch)], axis=1)
    return tf.gather_nd(seq, index)


def fused_layer(w: LSTMWeights, inputs, lengths, initial_state, use_cudnn: bool = False) -> LayerResult:
    """One layer as one sequence op: BlockLSTM (CPU kernel), or CudnnRNNV3 on a GPU."""
    if use_cudnn:
        return cudnn_layer(w, inputs, lengths, initial_state)
    steps = tf.shape(inputs)[0]
    c0, h0 = initial_state
    zeros = tf.zeros([w.units])  # no peepholes
    out = tf.raw_ops.BlockLSTM(
        seq_len_max=tf.cast(steps, tf.int64), x=inputs, cs_prev=c0, h_prev=h0, w=w.kernel,
        wci=zeros, wcf=zeros, wco=zeros, b=w.bias, forget_bias=FORGET_BIAS, cell_clip=-1.0,
        use_peephole=False, name="BlockLSTM")
    # BlockLSTM runs every entry to seq_len_max: later steps only see earlier ones,
    # so masking the outputs and reading the state at each length is exact.
    h = out.h * sequence_mask_tm(lengths, steps)
    return LayerResult(h, (last_step(out.cs, lengths), last_step(out.h, lengths)))


# --- GPU only: cuDNN. Not exercised on CPU-only machines. ---------------------------------

_CUDNN_GATES = (0, 2, 1, 3)  # cuDNN wants input, forget, candidate, output


def cudnn_params(w: LSTMWeights):
    """The opaque cuDNN parameter buffer from the canonical weights.

    For one unidirectional LSTM layer with linear input the buffer is the
    transposed gate matrices (8: input then recurrent) followed by the biases
    (8: input then recurrent) - plain reshapes and a concat, so gradients flow
    back to ``kernel`` and ``bias``.
    """
    wx, wh = w.kernel[:w.input_size], w.kernel[w.input_size:]
    wx_gates, wh_gates, b_gates = tf.split(wx, 4, 1), tf.split(wh, 4, 1), tf.split(w.bias, 4)
    mats = [tf.transpose(wx_gates[g]) for g in _CUDNN_GATES] + [tf.transpose(wh_gates[g]) for g in _CUDNN_GATES]
    recurrent_bias = [b_gates[g] + (FORGET_BIAS if g == 2 else 0.0) for g in _CUDNN_GATES]
    input_bias = [tf.zeros([w.units])] * 4
    return tf.concat([tf.reshape(m, [-1]) for m in mats] + input_bias + recurrent_bias, axis=0)


def cudnn_layer(w: LSTMWeights, inputs, lengths, initial_state) -> LayerResult:
    c0, h0 = initial_state
    out = tf.raw_ops.CudnnRNNV3(
        input=inputs, input_h=tf.expand_dims(h0, 0), input_c=tf.expand_dims(c0, 0),
        params=cudnn_params(w), sequence_lengths=lengths, rnn_mode="lstm", input_mode="linear_input",
        direction="unidirectional", dropout=0.0, is_training=True, time_major=True, name="CudnnRNN")
    steps = tf.shape(inputs)[0]
    h = out.output * sequence_mask_tm(lengths, steps)
    return LayerResult(h, (out.output_c[0], out.output_h[0]))


def gpu_visible() -> bool:
    return bool(tf.config.list_physical_devices("GPU"))


def wants_cudnn(device_name: str | None) -> bool:
    """cuDNN only where a GPU exists and the tower is placed on one."""
    if not gpu_visible():
        return False
    return device_name is None or "gpu" in str(device_name).lower()


def run_stack(x, lengths, input_size: int, units: int, num_layers: int, fused: bool,
              initial_states=None, use_cudnn: bool = False, first_index: int = 0, need_state: bool = True):
    """Unidirectional layers ``layer_{first_index}..``, created in the current variable scope.

    Loop: one ``tf.while_loop`` per layer (``loop_layer``). Fused: one sequence op
    per layer. Returns the top outputs and each layer's final ``(c, h)`` (with
    ``need_state=False`` the loop layers' final states are not each sequence's own).
    """
    batch = tf.shape(x)[1]
    if initial_states is None:
        initial_states = [zero_state(batch, units) for _ in range(num_layers)]
    if fused:
        states = []
        for n in range(num_layers):
            with tf1.variable_scope(f"layer_{first_index + n}"):
                w = lstm_weights(input_size if n == 0 else units, units)
                result = fused_layer(w, x, lengths, initial_states[n], use_cudnn)
            x = result.outputs
            states.append(result.state)
        return x, states
    states = []
    for n in range(num_layers):
        with tf1.variable_scope(f"layer_{first_index + n}"):
            w = lstm_weights(input_size if n == 0 else units, units)
            result = loop_layer(w, x, lengths, initial_states[n], carry_state=need_state)
        x = result.outputs
        states.append(result.state)
    return x, states


def loop_layer(w: LSTMWeights, inputs, lengths, initial_state, carry_state: bool = True) -> LayerResult:
    """One layer as a cell in its own ``tf.while_loop``.

    The input half of the gate matmul does not depend on the recurrence, so it runs
    once for all steps before the loop; each iteration multiplies only ``h``. The
    math is ``lstm_step``'s (same weights, same forget bias).

    The kernel's input and recurrent halves come from one ``Split``, whose gradient is one
    ``ConcatV2`` of the two halves' gradients; two slices would instead cost two
    ``StridedSliceGrad`` (each a zero-filled kernel-sized buffer) and an ``AddN`` per layer
    and step.
    """
    wx, wh = tf.split(w.kernel, [w.input_size, w.units], axis=0)
    gate_bias = w.bias + tf.constant([0.0] * (2 * w.units) + [FORGET_BIAS] * w.units + [0.0] * w.units)
    steps, batch = tf.shape(inputs)[0], tf.shape(inputs)[1]
    projected = tf.nn.bias_add(tf.matmul(tf.reshape(inputs, [-1, w.input_size]), wx), gate_bias)
    projected = tf.reshape(projected, tf.stack([steps, batch, 4 * w.units]))

    def cell(xw, state):
        c, h = state
        return gate_update(xw + tf.matmul(h, wh), c, forget_bias=0.0)  # already in gate_bias

    outputs, state = dynamic_rnn(cell, projected, lengths, tuple(initial_state), w.units, carry_state)
    return LayerResult(outputs, state)
