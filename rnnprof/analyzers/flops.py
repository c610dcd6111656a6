"""FLOPs and bytes of one operator from its recorded shapes: PyTorch ``cpu_op``s and TensorFlow kernels.

``op_cost(name, dims, types, concrete)`` takes a ``cpu_op``'s ``Input Dims``, ``Input type`` and ``Concrete
Inputs`` and gives an ``OpCost`` (family, FLOPs, bytes moved, the dtype it computes in), or None for an
operator with no model here or whose shapes do not fit it. ``tf_op_cost`` does the same for a TensorFlow op
type from the shapes of the executed kernel's inputs and output, as a run's step stats record them.

A FLOP is one multiply or one add; bytes are what an ideal kernel reads and writes once. The models (GEMM,
convolution and its backward, attention, normalization, elementwise, reductions; TensorFlow's ``MatMul``,
``Conv2D``, ``BlockLSTM``...) are tabled in docs/commands/roofline.md.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass

GEMM, CONV_FWD, CONV_BWD = "GEMM", "CONV_fwd", "CONV_bwd"
SDPA_FWD, SDPA_BWD = "SDPA_fwd", "SDPA_bwd"
NORM_FWD, NORM_BWD = "Normalization_fwd", "Normalization_bwd"
ELEMENTWISE, REDUCE = "Elementwise", "Reduce"
FAMILIES = (GEMM, CONV_FWD, CONV_BWD, SDPA_FWD, SDPA_BWD, NORM_FWD, NORM_BWD, ELEMENTWISE, REDUCE)
# Families whose work runs on matrix units (tensor cores); the others run on vector units.
MATRIX_FAMILIES = frozenset({GEMM, CONV_FWD, CONV_BWD, SDPA_FWD, SDPA_BWD})

# Bytes per element of the dtypes ``Input type`` names.
DTYPE_BYTES = {
    "double": 8, "float": 4, "c10::Half": 2, "c10::BFloat16": 2, "half": 2, "bfloat16": 2,
    "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1,
    "c10::Float8_e8m0fnu": 1, "c10::Float4_e2m1fn_x2": 1,
    "long int": 8, "int64_t": 8, "int": 4, "short int": 2, "short": 2, "signed char": 1, "unsigned char": 1,
    "bool": 1, "c10::complex<float>": 8, "c10::complex<double>": 16, "c10::complex<c10::Half>": 4,
}
# The short name of a dtype, for reports and peak look-ups.
DTYPE_NAMES = {
    "double": "fp64", "float": "fp32", "c10::Half": "fp16", "half": "fp16", "c10::BFloat16": "bf16",
    "bfloat16": "bf16", "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8", "c10::Float4_e2m1fn_x2": "fp4", "signed char": "int8", "unsigned char": "int8",
    "long int": "int64", "int": "int32", "bool": "bool",
}


@dataclass(frozen=True)
class OpCost:
    family: str
    flops: float
    bytes: float
    dtype: str  # short name (fp32, bf16, ...) of the dtype it computes in; "" when unknown


def _numel(shape) -> int:
    return math.prod(int(d) for d in shape) if shape else 1


def _is_tensor(dims, types, i: int) -> bool:
    """Argument ``i`` is a tensor: it has a recorded dtype that is a tensor type (not Scalar, ScalarList...)."""
    return i < len(types) and types[i] in DTYPE_BYTES and i < len(dims) and isinstance(dims[i], list)


def _bpe(types, i: int, default: int = 0) -> int:
    return DTYPE_BYTES.get(types[i], default) if i < len(types) else default


def _tensor_bytes(dims, types, i: int) -> int:
    return _numel(dims[i]) * _bpe(types, i) if _is_tensor(dims, types, i) else 0


def _dtype(types, i: int) -> str:
    return DTYPE_NAMES.get(types[i], types[i]) if i < len(types) else ""


def _concrete(concrete, i: int):
    """The value of scalar argument ``i`` (``Concrete Inputs`` text), or None."""
    if concrete is None or i >= len(concrete):
        return None
    text = concrete[i]
    if not isinstance(text, str):
        return text
    text = text.strip()
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        try:
            return float(text)
        except ValueError:
            return None


def _broadcast(*shapes) -> list[int]:
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(ndim):
        sizes = [s[len(s) - ndim + k] for s in shapes if len(s) - ndim + k >= 0]
        big = [x for x in sizes if x != 1]
        out.append(max(big) if big else 1)
    return out


# -- GEMM -------------------------------------------------------------------------------------------


def _gemm(batch: int, m: int, n: int, k: int, bias_elems: int, bpe_a: int, bpe_b: int, bpe_bias: int,
          bpe_out: int, dtype: str) -> OpCost:
    flops = batch * (2 * m * n * k + (m * n if bias_elems else 0))
    nbytes = batch * (m * k * bpe_a + k * n * bpe_b + m * n * bpe_out) + bias_elems * bpe_bias
    return OpCost(GEMM, flops, nbytes, dtype)


def _mm(dims, types, concrete) -> OpCost | None:
    (m, k), (_, n) = dims[0], dims[1]
    return _gemm(1, m, n, k, 0, _bpe(types, 0), _bpe(types, 1), 0, _bpe(types, 0), _dtype(types, 0))


def _addmm(dims, types, concrete) -> OpCost | None:
    (m, k), (_, n) = dims[1], dims[2]
    return _gemm(1, m, n, k, _numel(dims[0]), _bpe(types, 1), _bpe(types, 2), _bpe(types, 0), _bpe(types, 1),
                 _dtype(types, 1))


def _bmm(dims, types, concrete) -> OpCost | None:
    (b, m, k), (_, _, n) = dims[0], dims[1]
    return _gemm(b, m, n, k, 0, _bpe(types, 0), _bpe(types, 1), 0, _bpe(types, 0), _dtype(types, 0))


def _baddbmm(dims, types, concrete) -> OpCost | None:
    (b, m, k), (_, _, n) = dims[1], dims[2]
    return _gemm(b, m, n, k, _numel(dims[0]), _bpe(types, 1), _bpe(types, 2), _bpe(types, 0), _bpe(types, 1),
                 _dtype(types, 1))


def _scaled_mm(dims, types, concrete) -> OpCost | None:
    # _scaled_mm(self, mat2, scale_a, scale_b, bias?, scale_result?, out_dtype?, use_fast_accum)
    (m, k), (_, n) = dims[0], dims[1]
    bias = _numel(dims[4]) if _is_tensor(dims, types, 4) and dims[4] else 0
    bpe = _bpe(types, 0)
    out_bpe = 2 if bpe == 1 else bpe  # fp8 GEMMs write fp16/bf16 unless told otherwise
    return _gemm(1, m, n, k, bias, bpe, _bpe(types, 1), _bpe(types, 4, 2), out_bpe, _dtype(types, 0))


def _matmul(dims, types, concrete) -> OpCost | None:
    a, b = dims[0], dims[1]
    if len(a) == 0 or len(b) == 0:
        return None
    if len(a) == 1 and len(b) == 1:
        return _gemm(1, 1, 1, a[0], 0, _bpe(types, 0), _bpe(types, 1), 0, _bpe(types, 0), _dtype(types, 0))
    if len(b) == 1:  # (..., M, K) @ (K,)
        return _gemm(1, _numel(a[:-1]), 1, a[-1], 0, _bpe(types, 0), _bpe(types, 1), 0, _bpe(types, 0),
                     _dtype(types, 0))
    if len(a) == 1:  # (K,) @ (..., K, N)
        return _gemm(_numel(b[:-2]), 1, b[-1], a[0], 0, _bpe(types, 0), _bpe(types, 1), 0, _bpe(types, 0),
                     _dtype(types, 0))
    if len(b) == 2:  # (..., M, K) @ (K, N): leading dimensions fold into M
        return _gemm(1, _numel(a[:-1]), b[1], a[-1], 0, _bpe(types, 0), _bpe(types, 1), 0, _bpe(types, 0),
                     _dtype(types, 0))
    batch = _numel(_broadcast(a[:-2], b[:-2]))
    return _gemm(batch, a[-2], b[-1], a[-1], 0, _bpe(types, 0), _bpe(types, 1), 0, _bpe(types, 0),
                 _dtype(types, 0))


def _linear(dims, types, concrete) -> OpCost | None:
    x, w = dims[0], dims[1]
    if len(w) != 2 or not x:
        return None
    bias = _numel(dims[2]) if _is_tensor(dims, types, 2) and dims[2] else 0
    return _gemm(1, _numel(x[:-1]), w[0], x[-1], bias, _bpe(types, 0), _bpe(types, 1), _bpe(types, 2),
                 _bpe(types, 0), _dtype(types, 0))


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
    per_element = 2 * _numel(w[1:])
    flops = (_numel(x) if transposed else _numel(out)) * per_element
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
        arg = (lambda i: None if i is None else _concrete(concrete, i))
        transposed = True if t_i == "T" else bool(arg(t_i))
        shapes = _conv_shapes(x, w, arg(g_i), arg(s_i), arg(p_i), arg(d_i), transposed, arg(op_i))
        if shapes is None:
            return None
        out, flops = shapes
        has_bias = b_i is not None and _is_tensor(dims, types, b_i) and bool(dims[b_i])
        if has_bias:
            flops += _numel(out)
        bpe = _bpe(types, x_i)
        nbytes = (_numel(x) + _numel(out)) * bpe + _tensor_bytes(dims, types, w_i) + (
            _tensor_bytes(dims, types, b_i) if has_bias else 0)
        return OpCost(CONV_FWD, flops, nbytes, _dtype(types, x_i))

    return cost


def _convolution_backward(dims, types, concrete) -> OpCost | None:
    # convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
    #                      output_padding, groups, output_mask)
    grad_out, x, w = dims[0], dims[1], dims[2]
    arg = (lambda i: _concrete(concrete, i))
    transposed = bool(arg(7))
    shapes = _conv_shapes(x, w, arg(9), arg(4), arg(5), arg(6), transposed, arg(8))
    if shapes is None:
        return None
    _, fwd_flops = shapes
    mask = arg(10)
    if not isinstance(mask, (list, tuple)) or len(mask) != 3:
        bias_sizes = arg(3)
        mask = (True, True, bool(bias_sizes))
    bpe = _bpe(types, 0)
    go, xn, wn = _numel(grad_out), _numel(x), _numel(w)
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
    return OpCost(CONV_BWD, flops, nbytes, _dtype(types, 0))


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
        causal = bool(_concrete(concrete, causal_i)) if causal_i is not None else False
        products = b * h_q * (2 * n_q * n_kv * d_qk + 2 * n_q * n_kv * d_v)
        if backward:  # recomputed QK^T, dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q
            products = b * h_q * 2 * n_q * n_kv * (3 * d_qk + 2 * d_v)
        if causal and n_q == n_kv:
            products //= 2
        bpe = _bpe(types, q_i)
        qkv = b * (n_q * h_q * d_qk + n_kv * h_kv * (d_qk + d_v))
        out = b * n_q * h_q * d_v
        nbytes = (2 * qkv + out) * bpe if backward else (qkv + out) * bpe
        return OpCost(SDPA_BWD if backward else SDPA_FWD, products, nbytes, _dtype(types, q_i))

    return cost


# -- normalization ---------------------------------------------------------------------------------


def _norm(x_i: int, params: tuple[int, ...], rms: bool = False, backward: bool = False, grad_i: int | None = None):
    def cost(dims, types, concrete) -> OpCost | None:
        if not _is_tensor(dims, types, x_i):
            return None
        n = _numel(dims[x_i])
        affine = [i for i in params if _is_tensor(dims, types, i) and dims[i]]
        flops = n * (3 if rms else 5) + n * min(len(affine), 1 if rms else 2)
        bpe = _bpe(types, x_i)
        param_bytes = sum(_tensor_bytes(dims, types, i) for i in affine)
        if backward:
            return OpCost(NORM_BWD, 2 * flops, 3 * n * bpe + 2 * param_bytes, _dtype(types, x_i))
        return OpCost(NORM_FWD, flops, 2 * n * bpe + param_bytes, _dtype(types, x_i))

    return cost


# -- elementwise and reductions ---------------------------------------------------------------------


def _elementwise(n_inputs: int | None):
    """The cost model of an elementwise op; ``n_inputs``: how many leading arguments are inputs (a tensor after
    them is an ``out=``), None: all."""

    def cost(dims, types, concrete) -> OpCost | None:
        last = len(dims) if n_inputs is None else min(n_inputs, len(dims))
        tensors = [i for i in range(last) if _is_tensor(dims, types, i)]
        if not tensors:
            return None
        out = _broadcast(*(dims[i] for i in tensors))
        # the output's dtype: that of the largest input (a 0-dim tensor does not promote a dimensioned one)
        widest = max(tensors, key=lambda i: (_numel(dims[i]) if dims[i] else 0, -i))
        nbytes = sum(_tensor_bytes(dims, types, i) for i in tensors) + _numel(out) * _bpe(types, widest)
        return OpCost(ELEMENTWISE, _numel(out), nbytes, _dtype(types, widest))

    return cost


def _copy(dims, types, concrete) -> OpCost | None:
    # copy_(self, src): reads src, writes self
    if not (_is_tensor(dims, types, 0) and _is_tensor(dims, types, 1)):
        return None
    nbytes = _tensor_bytes(dims, types, 0) + _tensor_bytes(dims, types, 1)
    return OpCost(ELEMENTWISE, _numel(dims[0]), nbytes, _dtype(types, 0))


def _reduce(per_element: int, dim_i: int | None, keep_i: int | None = None):
    def cost(dims, types, concrete) -> OpCost | None:
        if not _is_tensor(dims, types, 0):
            return None
        x = dims[0]
        n = _numel(x)
        bpe = _bpe(types, 0)
        if per_element > 1:  # softmax-like: the output is the input's shape
            return OpCost(REDUCE, per_element * n, 2 * n * bpe, _dtype(types, 0))
        reduced = _concrete(concrete, dim_i) if dim_i is not None else None
        if reduced is None or reduced == [] or not x:
            out = 1
        else:
            axes = {int(a) % len(x) for a in ([reduced] if isinstance(reduced, int) else reduced)}
            out = _numel([s for j, s in enumerate(x) if j not in axes])
        return OpCost(REDUCE, n, (n + out) * bpe, _dtype(types, 0))

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

_MODELS = {
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
    _MODELS[_name] = _convolution(_name)
for _names, _inputs in ((_UNARY, 1), (_BINARY, 2), (_TERNARY, 3)):
    for _name in _names:
        _MODELS[f"aten::{_name}"] = _elementwise(_inputs)


# -- TensorFlow kernels: dims = the inputs' shapes then the output's, types likewise -----------------------------


def _tf_last(dims, types):
    return dims[-1], (_bpe(types, len(dims) - 1) or _bpe(types, 0)), _dtype(types, 0)


def _tf_matmul(dims, types, concrete) -> OpCost | None:
    a, b = dims[0], dims[1]
    out, out_bpe, dtype = _tf_last(dims, types)
    if len(out) != 2 or len(a) != 2 or len(b) != 2 or not out[0]:
        return None
    m, n = out
    k = _numel(a) // m
    bias = _numel(dims[2]) if len(dims) > 3 and len(dims[2]) == 1 and dims[2][0] == n else 0
    return _gemm(1, m, n, k, bias, _bpe(types, 0), _bpe(types, 1), _bpe(types, 2), out_bpe, dtype)


def _tf_batch_matmul(dims, types, concrete) -> OpCost | None:
    a, b = dims[0], dims[1]
    out, out_bpe, dtype = _tf_last(dims, types)
    if len(out) < 2 or len(a) < 2 or not out[-2]:
        return None
    m, n = out[-2], out[-1]
    k = a[-1] * a[-2] // m
    batch = _numel(out[:-2])
    flops = batch * 2 * m * n * k
    nbytes = _numel(a) * _bpe(types, 0) + _numel(b) * _bpe(types, 1) + _numel(out) * out_bpe
    return OpCost(GEMM, flops, nbytes, dtype)


def _tf_conv(family: str, filter_i: int | None, grad_i: int):
    """The cost model of a TensorFlow convolution kernel; ``filter_i``: the input holding the filter (None: the
    output is the filter's gradient); ``grad_i``: the
    tensor whose elements each take ``kh*kw*C_in`` multiply-adds (the output, or the output's gradient)."""

    def cost(dims, types, concrete) -> OpCost | None:
        w = dims[filter_i] if filter_i is not None else dims[-1]
        big = dims[grad_i]
        if len(w) != 4 or len(big) != 4:
            return None
        flops = 2 * _numel(big) * w[0] * w[1] * w[2]
        if len(dims) > 3 and family == CONV_FWD and len(dims[2]) == 1:  # fused bias
            flops += _numel(big)
        nbytes = sum(_numel(d) * (_bpe(types, i) or _bpe(types, 0)) for i, d in enumerate(dims) if len(d) > 1)
        return OpCost(family, flops, nbytes, _dtype(types, 0))

    return cost


def _tf_block_lstm(backward: bool):
    def cost(dims, types, concrete) -> OpCost | None:
        # BlockLSTM(seq_len_max, x [T, B, I], cs_prev, h_prev, w [I+H, 4H], wci, wcf, wco, b)
        x, w = dims[1], dims[4]
        if len(x) != 3 or len(w) != 2:
            return None
        t, b, _ = x
        flops = t * 2 * b * w[0] * w[1] * (2 if backward else 1)
        nbytes = sum(_numel(d) * (_bpe(types, i) or _bpe(types, 1)) for i, d in enumerate(dims) if d)
        return OpCost(GEMM, flops, nbytes, _dtype(types, 1))

    return cost


def _tf_elementwise(dims, types, concrete) -> OpCost | None:
    out, out_bpe, dtype = _tf_last(dims, types)
    nbytes = sum(_numel(d) * _bpe(types, i) for i, d in enumerate(dims[:-1])) + _numel(out) * out_bpe
    return OpCost(ELEMENTWISE, _numel(out), nbytes, dtype)


def _tf_reduce(per_element: int):
    def cost(dims, types, concrete) -> OpCost | None:
        x = dims[0]
        out, out_bpe, dtype = _tf_last(dims, types)
        return OpCost(REDUCE, per_element * _numel(x), _numel(x) * _bpe(types, 0) + _numel(out) * out_bpe, dtype)

    return cost


_TF_MODELS = {}
for _name in ("MatMul", "_MklMatMul", "_FusedMatMul", "_MklFusedMatMul", "_MklNativeFusedMatMul"):
    _TF_MODELS[_name] = _tf_matmul
for _name in ("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "_MklBatchMatMul", "_MklBatchMatMulV2",
              "_MklBatchMatMulV3"):
    _TF_MODELS[_name] = _tf_batch_matmul
for _name in ("Conv2D", "_MklConv2D", "_MklNativeConv2D", "_FusedConv2D", "_MklNativeFusedConv2D",
              "_MklFusedConv2D"):
    _TF_MODELS[_name] = _tf_conv(CONV_FWD, 1, -1)
for _name in ("Conv2DBackpropInput", "_MklConv2DBackpropInput", "_MklNativeConv2DBackpropInput"):
    _TF_MODELS[_name] = _tf_conv(CONV_BWD, 1, 2)
for _name in ("Conv2DBackpropFilter", "_MklConv2DBackpropFilter", "_MklNativeConv2DBackpropFilter"):
    _TF_MODELS[_name] = _tf_conv(CONV_BWD, None, 2)
_TF_MODELS.update({"BlockLSTM": _tf_block_lstm(False), "BlockLSTMV2": _tf_block_lstm(False),
                   "BlockLSTMGrad": _tf_block_lstm(True), "BlockLSTMGradV2": _tf_block_lstm(True)})
for _name in ("Add", "AddV2", "_MklAdd", "_MklAddV2", "Sub", "Mul", "_MklMul", "RealDiv", "Maximum", "Minimum",
              "Tanh", "Sigmoid", "Relu", "_MklRelu", "Relu6", "Elu", "Exp", "Log", "Neg", "Square", "Sqrt", "Rsqrt",
              "Reciprocal", "TanhGrad", "SigmoidGrad", "ReluGrad", "_MklReluGrad", "BiasAdd", "AddN", "_MklAddN",
              "SquaredDifference", "Select", "SelectV2", "Cast", "ResourceApplyGradientDescent",
              "ResourceApplyMomentum", "ResourceApplyAdam"):
    _TF_MODELS[_name] = _tf_elementwise
for _name in ("Sum", "Mean", "Max", "Min", "Prod", "BiasAddGrad", "L2Loss"):
    _TF_MODELS[_name] = _tf_reduce(1)
for _name in ("Softmax", "LogSoftmax", "SparseSoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyWithLogits"):
    _TF_MODELS[_name] = _tf_reduce(5)


def tf_op_cost(op_type: str, dims, types) -> OpCost | None:
    """The FLOPs and bytes of TensorFlow kernel ``op_type`` whose inputs and output (last) have shapes ``dims``
    and dtypes ``types`` (the recorded names: ``float``, ``c10::BFloat16``...); None without a model or shapes."""
    model = _TF_MODELS.get(op_type)
    if model is None or not isinstance(dims, list) or len(dims) < 2 or not all(isinstance(d, list) for d in dims):
        return None
    return _modeled(model, dims, types if isinstance(types, list) else [], None)


MODELED = frozenset(_MODELS) | frozenset(_TF_MODELS)
_INPUT_SHAPE_ERRORS = (ValueError, TypeError, IndexError, ZeroDivisionError, OverflowError)


def op_cost(name: str, dims, types, concrete=None) -> OpCost | None:
    """The FLOPs and bytes of operator ``name`` with inputs of shapes ``dims`` and dtypes ``types``; None when
    the operator has no model here or its recorded shapes do not fit one."""
    model = _MODELS.get(name)
    if model is None and name in _TF_MODELS:
        return tf_op_cost(name, dims, types)
    if model is None or not isinstance(dims, list) or not isinstance(types, list):
        return None
    return _modeled(model, dims, types, concrete if isinstance(concrete, list) else None)


def _modeled(model, dims: list, types: list, concrete: list | None) -> OpCost | None:
    """``model``'s cost of these shapes; None where the shapes do not fit it or it gives a negative figure."""
    try:
        cost = model(dims, types, concrete)
    except _INPUT_SHAPE_ERRORS:
        return None
    if cost is None or cost.flops < 0 or cost.bytes < 0:
        return None
    return cost


def dtype_name(recorded: str) -> str:
    """The short name (fp32, bf16...) of a recorded dtype."""
    return DTYPE_NAMES.get(recorded, recorded.removeprefix("c10::"))
