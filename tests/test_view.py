"""rnnprof view: TensorBoard serves the run, every session opens on step times, headless Chromium lists it,
and SIGTERM leaves no server running."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
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
from rnnprof import rundir
from rnnprof.commands import view as view_command
from rnnprof.errors import UsageError

from processes import Proc, descendants, processes

DEV0 = "/job:localhost/replica:0/task:0/device:CPU:0"
DEV1 = "/job:localhost/replica:0/task:0/device:CPU:1"
PROFILE_RUN = "2024_01_01_00_00_00" + rundir.DEVICES_RUN_SUFFIX


def _node(name, label, start_us, dur_us):
    return NS(node_name=name, timeline_label=label, all_start_nanos=int(start_us * 1000),
              all_end_rel_nanos=int(dur_us * 1000), output=[])


def _make_run(root: Path, name: str = "nmt-test") -> Path:
    """A run directory whose per-device XSpace is built from two devices' step_stats."""
    pytest.importorskip("tensorflow")
    from rnnprof.rundir.writer import RunWriter
    from rnnprof.rundir.xspace import build_xspace

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
    """``rnnprof view`` in a subprocess, waited on until it prints its URL.

    ``close()`` stops it with SIGTERM and kills whatever it started that still runs, so that no
    test leaves a server behind even when ``rnnprof view`` fails to stop its children.
    """

    def __init__(self, logdir: Path):
        self.port = _free_port()
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        self.started: list[Proc] = []
        self.process = subprocess.Popen([sys.executable, "-m", "rnnprof", "view", str(logdir), "--port",
                                         str(self.port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, env=env, start_new_session=True)
        try:
            self._wait_until_serving()
        except BaseException:
            self.close()
            raise

    def _wait_until_serving(self) -> None:
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
        self.started = descendants(self.process.pid)  # TensorBoard and its data server
        for _ in range(60):  # the plugin discovers runs shortly after start
            try:
                if json.loads(_get(f"{self.base}/data/plugin/profile/runs")):
                    break
            except OSError:
                pass
            time.sleep(0.5)

    def close(self) -> list[Proc]:
        """Stop ``rnnprof view`` (SIGTERM, as ``kill`` does); returns what it left running, now killed."""
        if self.process.poll() is None:
            self.started += descendants(self.process.pid)
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()
        left = list({(p.pid, p.start): p for p in self.started if p.running()}.values())
        for p in left:
            os.kill(p.pid, signal.SIGKILL)
        return left


def _serving(run: Path):
    """A ``_Viewer`` of ``run`` for a fixture's lifetime; the fixture fails if it leaves a process running."""
    v = _Viewer(run)
    try:
        yield v
    finally:
        left = v.close()
    assert not left, f"rnnprof view left running: {left}"


RUNS = ("loop", "fused")
SESSIONS = {f"{name}/{PROFILE_RUN}" for name in RUNS}  # a folder's runs, as the profile plugin names them


@pytest.fixture(scope="module")
def viewer(tmp_path_factory):
    """``rnnprof view`` of a folder of two runs, for the module (a single run directory: ``captured_viewer``)."""
    root = tmp_path_factory.mktemp("runs")
    for name in RUNS:
        _make_run(root, name)
    for serving in _serving(root):
        for _ in range(20):  # the plugin discovers the runs one by one
            if set(json.loads(_get(f"{serving.base}/data/plugin/profile/runs"))) >= SESSIONS:
                break
            time.sleep(0.5)
        yield serving


def test_view_rejects_a_missing_dir_and_a_dir_without_profile(tmp_path, capsys):
    assert main(["view", str(tmp_path / "nope")]) == 2
    assert "nope: does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["view", str(tmp_path / "empty")]) == 2
    assert "no run directory (manifest.json) and no TensorBoard profile" in capsys.readouterr().err


@pytest.mark.slow
def test_profile_plugin_serves_the_run_tools_and_device_lanes(viewer):
    session = f"loop/{PROFILE_RUN}"
    runs = json.loads(_get(f"{viewer.base}/data/plugin/profile/runs"))
    assert session in runs
    tools = json.loads(_get(f"{viewer.base}/data/plugin/profile/run_tools?run={session}"))
    assert any(t.startswith("trace_viewer") for t in tools)
    hosts = json.loads(_get(f"{viewer.base}/data/plugin/profile/hosts?run={session}&tag=trace_viewer"))
    assert {"hostname": "testhost"} in hosts
    trace = json.loads(_get(f"{viewer.base}/data/plugin/profile/data?run={session}&tag=trace_viewer&host=testhost"))
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
    assert f"loop/{PROFILE_RUN}" in dom  # the run selector shows the run


@pytest.mark.slow
def test_a_folder_of_runs_lists_every_run(viewer):
    assert set(json.loads(_get(f"{viewer.base}/data/plugin/profile/runs"))) == SESSIONS


@pytest.mark.slow
def test_a_port_in_use_is_one_line(tmp_path):
    run = _make_run(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        view = subprocess.Popen([sys.executable, "-m", "rnnprof", "view", str(run), "--port", str(port)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), start_new_session=True)
        try:
            out, err = view.communicate(timeout=120)
        finally:
            started = descendants(view.pid)
            if view.poll() is None:
                view.kill()
                view.communicate()
            for p in started:
                if p.running():
                    os.kill(p.pid, signal.SIGKILL)
    assert view.returncode == 2 and started == []  # refused before TensorBoard started
    assert err.strip() == (f"rnnprof view: error: port {port} on 127.0.0.1 is in use (choose another --port, or "
                           "--port 0 for a free one)")
    assert "http://" not in out


def test_a_port_tensorboard_itself_cannot_bind_is_one_line_too():
    """Where the port is taken between rnnprof's check and TensorBoard's bind, TensorBoard's own message is said."""

    class Exited:
        stdout = iter(["ERROR: TensorBoard could not bind to port 6006, it was already in use\n"])  # program.py's

        def wait(self):
            return 1

    with pytest.raises(UsageError) as refused:
        view_command.follow_tensorboard(Exited(), None)
    assert str(refused.value) == ("TensorBoard did not start: TensorBoard could not bind to port 6006, it was already "
                                  "in use (choose another --port, or --port 0 for a free one)")


def test_the_port_check_leaves_port_0_and_unknown_hosts_to_tensorboard():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(UsageError, match=f"port {port} on 127.0.0.1 is in use"):
            view_command.check_port("127.0.0.1", port)
        view_command.check_port("127.0.0.1", 0)
        view_command.check_port("no-such-host.invalid", port)
    view_command.check_port("127.0.0.1", port)  # free again


# -- a real captured run ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def captured_run(tiny_nmt_run):
    """TINY_NMT traced by ``rnnprof trace``, captured once for the session (conftest); view only reads it."""
    return tiny_nmt_run


@pytest.fixture(scope="module")
def captured_viewer(captured_run):
    yield from _serving(captured_run)


def _step_table(overview: list) -> tuple[dict, list[dict]]:
    """The overview page's step-time table: its properties and its rows by column id."""
    table = next(t for t in overview if any(c["id"] == "stepTimeMs" for c in t.get("cols", [])))
    ids = [c["id"] for c in table["cols"]]
    return table["p"], [{k: c.get("v") for k, c in zip(ids, row["c"])} for row in table["rows"]]


@pytest.mark.slow
def test_every_profile_session_of_a_captured_run_opens_on_a_known_step_time(captured_viewer, captured_run):
    base = f"{captured_viewer.base}/data/plugin/profile"
    sessions = json.loads(_get(f"{base}/runs"))
    on_disk = {p.name for p in (captured_run / rundir.PROFILE_DIR).iterdir() if p.is_dir()}
    assert set(sessions) == on_disk and len(on_disk) == 2  # tf.profiler's and the per-device one
    manifest = json.loads((captured_run / rundir.MANIFEST).read_text())
    for session in sessions:
        # the page TensorBoard opens a session on
        assert json.loads(_get(f"{base}/run_tools?run={session}"))[0] == "overview_page"
        hosts = json.loads(_get(f"{base}/hosts?run={session}&tag=overview_page"))
        assert hosts, session
        for host in hosts:
            overview = json.loads(_get(f"{base}/data?run={session}&tag=overview_page&host={host['hostname']}"))
            summary, rows = _step_table(overview)
            assert float(summary["steptime_ms_average"]) > 0, (session, summary)
            assert rows and all(row["stepTimeMs"] > 0 for row in rows), (session, rows)
            steps = manifest["traced_steps"] if session.endswith(rundir.DEVICES_RUN_SUFFIX) \
                else manifest["profiled_steps"]
            assert {row["stepnum"] for row in rows} <= {f"train {n}" for n in steps}, (session, rows)


@pytest.mark.slow
def test_sigterm_stops_view_and_everything_it_started(captured_viewer):
    """The module's last use of ``captured_viewer`` (its close then finds it stopped)."""
    viewer = captured_viewer
    try:
        started = list({(p.pid, p.start): p for p in [*viewer.started, *descendants(viewer.process.pid)]}.values())
        assert any("tensorboard" in p.cmdline for p in started), started
        sessions = {p.session for p in started}
        viewer.process.send_signal(signal.SIGTERM)
        out, _ = viewer.process.communicate(timeout=60)
    finally:
        left = viewer.close()
    assert viewer.process.returncode == 0 and "error" not in out.lower() and "Traceback" not in out, out
    assert not left, left  # no descendant of rnnprof view still runs
    assert not [p for p in processes() if p.session in sessions and p.running()]  # nor anything in their session
