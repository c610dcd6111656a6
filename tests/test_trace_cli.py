"""rnnprof trace end to end: the built-in NMT on two devices, user scripts, the API, attach."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rnnprof.cli import main
from rnnprof import rundir
from rnnprof.traces import load_events

from fixtures import TINY_NMT

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def _manifest(run: Path) -> dict:
    return json.loads((run / rundir.MANIFEST).read_text())


def _xprof_trace(xplane: Path, tmp_path: Path) -> dict:
    from xprof.convert import raw_to_tool_data

    copy_dir = tmp_path / "xprof" / xplane.parent.name
    copy_dir.mkdir(parents=True, exist_ok=True)
    data, _ = raw_to_tool_data.xspace_to_tool_data([shutil.copy(xplane, copy_dir)], "trace_viewer", {})
    return json.loads(data)


def _trace_script(out: Path, script: Path, *flags: str, script_args=(), env=ENV):
    """``rnnprof trace --out OUT FLAGS -- python SCRIPT ARGS`` in a child process."""
    return subprocess.run([sys.executable, "-m", "rnnprof", "trace", "--out", str(out), *flags, "--",
                           sys.executable, str(script), *script_args],
                          capture_output=True, text=True, env=env, timeout=120)


def test_existing_out_is_refused_without_force_and_left_unchanged(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("user data")
    code = main(["trace", *TINY_NMT, "--out", str(out)])
    assert code == 2
    assert "--force" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert (out / "keep.txt").read_text() == "user data"


def test_script_command_must_be_python(tmp_path, capsys):
    code = main(["trace", "--out", str(tmp_path / "r"), "--", "bash", "train.sh"])
    assert code == 2 and "Python" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.fixture(scope="module")
def nmt_run(tiny_nmt_run):
    return tiny_nmt_run  # TINY_NMT, captured once for the session (conftest)


@pytest.mark.slow
def test_nmt_trace_manifest(nmt_run):
    m = _manifest(nmt_run)
    assert m["format"] == "rnnprof-run" and m["version"] == 1 and m["status"] == "complete"
    assert m["config"]["devices"] == 2 and m["config"]["units"] == 16
    assert [d["kind"] for d in m["devices"]] == ["logical-cpu", "logical-cpu"]
    assert len(m["step_times"]["warmup"]) == 2 and len(m["step_times"]["timed"]) == 3
    # each step's CPU times, one for one with its wall time: the process's CPU time is spent on at most every
    # core for the step's time, and within the host's busy time (sampled in ticks of 10 ms per core, which
    # count a little less than the process's own clock: 8 % less was seen on this machine)
    assert [len(m["step_cpu"][phase]) for phase in ("warmup", "timed")] == [2, 3]
    for seconds, cpu in zip(m["step_times"]["timed"], m["step_cpu"]["timed"]):
        assert 0 < cpu["process_s"] <= seconds * os.cpu_count() + 0.01
    host = [c["host_busy_s"] for c in m["step_cpu"]["timed"]]
    if None not in host:
        process = sum(c["process_s"] for c in m["step_cpu"]["timed"])
        assert sum(host) + 0.01 * (os.cpu_count() + 1) * len(host) >= 0.8 * process
    assert m["throughput"]["steps"] == 3 and m["throughput"]["words_per_second"] > 0
    # captured after the timed window: steps 0-4 were warm-up and timing
    assert m["traced_steps"] == [5, 6] and m["profiled_steps"] == [7, 8]
    assert set(m["session_config"]) == {"inter_op_threads", "intra_op_threads", "allow_soft_placement"}
    assert m["machine"]["cpu_count"] == os.cpu_count()
    for kind, files in m["captured"].items():
        assert files, kind
        assert all((nmt_run / rel).is_file() for rel in files)
    assert not [p for p in nmt_run.rglob("*") if p.name.startswith(".")]  # no temporaries left


@pytest.mark.slow
def test_nmt_timelines_have_a_lane_per_device_in_every_step(nmt_run):
    m = _manifest(nmt_run)
    devices = {d["name"] for d in m["devices"]}
    for step in m["traced_steps"]:
        with gzip.open(nmt_run / rundir.TIMELINES_DIR / rundir.timeline_name(step)) as handle:
            events = json.load(handle)["traceEvents"]
        processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
        ops = [e for e in events if e["ph"] == "X"]
        assert {processes[e["pid"]] for e in ops} == devices
        assert {e["args"]["step"] for e in ops} == {step}
        flows = [e for e in events if e["ph"] in ("s", "f")]
        assert flows and {processes[e["pid"]] for e in flows} == devices
        # Ring all-reduce (the default update): one arrow per member per collective run, from a
        # CollectiveReduce slice on one device to the same instance's slice on the other.
        collective = [e for e in flows if e["cat"] == "collective"]
        reductions = [e for e in ops if e["name"] == "CollectiveReduce"]
        assert reductions and len(collective) == 2 * len(reductions)
        for point in collective:
            bound = [e for e in ops if e["pid"] == point["pid"] and e["tid"] == point["tid"]
                     and e["ts"] <= point["ts"] <= e["ts"] + e["dur"]]
            assert bound and bound[-1]["name"] == "CollectiveReduce", point


@pytest.mark.slow
def test_nmt_partition_graphs_assign_ops_to_each_device(nmt_run):
    from tensorflow.core.framework import graph_pb2

    devices = {d["name"] for d in _manifest(nmt_run)["devices"]}
    assigned = set()
    for path in (nmt_run / rundir.GRAPHS_DIR / rundir.PARTITIONS_DIR).glob("*.pb"):
        graph = graph_pb2.GraphDef.FromString(path.read_bytes())
        assert graph.node
        assigned |= {n.device for n in graph.node}
    assert assigned == devices


@pytest.mark.slow
def test_nmt_xplanes_convert(nmt_run, tmp_path):
    m = _manifest(nmt_run)
    for rel in m["captured"]["xplane"]:
        trace = _xprof_trace(nmt_run / rel, tmp_path)
        assert [e for e in trace["traceEvents"] if e.get("ph") == "X"], rel
        if Path(rel).parent.name.endswith(rundir.DEVICES_RUN_SUFFIX):
            threads = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
            for device in m["devices"]:
                assert f"{device['name']} ops" in threads


@pytest.mark.slow
def test_capture_workload_reports_what_it_wrote(tmp_path):
    """The capture sequence without the command: its result agrees with the run directory it wrote."""
    from rnnprof.models.config import WorkloadConfig
    from rnnprof.recording.workload import capture_workload

    config = WorkloadConfig(model="rnnlm", layers=1, units=16, embedding=16, vocab_size=50, src_max_len=6,
                            tgt_max_len=6, batch_size=4, devices=2, warmup=1, batches=2, inter_op_threads=1,
                            learning_rate=1.0)
    warnings = []
    done = capture_workload(config, tmp_path / "run", force=False, command=["test"], trace_steps=1,
                            on_warning=warnings.append)
    m = _manifest(done.path)
    assert done.path == tmp_path / "run" and m["status"] == "complete" and m["command"] == ["test"]
    assert done.device_kind == "logical-cpu" and [d["kind"] for d in m["devices"]] == ["logical-cpu"] * 2
    assert done.timed.steps == 2 and m["throughput"]["steps"] == 2
    assert done.timed.words_per_second == m["throughput"]["words_per_second"]
    assert len(m["step_times"]["warmup"]) == 1 and len(m["step_times"]["timed"]) == 2
    assert sum(m["step_times"]["timed"]) == pytest.approx(done.timed.total_seconds)
    assert m["traced_steps"] == [3] and m["profiled_steps"] == [4]
    assert done.captured == m["captured"] and len(done.captured["timelines"]) == 1
    # The session's own settings, not the flags': one inter-op thread, and the warning it draws.
    assert m["session_config"] == {"inter_op_threads": 1, "intra_op_threads": 0, "allow_soft_placement": True}
    assert len(warnings) == 1 and "--inter-op-threads 1" in warnings[0]


TF2_SCRIPT = """
import sys
import tensorflow as tf
w = tf.Variable(tf.random.normal([16, 16], seed=1))
opt = tf.keras.optimizers.SGD(0.01)

@tf.function
def train_step(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.tanh(tf.matmul(x, w)) ** 2)
    opt.apply_gradients([(tape.gradient(loss, w), w)])
    return loss

for _ in range(int(sys.argv[1])):
    train_step(tf.ones([8, 16]))
"""


def _check_tf2_run(run: Path, tmp_path: Path, steps: list[int]) -> None:
    from tensorflow.core.framework import graph_pb2

    m = _manifest(run)
    assert m["status"] == "complete"
    assert m["profiled_steps"] == steps
    assert m["captured"]["xplane"]
    trace = _xprof_trace(run / m["captured"]["xplane"][0], tmp_path)
    markers = {int(e["args"]["step_num"]) for e in trace["traceEvents"]
               if e.get("ph") == "X" and str(e.get("name", "")).startswith("train ") and "step_num" in e.get("args", {})}
    assert markers == set(steps)
    pre = list((run / rundir.GRAPHS_DIR / rundir.FUNCTIONS_DIR).glob("*/pre_optimization.pb"))
    assert pre
    ops = set()
    for path in pre:
        ops |= {n.op for n in graph_pb2.GraphDef.FromString(path.read_bytes()).node}
    assert "MatMul" in ops
    assert list((run / rundir.GRAPHS_DIR / rundir.FUNCTIONS_DIR).glob("*/partitions/*.pb"))


@pytest.mark.slow
def test_trace_tf2_script_through_cli(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TF2_SCRIPT)
    out = tmp_path / "run[bold]x[/bold]:smile:"  # printed verbatim, not read as rich markup
    result = _trace_script(out, script, "--steps", "2", "--skip-steps", "1", script_args=["5"],
                           env={**ENV, "COLUMNS": "1000"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"run directory: {out}" in result.stdout
    _check_tf2_run(out, tmp_path, [1, 2])


API_SCRIPT = """
import sys
import tensorflow as tf
import rnnprof

w = tf.Variable(tf.ones([8, 8]))

@tf.function
def train_step(x):
    w.assign_sub(0.01 * tf.matmul(x, w))
    return tf.reduce_sum(w)

out = sys.argv[1]
with rnnprof.capture(out + "/api", steps=2) as cap:
    for n in range(4):
        with cap.step(n):
            train_step(tf.ones([8, 8]))

try:
    with rnnprof.capture(out + "/interrupted", steps=5):
        for n in range(3):
            rnnprof.step(n)
            train_step(tf.ones([8, 8]))
            if n == 1:
                raise KeyboardInterrupt
except KeyboardInterrupt:
    pass

import keras
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
x = tf.ones([32, 4]); y = tf.zeros([32, 1])
model.fit(x, y, batch_size=4, epochs=1, verbose=0,
          callbacks=[rnnprof.KerasCaptureCallback(out + "/keras", steps=2, skip_steps=1)])
"""


@pytest.mark.slow
def test_capture_api_step_markers_interrupt_and_keras_callback(tmp_path):
    script = tmp_path / "api.py"
    script.write_text(API_SCRIPT)
    result = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True,
                            env=ENV, timeout=150)
    assert result.returncode == 0, result.stderr[-3000:]
    api = _manifest(tmp_path / "api")
    assert api["status"] == "complete" and api["profiled_steps"] == [0, 1]
    assert api["config"] == {"script": [str(script), str(tmp_path)]}
    interrupted = _manifest(tmp_path / "interrupted")
    assert interrupted["status"] == "interrupted"
    assert interrupted["captured"]["xplane"]  # what was captured before the interrupt is kept
    keras_run = _manifest(tmp_path / "keras")
    assert keras_run["status"] == "complete" and keras_run["profiled_steps"] == [1, 2]
    trace = _xprof_trace(tmp_path / "keras" / keras_run["captured"]["xplane"][0], tmp_path)
    assert any(str(e.get("name", "")).startswith("train 1") for e in trace["traceEvents"])


SERVER_SCRIPT = """
import sys, time
import tensorflow as tf
tf.profiler.experimental.server.start(int(sys.argv[1]))
# Big enough that TF's executor keeps MatMul "expensive" (traced at the default
# host level) on any CPU; kernels under ~8000 cycles are traced only at verbose level.
w = tf.Variable(tf.ones([384, 384]) / 384.0)

@tf.function
def work():
    w.assign(tf.tanh(tf.matmul(w, w)))

work()  # trace the function before the capture window opens
print("ready", flush=True)
end = time.time() + 60
while time.time() < end:  # a step every 10 ms: hundreds in the capture, and the cores left to the others
    work()
    time.sleep(0.01)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_attach_to_a_profiler_server(tmp_path):
    script = tmp_path / "server.py"
    script.write_text(SERVER_SCRIPT)
    port = _free_port()
    server = subprocess.Popen([sys.executable, str(script), str(port)], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, env=ENV)
    try:
        assert server.stdout.readline().strip() == "ready"
        time.sleep(1)
        out = tmp_path / "attached"
        assert main(["trace", "--attach", f"grpc://127.0.0.1:{port}", "--duration", "2", "--out", str(out)]) == 0
    finally:
        server.kill()
        server.wait()
    m = _manifest(out)
    assert m["status"] == "complete" and m["config"]["attach"] == f"grpc://127.0.0.1:{port}"
    xplane = out / m["captured"]["xplane"][0]
    names = {str(e.get("name", "")) for e in _xprof_trace(xplane, tmp_path)["traceEvents"] if e.get("ph") == "X"}
    assert any("MatMul" in name for name in names), sorted(names)[:40]
    table = load_events(xplane)
    assert "MatMul" in set(table.text(table.name)), "rnnprof's xplane loader misses the server's ops"


@pytest.mark.parametrize("flag, value", [("--duration", "nan"), ("--duration", "inf"), ("--duration", "-1"),
                                         ("--delay", "nan")])
def test_seconds_must_be_finite_and_not_negative(tmp_path, capsys, flag, value):
    assert main(["trace", "--attach", "grpc://127.0.0.1:1", flag, value, "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and flag in err and not (tmp_path / "a").exists()


def test_attach_rejects_a_bad_address(tmp_path, capsys):
    assert main(["trace", "--attach", "http://x", "--out", str(tmp_path / "a")]) == 2
    assert "grpc://HOST:PORT" in capsys.readouterr().err


TF1_SCRIPT = """
import numpy as np
import tensorflow as tf
tf1 = tf.compat.v1
tf1.disable_eager_execution()
with tf.device("/cpu:0"):
    x = tf1.placeholder(tf.float32, [8, 16])
    h = tf.tanh(tf.matmul(x, tf1.get_variable("w0", [16, 16])))
with tf.device("/cpu:1"):
    loss = tf.reduce_sum(tf.matmul(h, tf1.get_variable("w1", [16, 16])))
train = tf1.train.GradientDescentOptimizer(0.01).minimize(loss)
config = tf1.ConfigProto(device_count={"CPU": 2}, inter_op_parallelism_threads=4)
with tf1.Session(config=config) as session:
    session.run(tf1.global_variables_initializer())
    for _ in range(5):
        session.run(train, {x: np.ones((8, 16))})
"""


@pytest.mark.slow
def test_trace_tf1_session_script_through_cli(tmp_path):
    # the script names neither framework: its job is a module elsewhere (a library), which imports TensorFlow;
    # TensorFlow's capture starts as that import ends, before the job builds its graph
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "tf1_job.py").write_text(TF1_SCRIPT + "import sys\nprint('torch imported:', 'torch' in sys.modules)\n")
    script = tmp_path / "train.py"
    script.write_text("import tf1_job  # noqa: F401\n")
    out = tmp_path / "run"
    paths = os.pathsep.join(filter(None, [ENV.get("PYTHONPATH"), str(lib)]))
    result = _trace_script(out, script, "--steps", "2", env=dict(ENV, PYTHONPATH=paths))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "torch imported: False" in result.stdout
    m = _manifest(out)
    assert m["status"] == "complete" and m["traced_steps"] == [1, 2]  # run 0 is the initializer
    assert m["session_config"]["inter_op_threads"] == 4
    devices = {d["name"] for d in m["devices"]} & {"/job:localhost/replica:0/task:0/device:CPU:0",
                                                     "/job:localhost/replica:0/task:0/device:CPU:1"}
    assert len(devices) == 2
    for step in m["traced_steps"]:
        with gzip.open(out / rundir.TIMELINES_DIR / rundir.timeline_name(step)) as handle:
            events = json.load(handle)["traceEvents"]
        processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
        assert {processes[e["pid"]] for e in events if e["ph"] == "X"} == devices
        assert [e for e in events if e["ph"] == "s"]
    assert (out / rundir.GRAPHS_DIR / rundir.GRAPH_FILE).is_file()
    assert list((out / rundir.GRAPHS_DIR / rundir.PARTITIONS_DIR).glob("*.pb"))


FAILING_SCRIPT = """
import tensorflow as tf

@tf.function
def step(x):
    return x * 2

for _ in range(3):
    step(tf.constant(1.0))

def load_batch():
    raise ValueError("no such shard")

load_batch()
"""


@pytest.mark.slow
def test_a_failing_script_shows_its_own_traceback_and_its_exit_code(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(FAILING_SCRIPT)
    out = tmp_path / "run"
    result = _trace_script(out, script, "--steps", "1")
    assert result.returncode == 1
    err = result.stderr.strip().splitlines()
    assert err[-1] == f"rnnprof trace: error: the script raised ValueError: no such shard (run directory: {out})"
    assert "in load_batch" in result.stderr and "rnnprof/recording/script.py" not in result.stderr
    assert result.stdout == ""
    m = _manifest(out)
    assert m["status"] == "interrupted" and m["exit_code"] == 1
    assert m["error"] == "the script raised ValueError: no such shard"
    assert m["profiled_steps"] == [1] and m["captured"]["xplane"]  # the window closed before the failure


@pytest.mark.slow
def test_script_exit_code_is_passed_on(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import sys\nsys.exit(3)\n")
    out = tmp_path / "run"
    result = _trace_script(out, script)
    assert result.returncode == 3
    assert result.stderr.strip().splitlines()[-1] == (
        f"rnnprof trace: error: the script exited with code 3 (run directory: {out})")
    assert _manifest(out)["exit_code"] == 3


def test_a_python_without_tensorflow_is_one_line_naming_the_interpreter(tmp_path):
    shim = tmp_path / "shim" / "tensorflow"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('No module named tensorflow')\n")
    script = tmp_path / "train.py"
    script.write_text("import tensorflow\nprint('never runs')\n")
    out = tmp_path / "run"
    env = dict(ENV, PYTHONPATH=str(shim.parent))
    result = _trace_script(out, script, env=env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot import tensorflow" in lines[0] and sys.executable in lines[0]
    assert "never runs" not in result.stdout
    m = _manifest(out)
    assert m["status"] == "interrupted" and "cannot import tensorflow" in m["error"]


def test_a_script_that_imports_neither_framework_is_run_without_either(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import sys\nprint('imported:', sorted({'tensorflow', 'torch'} & set(sys.modules)))\n")
    out = tmp_path / "run"
    result = _trace_script(out, script, "--steps", "2")
    assert result.returncode == 1 and result.stdout == "imported: []\n"
    assert result.stderr.strip().splitlines()[-1] == (
        "rnnprof trace: error: nothing was captured: the script imported neither TensorFlow nor torch (rnnprof "
        f"captures the one a script imports) (run directory: {out})")
    assert _manifest(out)["status"] == "complete"


@pytest.mark.slow
def test_a_window_that_never_opens_is_an_error_not_an_empty_run(tmp_path):
    script = tmp_path / "train_tf1.py"
    script.write_text(TF1_SCRIPT)
    out = tmp_path / "run"
    result = _trace_script(out, script, "--delay", "600")
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("rnnprof trace: error: nothing was captured: the script ran 6 step(s)")
    assert "--delay 600 s" in last and result.stdout == ""
    m = _manifest(out)
    assert m["status"] == "complete" and m["steps_seen"] == 6 and not any(m["captured"].values())


def test_a_bad_data_file_is_refused_before_the_run_directory_exists(tmp_path, capsys):
    data = tmp_path / "empty.txt"
    data.write_text("")
    out = tmp_path / "run"
    assert main(["trace", "--model", "rnnlm", "--preset", "small", "--data", str(data), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "empty.txt" in err[0]
    assert not out.exists()
