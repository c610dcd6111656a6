"""The cost models of PyTorch operators (``aten::``, ``flash_attn::``) from a ``cpu_op``'s ``Input Dims``,
``Input type`` and ``Concrete Inputs``: GEMM, convolution and its backward, attention, normalization,
elementwise, reductions (``ATEN_MODELS``, by operator name)."""

from __future__ import annotations

from rnnprof.analyzers.flops.base import (CONV_BWD, CONV_FWD, ELEMENTWISE, NORM_BWD, NORM_FWD, REDUCE, SDPA_BWD,
                                          SDPA_FWD, OpCost, bpe_of, broadcast, concrete_value, dtype_of, gemm,
                                          is_tensor, numel, tensor_bytes)

# -- GEMM -------------------------------------------------------------------------------------------


def _mm(dims, types, concrete) -> OpCost | None:
    (m, k), (_, n) = dims[0], dims[1]
    return gemm(1, m, n, k, 0, bpe_of(types, 0), bpe_of(types, 1), 0, bpe_of(types, 0), dtype_of(types, 0))


def _addmm(dims, types, concrete) -> OpCost | None:
    (m, k), (_, n) = dims[1], dims[2]
    return gemm(1, m, n, k, numel(dims[0]), bpe_of(types, 1), bpe_of(types, 2), bpe_of(types, 0), bpe_of(types, 1),
                 dtype_of(types, 1))


def _bmm(dims, types, concrete) -> OpCost | None:
    (b, m, k), (_, _, n) = dims[0], dims[1]
    return gemm(b, m, n, k, 0, bpe_of(types, 0), bpe_of(types, 1), 0, bpe_of(types, 0), dtype_of(types, 0))


def _baddbmm(dims, types, concrete) -> OpCost | None:
    (b, m, k), (_, _, n) = dims[1], dims[2]
    return gemm(b, m, n, k, numel(dims[0]), bpe_of(types, 1), bpe_of(types, 2), bpe_of(types, 0), bpe_of(types, 1),
                 dtype_of(types, 1))


def _scaled_mm(dims, types, concrete) -> OpCost | None:
    # _scaled_mm(self, mat2, scale_a, scale_b, bias?, scale_result?, out_dtype?, use_fast_accum)
    (m, k), (_, n) = dims[0], dims[1]
    bias = numel(dims[4]) if is_tensor(dims, types, 4) and dims[4] else 0
    bpe = bpe_of(types, 0)
    out_bpe = 2 if bpe == 1 else bpe  # fp8 GEMMs write fp16/bf16 unless told otherwise
    return gemm(1, m, n, k, bias, bpe, bpe_of(types, 1), bpe_of(types, 4, 2), out_bpe, dtype_of(types, 0))


def _matmul(dims, types, concrete) -> OpCost | None:
    a, b = dims[0], dims[1]
    if len(a) == 0 or len(b) == 0:
        return None
    if len(a) == 1 and len(b) == 1:
        return gemm(1, 1, 1, a[0], 0, bpe_of(types, 0), bpe_of(types, 1), 0, bpe_of(types, 0), dtype_of(types, 0))
    if len(b) == 1:  # (..., M, K) @ (K,)
        return gemm(1, numel(a[:-1]), 1, a[-1], 0, bpe_of(types, 0), bpe_of(types, 1), 0, bpe_of(types, 0),
                     dtype_of(types, 0))
    if len(a) == 1:  # (K,) @ (..., K, N)
        return gemm(numel(b[:-2]), 1, b[-1], a[0], 0, bpe_of(types, 0), bpe_of(types, 1), 0, bpe_of(types, 0),
                     dtype_of(types, 0))
    if len(b) == 2:  # (..., M, K) @ (K, N): leading dimensions fold into M
        return gemm(1, numel(a[:-1]), b[1], a[-1], 0, bpe_of(types, 0), bpe_of(types, 1), 0, bpe_of(types, 0),
                     dtype_of(types, 0))
    batch = numel(broadcast(a[:-2], b[:-2]))
    return gemm(batch, a[-2], b[-1], a[-1], 0, bpe_of(types, 0), bpe_of(types, 1), 0, bpe_of(types, 0),
                 dtype_of(types, 0))


def _linear(dims, types, concrete) -> OpCost | None:
    x, w = dims[0], dims[1]
    if len(w) != 2 or not x:
        return None
    bias = numel(dims[2]) if is_tensor(dims, types, 2) and dims[2] else 0
    return gemm(1, numel(x[:-1]), w[0], x[-1], bias, bpe_of(types, 0), bpe_of(types, 1), bpe_of(types, 2),
                 bpe_of(types, 0), dtype_of(types, 0))


# -- convolution ----------------------------------------------------------------------------------


def _ints(value, n: int) -> list[int] | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return [int(value)] * n
    values = [int(v) for v in value]
    return values * n if len(values) == 1 else values


def _conv_out(x, w, stride, padding, dilation, transposed, output_padding) -> list[int] | None:
    spatial = len(x) - 2
    stride, padding, dilation = (_ints(stride, spatial) or [1] * spatial, _ints(padding, spatial) or [0] * spatial,
                                 _ints(dilation, spatial) or [1] * spatial)
    output_padding = _ints(output_padding, spatial) or [0] * spatial
    if min(len(stride), len(padding), len(dilation), len(output_padding)) < spatial:
        return None
    out = []
    for d in range(spatial):
        size, kernel = x[2 + d], w[2 + d]
        if transposed:
            out.append((size - 1) * stride[d] - 2 * padding[d] + dilation[d] * (kernel - 1) + output_padding[d] + 1)
        else:
            out.append((size + 2 * padding[d] - dilation[d] * (kernel - 1) - 1) // stride[d] + 1)
    return out


def _conv_shapes(x, w, groups, stride, padding, dilation, transposed, output_padding):
    """(output shape, FLOPs of the forward convolution without bias), or None."""
    if len(x) < 3 or len(w) != len(x):
        return None
    spatial = _conv_out(x, w, stride, padding, dilation, transposed, output_padding)
    if spatial is None or min(spatial, default=1) <= 0:
        return None
    groups = int(groups or 1)
    c_out = w[1] * groups if transposed else w[0]
    out = [x[0], c_out, *spatial]
    # w[1] is C_in/groups (C_out/groups when transposed): each output (input) element takes that many
    # multiply-adds per kernel position.
    per_element = 2 * numel(w[1:])
    flops = (numel(x) if transposed else numel(out)) * per_element
    return out, flops


# Positions of (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups) in the
# convolution operators' signatures; None: the argument is absent (its default applies).
_CONV_ARGS = {
    "aten::convolution": (0, 1, 2, 3, 4, 5, 6, 7, 8),
    "aten::_convolution": (0, 1, 2, 3, 4, 5, 6, 7, 8),
    "aten::conv1d": (0, 1, 2, 3, 4, 5, None, None, 6),
    "aten::conv2d": (0, 1, 2, 3, 4, 5, None, None, 6),
    "aten::conv3d": (0, 1, 2, 3, 4, 5, None, None, 6),
    "aten::cudnn_convolution": (0, 1, None, 3, 2, 4, None, None, 5),
    "aten::miopen_convolution": (0, 1, 2, 4, 3, 5, None, None, 6),
    "aten::cudnn_convolution_transpose": (0, 1, None, 4, 2, 5, "T", 3, 6),
    "aten::conv_transpose1d": (0, 1, 2, 3, 4, 7, "T", 5, 6),
    "aten::conv_transpose2d": (0, 1, 2, 3, 4, 7, "T", 5, 6),
    "aten::conv_transpose3d": (0, 1, 2, 3, 4, 7, "T", 5, 6),
    "aten::mkldnn_convolution": (0, 1, 2, 4, 3, 5, None, None, 6),
}


def _convolution(name):
    x_i, w_i, b_i, s_i, p_i, d_i, t_i, op_i, g_i = _CONV_ARGS[name]

    def cost(dims, types, concrete) -> OpCost | None:
        x, w = dims[x_i], dims[w_i]
        arg = (lambda i: None if i is None else concrete_value(concrete, i))
        transposed = True if t_i == "T" else bool(arg(t_i))
        shapes = _conv_shapes(x, w, arg(g_i), arg(s_i), arg(p_i), arg(d_i), transposed, arg(op_i))
        if shapes is None:
            return None
        out, flops = shapes
        has_bias = b_i is not None and is_tensor(dims, types, b_i) and bool(dims[b_i])
        if has_bias:
            flops += numel(out)
        bpe = bpe_of(types, x_i)
        nbytes = (numel(x) + numel(out)) * bpe + tensor_bytes(dims, types, w_i) + (
            tensor_bytes(dims, types, b_i) if has_bias else 0)
        return OpCost(CONV_FWD, flops, nbytes, dtype_of(types, x_i))

    return cost


def _convolution_backward(dims, types, concrete) -> OpCost | None:
    # convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
    #                      output_padding, groups, output_mask)
    grad_out, x, w = dims[0], dims[1], dims[2]
    arg = (lambda i: concrete_value(concrete, i))
    transposed = bool(arg(7))
    shapes = _conv_shapes(x, w, arg(9), arg(4), arg(5), arg(6), transposed, arg(8))
    if shapes is None:
        return None
    _, fwd_flops = shapes
    mask = arg(10)
    if not isinstance(mask, (list, tuple)) or len(mask) != 3:
        bias_sizes = arg(3)
        mask = (True, True, bool(bias_sizes))
    bpe = bpe_of(types, 0)
    go, xn, wn = numel(grad_out), numel(x), numel(w)
    flops = nbytes = 0
    if mask[0]:  # grad input: reads grad output and weight, writes grad input
        flops += fwd_flops
        nbytes += (go + wn + xn) * bpe
    if mask[1]:  # grad weight: reads grad output and input, writes grad weight
        flops += fwd_flops
        nbytes += (go + xn + wn) * bpe
    if mask[2]:  # grad bias: sums grad output per channel
        flops += go
        nbytes += (go + grad_out[1]) * bpe
    return OpCost(CONV_BWD, flops, nbytes, dtype_of(types, 0))


# -- attention --------------------------------------------------------------------------------------


def _attention(q_i: int, k_i: int, v_i: int, causal_i: int | None, backward: bool, layout: str = "BHNd",
               grad_i: int | None = None):
    def cost(dims, types, concrete) -> OpCost | None:
        q, k, v = dims[q_i], dims[k_i], dims[v_i]
        if len(q) != 4 or len(k) != 4 or len(v) != 4:
            return None
        if layout == "BHNd":
            (b, h_q, n_q, d_qk), (_, h_kv, n_kv, _), d_v = q, k, v[3]
        else:  # flash_attn's (B, N, H, d)
            (b, n_q, h_q, d_qk), (_, n_kv, h_kv, _), d_v = q, k, v[3]
        causal = bool(concrete_value(concrete, causal_i)) if causal_i is not None else False
        products = b * h_q * (2 * n_q * n_kv * d_qk + 2 * n_q * n_kv * d_v)
        if backward:  # recomputed QK^T, dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q
            products = b * h_q * 2 * n_q * n_kv * (3 * d_qk + 2 * d_v)
        if causal and n_q == n_kv:
            products //= 2
        bpe = bpe_of(types, q_i)
        qkv = b * (n_q * h_q * d_qk + n_kv * h_kv * (d_qk + d_v))
        out = b * n_q * h_q * d_v
        nbytes = (2 * qkv + out) * bpe if backward else (qkv + out) * bpe
        return OpCost(SDPA_BWD if backward else SDPA_FWD, products, nbytes, dtype_of(types, q_i))

    return cost


# -- normalization ---------------------------------------------------------------------------------


def _norm(x_i: int, params: tuple[int, ...], rms: bool = False, backward: bool = False, grad_i: int | None = None):
    def cost(dims, types, concrete) -> OpCost | None:
        if not is_tensor(dims, types, x_i):
            return None
        n = numel(dims[x_i])
        affine = [i for i in params if is_tensor(dims, types, i) and dims[i]]
        flops = n * (3 if rms else 5) + n * min(len(affine), 1 if rms else 2)
        bpe = bpe_of(types, x_i)
        param_bytes = sum(tensor_bytes(dims, types, i) for i in affine)
        if backward:
            return OpCost(NORM_BWD, 2 * flops, 3 * n * bpe + 2 * param_bytes, dtype_of(types, x_i))
        return OpCost(NORM_FWD, flops, 2 * n * bpe + param_bytes, dtype_of(types, x_i))

    return cost


# -- elementwise and reductions ---------------------------------------------------------------------


def _elementwise(n_inputs: int | None):
    """The cost model of an elementwise op; ``n_inputs``: how many leading arguments are inputs (a tensor after
    them is an ``out=``), None: all."""

    def cost(dims, types, concrete) -> OpCost | None:
        last = len(dims) if n_inputs is None else min(n_inputs, len(dims))
        tensors = [i for i in range(last) if is_tensor(dims, types, i)]
        if not tensors:
            return None
        out = broadcast(*(dims[i] for i in tensors))
        # the output's dtype: that of the largest input (a 0-dim tensor does not promote a dimensioned one)
        widest = max(tensors, key=lambda i: (numel(dims[i]) if dims[i] else 0, -i))
        nbytes = sum(tensor_bytes(dims, types, i) for i in tensors) + numel(out) * bpe_of(types, widest)
        return OpCost(ELEMENTWISE, numel(out), nbytes, dtype_of(types, widest))

    return cost


def _copy(dims, types, concrete) -> OpCost | None:
    # copy_(self, src): reads src, writes self
    if not (is_tensor(dims, types, 0) and is_tensor(dims, types, 1)):
        return None
    nbytes = tensor_bytes(dims, types, 0) + tensor_bytes(dims, types, 1)
    return OpCost(ELEMENTWISE, numel(dims[0]), nbytes, dtype_of(types, 0))


def _reduce(per_element: int, dim_i: int | None, keep_i: int | None = None):
    def cost(dims, types, concrete) -> OpCost | None:
        if not is_tensor(dims, types, 0):
            return None
        x = dims[0]
        n = numel(x)
        bpe = bpe_of(types, 0)
        if per_element > 1:  # softmax-like: the output is the input's shape
            return OpCost(REDUCE, per_element * n, 2 * n * bpe, dtype_of(types, 0))
        reduced = concrete_value(concrete, dim_i) if dim_i is not None else None
        if reduced is None or reduced == [] or not x:
            out = 1
        else:
            axes = {int(a) % len(x) for a in ([reduced] if isinstance(reduced, int) else reduced)}
            out = numel([s for j, s in enumerate(x) if j not in axes])
        return OpCost(REDUCE, n, (n + out) * bpe, dtype_of(types, 0))

    return cost


_UNARY = ("relu", "relu_", "gelu", "gelu_", "silu", "silu_", "sigmoid", "sigmoid_", "tanh", "tanh_", "exp", "exp_",
          "log", "log_", "sqrt", "rsqrt", "neg", "abs", "reciprocal", "sin", "cos", "erf", "clamp", "clamp_",
          "clamp_min", "clamp_min_", "clamp_max", "clamp_max_", "hardtanh", "hardtanh_", "leaky_relu", "elu", "mish",
          "fill_", "zero_", "square", "threshold", "log1p", "expm1", "floor", "ceil", "round", "sign", "logical_not",
          "bitwise_not", "_to_copy", "clone", "dropout", "native_dropout")
_BINARY = ("add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "pow", "pow_", "maximum", "minimum", "eq",
           "ne", "lt", "le", "gt", "ge", "remainder", "fmod", "rsub", "logical_and", "logical_or", "bitwise_and",
           "bitwise_or", "atan2", "copysign", "masked_fill", "masked_fill_", "gelu_backward", "silu_backward",
           "sigmoid_backward", "tanh_backward", "threshold_backward", "hardtanh_backward", "native_dropout_backward")
_TERNARY = ("where", "lerp", "lerp_", "addcmul", "addcmul_", "addcdiv", "addcdiv_")

ATEN_MODELS = {
    "aten::mm": _mm,
    "aten::addmm": _addmm,
    "aten::bmm": _bmm,
    "aten::baddbmm": _baddbmm,
    "aten::matmul": _matmul,
    "aten::linear": _linear,
    "aten::_scaled_mm": _scaled_mm,
    "aten::convolution_backward": _convolution_backward,
    # attention: positions of q, k, v and is_causal
    "aten::scaled_dot_product_attention": _attention(0, 1, 2, 5, False),
    "aten::_scaled_dot_product_flash_attention": _attention(0, 1, 2, 4, False),
    "aten::_scaled_dot_product_efficient_attention": _attention(0, 1, 2, 6, False),
    "aten::_scaled_dot_product_cudnn_attention": _attention(0, 1, 2, 6, False),
    "aten::_scaled_dot_product_flash_attention_for_cpu": _attention(0, 1, 2, 4, False),
    "aten::_flash_attention_forward": _attention(0, 1, 2, 8, False, layout="BNHd"),
    "aten::_efficient_attention_forward": _attention(0, 1, 2, None, False, layout="BNHd"),
    "flash_attn::_flash_attn_forward": _attention(0, 1, 2, 5, False, layout="BNHd"),
    "aten::_scaled_dot_product_flash_attention_backward": _attention(1, 2, 3, 11, True),
    "aten::_scaled_dot_product_efficient_attention_backward": _attention(1, 2, 3, 11, True),
    "aten::_scaled_dot_product_cudnn_attention_backward": _attention(1, 2, 3, 14, True),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": _attention(1, 2, 3, 6, True),
    "flash_attn::_flash_attn_backward": _attention(1, 2, 3, 11, True, layout="BNHd"),
    # normalization: position of the input and of the affine parameters
    "aten::layer_norm": _norm(0, (2, 3)),
    "aten::native_layer_norm": _norm(0, (2, 3)),
    "aten::batch_norm": _norm(0, (1, 2)),
    "aten::native_batch_norm": _norm(0, (1, 2)),
    "aten::_native_batch_norm_legit": _norm(0, (1, 2)),
    "aten::_native_batch_norm_legit_no_training": _norm(0, (1, 2)),
    "aten::cudnn_batch_norm": _norm(0, (1, 2)),
    "aten::miopen_batch_norm": _norm(0, (1, 2)),
    "aten::instance_norm": _norm(0, (1, 2)),
    "aten::group_norm": _norm(0, (2, 3)),
    "aten::native_group_norm": _norm(0, (1, 2)),
    "aten::rms_norm": _norm(0, (2,), rms=True),
    "aten::_fused_rms_norm": _norm(0, (2,), rms=True),
    "aten::native_layer_norm_backward": _norm(1, (4, 5), backward=True),
    "aten::native_batch_norm_backward": _norm(1, (2,), backward=True),
    "aten::cudnn_batch_norm_backward": _norm(0, (2,), backward=True),
    "aten::miopen_batch_norm_backward": _norm(0, (2,), backward=True),
    "aten::native_group_norm_backward": _norm(1, (4,), backward=True),
    "aten::_fused_rms_norm_backward": _norm(1, (3,), rms=True, backward=True),
    # reductions: FLOPs per input element, position of the reduced dims
    "aten::sum": _reduce(1, 1),
    "aten::mean": _reduce(1, 1),
    "aten::amax": _reduce(1, 1),
    "aten::amin": _reduce(1, 1),
    "aten::prod": _reduce(1, 1),
    "aten::norm": _reduce(1, 2),
    "aten::linalg_vector_norm": _reduce(1, 2),
    "aten::var": _reduce(1, 1),
    "aten::std": _reduce(1, 1),
    "aten::argmax": _reduce(1, 1),
    "aten::max": _reduce(1, 1),
    "aten::min": _reduce(1, 1),
    "aten::softmax": _reduce(5, None),
    "aten::_softmax": _reduce(5, None),
    "aten::log_softmax": _reduce(5, None),
    "aten::_log_softmax": _reduce(5, None),
    "aten::_softmax_backward_data": _reduce(5, None),
    "aten::copy_": _copy,
}
for _name in _CONV_ARGS:
    ATEN_MODELS[_name] = _convolution(_name)
for _names, _inputs in ((_UNARY, 1), (_BINARY, 2), (_TERNARY, 3)):
    for _name in _names:
        ATEN_MODELS[f"aten::{_name}"] = _elementwise(_inputs)
