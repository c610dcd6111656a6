"""Loop NMT against fused NMT (2 layers, bi encoder, 2 devices), captured by ``rnnprof trace`` and stored in
tests/data (tf-run-nmt-loop-fused, conftest's ``NMT_LOOP_FUSED``), counted through the CLI."""

import collections
import gzip
import json
import subprocess
import sys

import pytest

from fixtures import FIXTURES

pytestmark = pytest.mark.slow


def _rnnprof(*args):
    return subprocess.run([sys.executable, "-m", "rnnprof", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def runs():
    return FIXTURES / "tf-run-nmt-loop-fused"


def _executed_ops_per_device(run_dir):
    """Count op executions per device straight from the captured Chrome traces."""
    counts = collections.Counter()
    for path in sorted((run_dir / "timelines").glob("*.trace.json.gz")):
        events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        process = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
        counts.update(process[e["pid"]].rsplit("/device:", 1)[1].lower() for e in events if e.get("ph") == "X")
    return counts


def test_loop_nmt_has_far_more_graph_ops_and_kernel_launches_than_fused(runs):
    done = _rnnprof("count-ops", str(runs / "loop"), "--vs", str(runs / "fused"), "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    ratios = {r["metric"]: r["ratio"] for r in doc["ratios"]}
    assert ratios["runtime graph ops (all)"] >= 5
    assert ratios["kernel launches per step (CPU + GPU kernels)"] >= 10

    for side, encoder in (("left", "loop"), ("right", "fused")):
        kernels = doc[side]["kernels"]
        expected = _executed_ops_per_device(runs / encoder)
        assert {d["device"]: d["cpu_kernels"] for d in kernels["devices"]} == dict(expected)
        assert set(expected) == {"cpu:0", "cpu:1"}
        assert all(d["gpu_kernels"] == 0 for d in kernels["devices"])
        runtime_devices = doc[side]["runtime_graph"]["by_device"]
        assert len([d for d, n in runtime_devices.items() if n > 0]) >= 2
