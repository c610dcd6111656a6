"""The cost models of TensorFlow kernels (``TF_MODELS``, by op type, oneDNN's ``_Mkl*`` names too): ``dims`` are
the inputs' shapes then the output's, ``types`` likewise, as a run's step stats record them."""

from __future__ import annotations

from rnnprof.analyzers.flops.base import (CONV_BWD, CONV_FWD, ELEMENTWISE, GEMM, REDUCE, OpCost, bpe_of,
                                          dtype_of, gemm, numel)


def _tf_last(dims, types):
    return dims[-1], (bpe_of(types, len(dims) - 1) or bpe_of(types, 0)), dtype_of(types, 0)


def _tf_matmul(dims, types, concrete) -> OpCost | None:
    a, b = dims[0], dims[1]
    out, out_bpe, dtype = _tf_last(dims, types)
    if len(out) != 2 or len(a) != 2 or len(b) != 2 or not out[0]:
        return None
    m, n = out
    k = numel(a) // m
    bias = numel(dims[2]) if len(dims) > 3 and len(dims[2]) == 1 and dims[2][0] == n else 0
    return gemm(1, m, n, k, bias, bpe_of(types, 0), bpe_of(types, 1), bpe_of(types, 2), out_bpe, dtype)


def _tf_batch_matmul(dims, types, concrete) -> OpCost | None:
    a, b = dims[0], dims[1]
    out, out_bpe, dtype = _tf_last(dims, types)
    if len(out) < 2 or len(a) < 2 or not out[-2]:
        return None
    m, n = out[-2], out[-1]
    k = a[-1] * a[-2] // m
    batch = numel(out[:-2])
    flops = batch * 2 * m * n * k
    nbytes = numel(a) * bpe_of(types, 0) + numel(b) * bpe_of(types, 1) + numel(out) * out_bpe
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
        flops = 2 * numel(big) * w[0] * w[1] * w[2]
        if len(dims) > 3 and family == CONV_FWD and len(dims[2]) == 1:  # fused bias
            flops += numel(big)
        nbytes = sum(numel(d) * (bpe_of(types, i) or bpe_of(types, 0)) for i, d in enumerate(dims) if len(d) > 1)
        return OpCost(family, flops, nbytes, dtype_of(types, 0))

    return cost


def _tf_block_lstm(backward: bool):
    def cost(dims, types, concrete) -> OpCost | None:
        # BlockLSTM(seq_len_max, x [T, B, I], cs_prev, h_prev, w [I+H, 4H], wci, wcf, wco, b)
        x, w = dims[1], dims[4]
        if len(x) != 3 or len(w) != 2:
            return None
        t, b, _ = x
        flops = t * 2 * b * w[0] * w[1] * (2 if backward else 1)
        nbytes = sum(numel(d) * (bpe_of(types, i) or bpe_of(types, 1)) for i, d in enumerate(dims) if d)
        return OpCost(GEMM, flops, nbytes, dtype_of(types, 1))

    return cost


def _tf_elementwise(dims, types, concrete) -> OpCost | None:
    out, out_bpe, dtype = _tf_last(dims, types)
    nbytes = sum(numel(d) * bpe_of(types, i) for i, d in enumerate(dims[:-1])) + numel(out) * out_bpe
    return OpCost(ELEMENTWISE, numel(out), nbytes, dtype)


def _tf_reduce(per_element: int):
    def cost(dims, types, concrete) -> OpCost | None:
        x = dims[0]
        out, out_bpe, dtype = _tf_last(dims, types)
        return OpCost(REDUCE, per_element * numel(x), numel(x) * bpe_of(types, 0) + numel(out) * out_bpe, dtype)

    return cost


TF_MODELS = {}
for _name in ("MatMul", "_MklMatMul", "_FusedMatMul", "_MklFusedMatMul", "_MklNativeFusedMatMul"):
    TF_MODELS[_name] = _tf_matmul
for _name in ("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "_MklBatchMatMul", "_MklBatchMatMulV2",
              "_MklBatchMatMulV3"):
    TF_MODELS[_name] = _tf_batch_matmul
for _name in ("Conv2D", "_MklConv2D", "_MklNativeConv2D", "_FusedConv2D", "_MklNativeFusedConv2D",
              "_MklFusedConv2D"):
    TF_MODELS[_name] = _tf_conv(CONV_FWD, 1, -1)
for _name in ("Conv2DBackpropInput", "_MklConv2DBackpropInput", "_MklNativeConv2DBackpropInput"):
    TF_MODELS[_name] = _tf_conv(CONV_BWD, 1, 2)
for _name in ("Conv2DBackpropFilter", "_MklConv2DBackpropFilter", "_MklNativeConv2DBackpropFilter"):
    TF_MODELS[_name] = _tf_conv(CONV_BWD, None, 2)
TF_MODELS.update({"BlockLSTM": _tf_block_lstm(False), "BlockLSTMV2": _tf_block_lstm(False),
                   "BlockLSTMGrad": _tf_block_lstm(True), "BlockLSTMGradV2": _tf_block_lstm(True)})
for _name in ("Add", "AddV2", "_MklAdd", "_MklAddV2", "Sub", "Mul", "_MklMul", "RealDiv", "Maximum", "Minimum",
              "Tanh", "Sigmoid", "Relu", "_MklRelu", "Relu6", "Elu", "Exp", "Log", "Neg", "Square", "Sqrt", "Rsqrt",
              "Reciprocal", "TanhGrad", "SigmoidGrad", "ReluGrad", "_MklReluGrad", "BiasAdd", "AddN", "_MklAddN",
              "SquaredDifference", "Select", "SelectV2", "Cast", "ResourceApplyGradientDescent",
              "ResourceApplyMomentum", "ResourceApplyAdam"):
    TF_MODELS[_name] = _tf_elementwise
for _name in ("Sum", "Mean", "Max", "Min", "Prod", "BiasAddGrad", "L2Loss"):
    TF_MODELS[_name] = _tf_reduce(1)
for _name in ("Softmax", "LogSoftmax", "SparseSoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyWithLogits"):
    TF_MODELS[_name] = _tf_reduce(5)

