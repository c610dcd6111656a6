"""rnnprof trace leaves TensorFlow's runtime to the script: a script may set its threads and logical
devices before its first op, as it can without rnnprof, and its work is still captured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rnnprof import rundir
from rnnprof.traces import load_events

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")

# A script that sets its thread pools and its logical devices before its first op (each fails once the runtime
# is up), then trains with MirroredStrategy over the two logical CPUs.
SCRIPT = """
import tensorflow as tf
tf.config.threading.set_inter_op_parallelism_threads(2)
tf.config.threading.set_intra_op_parallelism_threads(1)
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    w = tf.Variable(tf.random.normal([16, 16], seed=1))
@tf.function
def train_step(x):
    def replica(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.tanh(tf.matmul(x, w)) ** 2)
        g = tf.distribute.get_replica_context().all_reduce("sum", tape.gradient(loss, w))
        w.assign_sub(0.01 * g)
        return loss
    return strategy.run(replica, args=(x,))
for _ in range(4):
    train_step(tf.ones([8, 16]))
assert tf.config.threading.get_inter_op_parallelism_threads() == 2
assert tf.config.threading.get_intra_op_parallelism_threads() == 1
assert len(tf.config.list_logical_devices("CPU")) == 2
"""


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> Path:
    """The script traced once for the module."""
    return _trace(tmp_path_factory.mktemp("runtime"), SCRIPT)


def _trace(tmp_path: Path, text: str) -> Path:
    script = tmp_path / "train.py"
    script.write_text(text)
    out = tmp_path / "run"
    result = subprocess.run([sys.executable, "-m", "rnnprof", "trace", "--out", str(out), "--",
                             sys.executable, str(script)], capture_output=True, text=True, env=ENV, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    manifest = json.loads((out / rundir.MANIFEST).read_text())
    assert manifest["status"] == "complete"
    assert manifest["profiled_steps"]
    return out


def _partition_nodes(run: Path) -> dict[str, set[str]]:
    """Op names by the device TensorFlow placed them on, from the function partition graphs it wrote."""
    from tensorflow.core.framework import graph_pb2

    by_device: dict[str, set[str]] = {}
    for path in (run / rundir.GRAPHS_DIR / rundir.FUNCTIONS_DIR).glob("*/partitions/*.pb"):
        for node in graph_pb2.GraphDef.FromString(path.read_bytes()).node:
            by_device.setdefault(node.device.rsplit("/", 1)[-1], set()).add(node.name)
    return by_device


@pytest.mark.slow
def test_a_script_that_sets_its_thread_pools_runs_and_is_captured(traced):
    table = load_events(traced)
    ops = {table.strings[code] for code in table.op_type}
    assert {"MatMul", "Tanh", "TanhGrad"} <= ops


@pytest.mark.slow
def test_a_mirrored_strategy_over_two_logical_cpus_is_captured_on_both(traced):
    placed = _partition_nodes(traced)
    assert {"device:CPU:0", "device:CPU:1"} <= set(placed)
    table = load_events(traced)
    names = {table.strings[code] for code in table.name}
    for device in ("device:CPU:0", "device:CPU:1"):
        matmuls = {n for n in placed[device] if n.split("/")[-1] == "MatMul"}
        assert matmuls & names, (device, sorted(matmuls))
