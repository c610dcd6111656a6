"""What the FLOP models share: the families, the dtypes' sizes and short names, ``OpCost``, and reading a
recorded argument (its shape, bytes per element, dtype, concrete value); a GEMM's cost."""

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


def numel(shape) -> int:
    return math.prod(int(d) for d in shape) if shape else 1


def is_tensor(dims, types, i: int) -> bool:
    """Argument ``i`` is a tensor: it has a recorded dtype that is a tensor type (not Scalar, ScalarList...)."""
    return i < len(types) and types[i] in DTYPE_BYTES and i < len(dims) and isinstance(dims[i], list)


def bpe_of(types, i: int, default: int = 0) -> int:
    return DTYPE_BYTES.get(types[i], default) if i < len(types) else default


def tensor_bytes(dims, types, i: int) -> int:
    return numel(dims[i]) * bpe_of(types, i) if is_tensor(dims, types, i) else 0


def dtype_of(types, i: int) -> str:
    return DTYPE_NAMES.get(types[i], types[i]) if i < len(types) else ""


def concrete_value(concrete, i: int):
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


def broadcast(*shapes) -> list[int]:
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(ndim):
        sizes = [s[len(s) - ndim + k] for s in shapes if len(s) - ndim + k >= 0]
        big = [x for x in sizes if x != 1]
        out.append(max(big) if big else 1)
    return out



def gemm(batch: int, m: int, n: int, k: int, bias_elems: int, bpe_a: int, bpe_b: int, bpe_bias: int,
          bpe_out: int, dtype: str) -> OpCost:
    flops = batch * (2 * m * n * k + (m * n if bias_elems else 0))
    nbytes = batch * (m * k * bpe_a + k * n * bpe_b + m * n * bpe_out) + bias_elems * bpe_bias
    return OpCost(GEMM, flops, nbytes, dtype)

