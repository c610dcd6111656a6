"""Where the real traces used as test inputs live: ``tests/data`` (see its README for provenance).

Tests fail (not skip) when a trace is missing, so a checkout without them cannot pass by testing less.
"""

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "data"
FILES = ("tf1-timeline-gpu-matmul.json", "tf1-timeline-gpu-loop-step0.json", "tf1-timeline-cpu-loop-step0.json",
         "kineto-2rank-nccl-rank0.json.gz", "kineto-sampled-rank0.json.gz", "kineto-sampled-rank1.json.gz",
         "torch-gloo-rank0.json.gz", "torch-gloo-rank1.json.gz")

_missing = [name for name in FILES if not (FIXTURES / name).is_file()]
if _missing:
    raise RuntimeError(f"real trace fixtures missing from {FIXTURES}: {', '.join(_missing)}")
