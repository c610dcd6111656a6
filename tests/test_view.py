"""rnnprof view: TensorBoard's profile plugin serves the run; headless Chromium lists it."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from rnnprof.cli import main
from rnnprof.profiler import rundir

DEV0 = "/job:localhost/replica:0/task:0/device:CPU:0"
DEV1 = "/job:localhost/replica:0/task:0/device:CPU:1"
PROFILE_RUN = "2024_01_01_00_00_00" + rundir.DEVICES_RUN_SUFFIX


def _node(name, label, start_us, dur_us):
    return NS(node_name=name, timeline_label=label, all_start_nanos=int(start_us * 1000),
              all_end_rel_nanos=int(dur_us * 1000), output=[])


def _make_run(root: Path, name: str = "nmt-test") -> Path:
    """A run directory whose per-device XSpace is built from two devices' step_stats."""
    pytest.importorskip("tensorflow")
    from rnnprof.profiler.rundir.writer import RunWriter
    from rnnprof.profiler.rundir.xspace import build_xspace

    stats = NS(dev_stats=[NS(device=DEV0, node_stats=[_node("enc/matmul", "enc/matmul = MatMul(a, b)", 1000, 40)]),
                          NS(device=DEV1, node_stats=[_node("dec/matmul", "dec/matmul = MatMul(c, d)", 1010, 30)])])
    writer = RunWriter(root / name, command=["test"])
    writer.set_devices([DEV0, DEV1], "logical-cpu")
    writer.write_xspace(build_xspace([(0, stats)], "testhost"), PROFILE_RUN, host="testhost")
    writer.finish()
    return writer.path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 30) -> bytes:
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        data = response.read()
        if response.headers.get("Content-Encoding") == "gzip":
            data = gzip.decompress(data)
        return data


class _Viewer:
    """``rnnprof view`` in a subprocess, waited on until it prints its URL."""

    def __init__(self, logdir: Path):
        self.port = _free_port()
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        self.process = subprocess.Popen([sys.executable, "-m", "rnnprof", "view", str(logdir), "--port",
                                         str(self.port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, env=env)
        self.base = None
        deadline = time.time() + 90
        while time.time() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            if "http://" in line:
                self.base = f"http://127.0.0.1:{self.port}"
                assert f"127.0.0.1:{self.port}/#profile" in line
                break
        assert self.base, "rnnprof view printed no URL"
        for _ in range(60):  # the plugin discovers runs shortly after start
            try:
                if json.loads(_get(f"{self.base}/data/plugin/profile/runs")):
                    break
            except OSError:
                pass
            time.sleep(0.5)

    def close(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()


@pytest.fixture(scope="module")
def viewer(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    run = _make_run(runs)
    v = _Viewer(run)
    yield v
    v.close()


def test_view_rejects_a_missing_dir_and_a_dir_without_profile(tmp_path, capsys):
    assert main(["view", str(tmp_path / "nope")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["view", str(tmp_path / "empty")]) == 2
    assert "no TensorBoard profile" in capsys.readouterr().err


@pytest.mark.slow
def test_profile_plugin_serves_the_run_tools_and_device_lanes(viewer):
    runs = json.loads(_get(f"{viewer.base}/data/plugin/profile/runs"))
    assert PROFILE_RUN in runs
    tools = json.loads(_get(f"{viewer.base}/data/plugin/profile/run_tools?run={PROFILE_RUN}"))
    assert any(t.startswith("trace_viewer") for t in tools)
    hosts = json.loads(_get(f"{viewer.base}/data/plugin/profile/hosts?run={PROFILE_RUN}&tag=trace_viewer"))
    assert {"hostname": "testhost"} in hosts
    trace = json.loads(_get(f"{viewer.base}/data/plugin/profile/data?run={PROFILE_RUN}&tag=trace_viewer&host=testhost"))
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert {f"{DEV0} ops", f"{DEV1} ops"} <= threads
    ops = {e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"}
    assert {"enc/matmul:MatMul", "dec/matmul:MatMul"} <= ops or {"enc/matmul", "dec/matmul"} <= ops


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.mark.slow
def test_headless_chromium_lists_the_run_on_the_profile_page(viewer):
    browser = _chromium()
    if browser is None:
        pytest.skip("Chromium is not installed (.ci/run installs it with apt-get where apt is available)")
    with tempfile.TemporaryDirectory() as profile_dir:
        result = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile_dir}",
             "--virtual-time-budget=20000", "--dump-dom", f"{viewer.base}/data/plugin/profile/index.html"],
            capture_output=True, text=True, timeout=120)
    dom = result.stdout
    assert "<html" in dom, result.stderr[-1000:]
    assert PROFILE_RUN in dom  # the run selector shows the run


@pytest.mark.slow
def test_a_folder_of_runs_lists_every_run(tmp_path):
    for name in ("loop", "fused"):
        _make_run(tmp_path, name)
    viewer = _Viewer(tmp_path)
    try:
        runs = set(json.loads(_get(f"{viewer.base}/data/plugin/profile/runs")))
        for _ in range(20):  # runs are discovered one by one
            if len(runs) == 2:
                break
            time.sleep(0.5)
            runs = set(json.loads(_get(f"{viewer.base}/data/plugin/profile/runs")))
    finally:
        viewer.close()
    assert runs == {f"loop/{PROFILE_RUN}", f"fused/{PROFILE_RUN}"}


@pytest.mark.slow
def test_a_port_in_use_is_one_line(tmp_path):
    run = _make_run(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "rnnprof", "view", str(run), "--port", str(port)],
                                capture_output=True, text=True, timeout=120,
                                env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("rnnprof view: error: TensorBoard did not start:") and str(port) in last
    assert "--port 0" in last and "http://" not in result.stdout
