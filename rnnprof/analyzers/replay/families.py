"""Which operators make up a kernel family (``flops.FAMILIES``, the names roofline reports): the operators the
FLOP models know (``flops.MODELED``), each under the family its model gives."""

from __future__ import annotations

import re

from rnnprof.analyzers.flops import (CONV_BWD, CONV_FWD, ELEMENTWISE, FAMILIES, GEMM, MODELED, NORM_BWD, NORM_FWD,
                                     REDUCE, SDPA_BWD, SDPA_FWD)

# in this order: the first pattern that matches a modeled operator's name gives its family
_PATTERNS = (
    (REDUCE, r"^(aten::(norm|linalg_vector_norm|_softmax_backward_data)|Sum|Mean|Max|Min|Prod|BiasAddGrad|L2Loss|"
             r"Softmax|LogSoftmax|SparseSoftmaxCrossEntropyWithLogits|SoftmaxCrossEntropyWithLogits)$"),
    (SDPA_BWD, r"(attention|attn).*backward"), (SDPA_FWD, r"attention|attn"),
    (CONV_BWD, r"conv.*(backward|backprop)"), (CONV_FWD, r"conv"),
    (NORM_BWD, r"norm.*backward"), (NORM_FWD, r"norm"),
    (GEMM, r"mm\b|matmul|linear|MatMul|BlockLSTM"),
    (REDUCE, r"::(sum|mean|amax|amin|max|min|prod|norm|var|std|softmax|_softmax|log_softmax|_log_softmax)\b"),
)


def family_of(name: str) -> str | None:
    """The family of a modeled operator's name; None for an operator no FLOP model knows."""
    if name not in MODELED:
        return None
    for family, pattern in _PATTERNS:
        if re.search(pattern, name, flags=0 if family in (GEMM, REDUCE) else re.IGNORECASE):
            return family
    return ELEMENTWISE


def family_named(text: str) -> str | None:
    """The family a user named (any case: ``gemm``, ``conv_fwd``), or None."""
    for family in FAMILIES:
        if family.lower() == text.lower():
            return family
    return None


def family_members(family: str) -> frozenset[str]:
    """The operator names of ``family``."""
    return frozenset(name for name in MODELED if family_of(name) == family)
