"""Device peaks for the roofline: dense FLOP/s per dtype and memory bandwidth, by the device's name.

The figures are the vendors' datasheet peaks without sparsity, in TFLOP/s and TB/s (10^12). ``matrix`` peaks are
the tensor-core/matrix-core rates a GEMM, convolution or attention reaches in that dtype; ``vector`` is the FP32
rate of the ordinary cores, which elementwise ops, reductions and normalization use. An FP32 GEMM is
compared with the FP32 (not TF32) peak: PyTorch computes FP32 matmuls in full FP32 unless told otherwise.

Names are matched against ``deviceProperties[].name`` of a Kineto trace (``NVIDIA H100 80GB HBM3``,
``AMD Instinct MI300X``...), first pattern first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Peaks:
    device: str  # the name the figures are for (the table's entry, or "given" for flags)
    matrix_tflops: dict[str, float] = field(default_factory=dict)  # dtype short name -> TFLOP/s
    vector_tflops: float = 0.0  # FP32, ordinary cores
    tbps: float = 0.0  # memory bandwidth
    source: str = "table"  # "table", "measured" (a CPU, on this machine), "flags", "table+flags", "measured+flags"

    def tflops(self, dtype: str, matrix: bool) -> float | None:
        """The peak for work of ``dtype`` on matrix units (``matrix``) or vector units; None when unknown."""
        if matrix:
            value = self.matrix_tflops.get(dtype)
            if value is None and dtype == "fp32":
                value = self.vector_tflops or None
            return value
        if dtype in ("fp16", "bf16") and "vector_" + dtype in self.matrix_tflops:
            return self.matrix_tflops["vector_" + dtype]
        return self.vector_tflops or None


def _p(name, tbps, vector, **matrix) -> Peaks:
    return Peaks(name, {k: float(v) for k, v in matrix.items()}, float(vector), float(tbps))


# (pattern, peaks): most specific first.
TABLE: tuple[tuple[str, Peaks], ...] = (
    (r"GB200|B200", _p("NVIDIA B200", 8.0, 80, bf16=2250, fp16=2250, fp8=4500, fp4=9000, tf32=1100, fp64=40)),
    (r"H200", _p("NVIDIA H200 SXM", 4.8, 67, bf16=989.4, fp16=989.4, fp8=1978.9, tf32=494.7, fp64=66.9)),
    (r"H100.*NVL", _p("NVIDIA H100 NVL", 3.9, 60, bf16=835, fp16=835, fp8=1671, tf32=418, fp64=60)),
    (r"H100.*PCIe", _p("NVIDIA H100 PCIe", 2.0, 51, bf16=756, fp16=756, fp8=1513, tf32=378, fp64=51)),
    (r"H100|H800|GH200", _p("NVIDIA H100 SXM", 3.35, 67, bf16=989.4, fp16=989.4, fp8=1978.9, tf32=494.7,
                            fp64=66.9)),
    (r"A100.*80GB.*PCIe|A100.*PCIE.*80GB", _p("NVIDIA A100 80GB PCIe", 1.935, 19.5, bf16=312, fp16=312, tf32=156,
                                             fp64=19.5)),
    (r"A100.*80GB", _p("NVIDIA A100 SXM 80GB", 2.039, 19.5, bf16=312, fp16=312, tf32=156, fp64=19.5)),
    (r"A100|A800", _p("NVIDIA A100 40GB", 1.555, 19.5, bf16=312, fp16=312, tf32=156, fp64=19.5)),
    (r"L40S", _p("NVIDIA L40S", 0.864, 91.6, bf16=362, fp16=362, fp8=733, tf32=183)),
    (r"\bL4\b", _p("NVIDIA L4", 0.3, 30.3, bf16=121, fp16=121, fp8=242.5, tf32=60)),
    (r"A10G", _p("NVIDIA A10G", 0.6, 31.2, bf16=70, fp16=70, tf32=35)),
    (r"\bA10\b", _p("NVIDIA A10", 0.6, 31.2, bf16=125, fp16=125, tf32=62.5)),
    (r"V100.*PCIE|V100.*PCIe", _p("NVIDIA V100 PCIe", 0.9, 14, fp16=112, fp64=7)),
    (r"V100", _p("NVIDIA V100 SXM2", 0.9, 15.7, fp16=125, fp64=7.8)),
    (r"\bT4\b", _p("NVIDIA T4", 0.32, 8.1, fp16=65)),
    (r"MI325", _p("AMD Instinct MI325X", 6.0, 163.4, bf16=1307.4, fp16=1307.4, fp8=2614.9, fp32=163.4, fp64=163.4)),
    (r"MI300X|MI300", _p("AMD Instinct MI300X", 5.3, 163.4, bf16=1307.4, fp16=1307.4, fp8=2614.9, fp32=163.4,
                         fp64=163.4)),
    (r"MI250X", _p("AMD Instinct MI250X", 3.2768, 47.9, bf16=383, fp16=383, fp32=95.7, fp64=95.7)),
    (r"MI250|MI200|gfx90a", _p("AMD Instinct MI250", 3.2768, 45.3, bf16=362.1, fp16=362.1, fp32=90.5, fp64=90.5)),
    (r"MI210", _p("AMD Instinct MI210", 1.6384, 22.6, bf16=181, fp16=181, fp32=45.3, fp64=45.3)),
    (r"MI100", _p("AMD Instinct MI100", 1.2288, 23.1, bf16=92.3, fp16=184.6, fp32=46.1)),
)
_PATTERNS = tuple((re.compile(p, re.IGNORECASE), peaks) for p, peaks in TABLE)


def lookup(device_name: str) -> Peaks | None:
    """The peaks of the device called ``device_name``; None when the table has no entry for it."""
    for pattern, peaks in _PATTERNS:
        if pattern.search(device_name or ""):
            return peaks
    return None


def override(peaks: Peaks | None, tflops: float | None, tbps: float | None) -> Peaks | None:
    """``peaks`` with the flags' figures in place: ``tflops`` becomes every dtype's peak (matrix and vector)."""
    if tflops is None and tbps is None:
        return peaks
    base = peaks or Peaks("given", source="flags")
    matrix = dict(base.matrix_tflops)
    vector = base.vector_tflops
    if tflops is not None:
        matrix = {k: float(tflops) for k in sorted(set(matrix) | {"fp32", "fp16", "bf16", "fp8", "tf32", "fp64"})}
        vector = float(tflops)
    return Peaks(base.device, matrix, vector, float(tbps) if tbps is not None else base.tbps,
                 "flags" if peaks is None else f"{base.source}+flags")
