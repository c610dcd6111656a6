"""FLOPs and bytes of one operator from its recorded shapes: PyTorch ``cpu_op``s and TensorFlow kernels.

``op_cost(name, dims, types, concrete)`` takes a ``cpu_op``'s ``Input Dims``, ``Input type`` and ``Concrete
Inputs`` and gives an ``OpCost`` (family, FLOPs, bytes moved, the dtype it computes in), or None for an
operator with no model here or whose shapes do not fit it. ``tf_op_cost`` does the same for a TensorFlow op
type from the shapes of the executed kernel's inputs and output, as a run's step stats record them.

A FLOP is one multiply or one add; bytes are what an ideal kernel reads and writes once. The models (GEMM,
convolution and its backward, attention, normalization, elementwise, reductions; TensorFlow's ``MatMul``,
``Conv2D``, ``BlockLSTM``...) are tabled in docs/commands/roofline.md; they are ``aten``'s and
``tf_kernels``', on ``base``.
"""

from __future__ import annotations

from rnnprof.analyzers.flops.aten import ATEN_MODELS
from rnnprof.analyzers.flops.base import (CONV_BWD, CONV_FWD, DTYPE_BYTES, DTYPE_NAMES, ELEMENTWISE, FAMILIES, GEMM,
                                          MATRIX_FAMILIES, NORM_BWD, NORM_FWD, REDUCE, SDPA_BWD, SDPA_FWD, OpCost)
from rnnprof.analyzers.flops.tf_kernels import TF_MODELS

__all__ = ["op_cost", "tf_op_cost", "dtype_name", "MODELED", "OpCost", "FAMILIES", "MATRIX_FAMILIES", "DTYPE_BYTES",
           "DTYPE_NAMES", "GEMM", "CONV_FWD", "CONV_BWD", "SDPA_FWD", "SDPA_BWD", "NORM_FWD", "NORM_BWD", "ELEMENTWISE",
           "REDUCE"]


def tf_op_cost(op_type: str, dims, types) -> OpCost | None:
    """The FLOPs and bytes of TensorFlow kernel ``op_type`` whose inputs and output (last) have shapes ``dims``
    and dtypes ``types`` (the recorded names: ``float``, ``c10::BFloat16``...); None without a model or shapes."""
    model = TF_MODELS.get(op_type)
    if model is None or not isinstance(dims, list) or len(dims) < 2 or not all(isinstance(d, list) for d in dims):
        return None
    return _modeled(model, dims, types if isinstance(types, list) else [], None)


MODELED = frozenset(ATEN_MODELS) | frozenset(TF_MODELS)
_INPUT_SHAPE_ERRORS = (ValueError, TypeError, IndexError, ZeroDivisionError, OverflowError)


def op_cost(name: str, dims, types, concrete=None) -> OpCost | None:
    """The FLOPs and bytes of operator ``name`` with inputs of shapes ``dims`` and dtypes ``types``; None when
    the operator has no model here or its recorded shapes do not fit one."""
    model = ATEN_MODELS.get(name)
    if model is None and name in TF_MODELS:
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
