"""The critical path's categories against HTA's own critical-path output (HTA 0.5.0, holistictraceanalysis) on
the trace it was computed for: kineto-simple-add-hta-critical-path.json.gz is kineto-simple-add.json.gz with
HTA's path overlaid (``critical: 1`` on the path's events; see tests/data/README.md). The figures on HTA's side
are read here from that file, not computed by rnnprof.

Where both define a category: HTA's ``cpu_bound`` (its path's CPU operators and runtime calls) is rnnprof's
``host`` (the path's operators and runtime calls on host threads); HTA's ``gpu_compute_bound`` is rnnprof's
``compute`` + ``copy``. HTA splits a blocking runtime call (cudaMemcpy, cudaStreamSynchronize) at the GPU work it
waits for and puts that work on its path; rnnprof keeps the call whole as the thread's time (``host``), so the
union of HTA's path events (CPU and GPU) is what rnnprof books as ``host``. The time HTA's path spends between
operators, in no event, is rnnprof's ``untraced``.
"""

from __future__ import annotations

import gzip
import json

import pytest

from fixtures import FIXTURES
from rnnprof.analyzers.critical_path import analyze_critical_path
from rnnprof.traces import load_events

CPU = ("cpu_op", "cuda_runtime")
GPU = ("kernel", "gpu_memcpy", "gpu_memset")


def _union(intervals) -> float:
    total, reach = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


@pytest.fixture(scope="module")
def both():
    with gzip.open(FIXTURES / "kineto-simple-add-hta-critical-path.json.gz", "rt") as f:
        raw = json.load(f)["traceEvents"]
    hta = [e for e in raw if e.get("ph") == "X" and (e.get("args") or {}).get("critical") == 1]
    (step,) = analyze_critical_path(load_events(str(FIXTURES / "kineto-simple-add.json.gz")), what_if_ops=0).steps
    return hta, step


def test_host_time_on_the_path_is_htas_cpu_bound_time_with_the_gpu_work_its_blocking_calls_wait_for(both):
    hta, step = both
    cpu = [(e["ts"], e["ts"] + e["dur"]) for e in hta if e["cat"] in CPU]
    gpu = [(e["ts"], e["ts"] + e["dur"]) for e in hta if e["cat"] in GPU]
    span = max(b for _, b in cpu + gpu) - min(a for a, _ in cpu + gpu)
    assert step.by_class["host"] == pytest.approx(_union(cpu + gpu), rel=1e-3)
    # shares of the path by category, where both define them, within 0.1 percentage points
    ours = {k: v / step.length_us for k, v in step.by_class.items()}
    assert 100 * ours["host"] == pytest.approx(100 * _union(cpu) / span, abs=0.1)
    gpu_share = ours.get("compute", 0.0) + ours.get("copy", 0.0)
    assert 100 * gpu_share == pytest.approx(100 * _union(gpu) / span, abs=0.1)
    # what HTA's path spends between its operators is rnnprof's untraced host time
    assert step.by_class["untraced"] == pytest.approx(span - _union(cpu + gpu), rel=0.02)


def test_most_of_the_paths_events_are_on_htas_path(both):
    hta, step = both
    on_hta = {(round(e["ts"]), e["name"]) for e in hta}
    events = [(round(link.ts_us), link.name) for link in step.links if link.event >= 0]
    assert events and sum(e in on_hta for e in events) >= 0.8 * len(events)
