"""Where the real traces used as test inputs live: ``tests/data`` (see its README for provenance).

Tests fail (not skip) when a trace is missing, so a checkout without them cannot pass by testing less.
"""

import copy
import gzip
import json
import os
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "data"
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"  # the benchmark scripts some tests import or run


def importable_benchmarks() -> Path:
    """Put ``BENCHMARKS`` on ``sys.path`` (once) so that a test can import the benchmark scripts (``diagnosis``,
    ``_lockstep``, ...); returns the folder."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return BENCHMARKS

# benchmarks/gpu_checks.py's second H200 run: its base run and the runs really changed (h200-whatif-clocks.json)
H200_RUNS = ("base", "fewer-matmuls", "no-copies", "no-htod", "host-sleep")
FILES = ("tf1-timeline-gpu-matmul.json", "tf1-timeline-gpu-loop-step0.json", "tf1-timeline-cpu-loop-step0.json",
         "kineto-2rank-nccl-rank0.json.gz", "kineto-sampled-rank0.json.gz", "kineto-sampled-rank1.json.gz",
         "torch-gloo-rank0.json.gz", "torch-gloo-rank1.json.gz",
         "torch-gloo-balanced-rank0.json.gz", "torch-gloo-balanced-rank1.json.gz",
         "kineto-1gpu-v100.json.gz", "kineto-8rank-rank3-a100.json.gz", "kineto-2rank-rank1-v100-cudagraph.json.gz",
         "kineto-16rank-rank0-a100-cudagraph.json.gz", "kineto-event-sync.json.gz", "kineto-event-sync-multistream.json.gz",
         "kineto-simple-add.json.gz", "kineto-simple-add-hta-critical-path.json.gz", "kineto-mi250-rocm.json.gz",
         "kineto-b200-8rank-rank0.json.gz", "kineto-mi300x-8rank-ddp-rank0.json.gz", "kineto-mi300x-hipgraph.json.gz",
         "kineto-h200-gpu-checks.json.gz", *(f"kineto-h200-whatif-{run}.json.gz" for run in H200_RUNS),
         "kineto-h200-launch-eager.json.gz", "kineto-h200-launch-graph.json.gz",
         "torch-nccl-pp-collectives-rank0.json.gz")

# Every real Kineto trace in this folder: the invariant and HTA-parity tests run over all of them.
KINETO = tuple(name for name in FILES if name.startswith(("kineto-", "torch-")))
# The two ranks of each CPU (gloo) job among them, read together where ranks are compared
GLOO_PAIRS = (("torch-gloo-rank0.json.gz", "torch-gloo-rank1.json.gz"),
              ("torch-gloo-balanced-rank0.json.gz", "torch-gloo-balanced-rank1.json.gz"))

# 2-rank gloo run directories of the Transformer LM under --parallel (make_torch_parallel_traces.py): the
# manifest and torch/rank{0,1}.json.gz of each
PARALLEL_RUNS = ("torch-gloo-fsdp", "torch-gloo-tp", "torch-gloo-pp")

# A small NMT run on 2 logical devices: 2 warm-up and 3 timed batches, then 2 traced and 2 profiled steps
# (``tiny_nmt_run`` in conftest captures it once for the session).
TINY_NMT = ["--model", "nmt", "--devices", "2", "--units", "16", "--layers", "1", "--src-max-len", "6",
            "--tgt-max-len", "6", "--vocab-size", "100", "--batch-size", "4", "--warmup", "2", "--batches", "3",
            "--trace-steps", "2"]

_missing = [name for name in FILES if not (FIXTURES / name).is_file()]
_missing += [f"{run}/{part}" for run in PARALLEL_RUNS for part in ("manifest.json", "torch/rank0.json.gz",
                                                                   "torch/rank1.json.gz")
             if not (FIXTURES / run / part).is_file()]
if _missing:
    raise RuntimeError(f"real trace fixtures missing from {FIXTURES}: {', '.join(_missing)}")


def nccl_rank(folder: Path, rank: int, kernels, world: int = 2) -> Path:
    """A ``world``-rank job's GPU rank file of NCCL kernels ``(group, seq, stream, ts, dur)`` that carry newer
    Kineto's ``Process Group Name`` and ``Seq``; kernel n has correlation id 100 + n."""
    events = [{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgs)",
               "pid": 0, "tid": stream, "ts": ts, "dur": dur,
               "args": {"device": rank, "stream": stream, "correlation": 100 + n, "Process Group Name": group,
                        "Seq": seq}}
              for n, (group, seq, stream, ts, dur) in enumerate(kernels)]
    path = folder / f"rank{rank}.json"
    path.write_text(json.dumps({"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank,
                                                                         "world_size": world},
                                "traceEvents": events}))
    return path


def with_header(path: Path, target: Path, drop: tuple[str, ...] = (), **keys) -> Path:
    """A copy of the gzipped Kineto file ``path`` at ``target`` whose document has ``keys`` set and ``drop`` removed
    (its events as they were)."""
    document = json.loads(gzip.decompress(path.read_bytes()))
    for key in drop:
        del document[key]
    document.update(keys)
    target.write_bytes(gzip.compress(json.dumps(document).encode()))
    return target


def decode_each_trace_once(kineto) -> None:
    """``kineto.load`` of a trace in this folder decodes it once per process, then hands out copies of that table.

    Dozens of tests read the same committed traces (the invariants and oracles run over all of them); the tables
    are the loader's own, made by its first call. Not kept: a trace read with other block or piece sizes (the
    loader's own tests), or while an ``RNNPROF_`` setting may limit the read.
    """
    load, decoded = kineto.load, {}

    def load_once(path, block_bytes=None, piece_bytes=None):
        where = Path(path).resolve()
        if (block_bytes or piece_bytes or where.parent != FIXTURES
                or any(key.startswith("RNNPROF_") for key in os.environ)):
            return load(path, block_bytes, piece_bytes)
        if (where, str(path)) not in decoded:  # the table names the path as it was given
            decoded[where, str(path)] = load(path)
        return copy.deepcopy(decoded[where, str(path)])

    kineto.load = load_once
