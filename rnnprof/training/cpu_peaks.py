"""The CPU's peaks measured on this machine, for the roofline of CPU runs: a short numpy FP32 matmul (FLOP/s)
and a large array copy (bytes/s), best of a few repeats, once per process."""

from __future__ import annotations

import functools
import socket
import time

import numpy as np

from rnnprof.analyzers.peaks import Peaks

MEASURED = "measured"


def _best(fn, repeats: int) -> float:
    fn()  # warm-up: threads started, pages touched
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@functools.lru_cache(maxsize=1)
def measure_cpu_peaks(n: int = 1024, copy_mb: int = 64, repeats: int = 5) -> Peaks:
    """FP32 peak: ``2*n^3`` FLOPs of an ``n x n`` matmul (numpy's BLAS, every core it uses) over its best time;
    memory bandwidth: a ``copy_mb`` MB copy (read + write) over its best time."""
    rng = np.random.default_rng(0)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    out = np.empty((n, n), dtype=np.float32)
    flops = 2.0 * n ** 3 / _best(lambda: np.matmul(a, b, out=out), repeats)
    src = np.ones(copy_mb * (1 << 20) // 8, dtype=np.float64)
    dst = np.empty_like(src)
    bandwidth = 2.0 * src.nbytes / _best(lambda: np.copyto(dst, src), repeats)
    tflops = flops / 1e12
    return Peaks(f"CPU of {socket.gethostname()}", {"fp32": tflops}, tflops, bandwidth / 1e12, MEASURED)


def this_host() -> str:
    return socket.gethostname()


__all__ = ["measure_cpu_peaks", "this_host", "MEASURED"]
