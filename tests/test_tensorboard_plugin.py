"""rnnprof's tab in TensorBoard, in a real browser: a run with a planted straggler (rank 1 sleeps 40 ms a step) shows
its finding, the rank and the saving ``rnnprof audit`` gives, with TensorBoard started as a user starts it
(``tensorboard --logdir runs/``) and through ``rnnprof view``; nothing loads from the network."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from rich.console import Console

from rnnprof.cli import main
from browser import browser
from fixtures import FIXTURES
from processes import descendants

STRAGGLER_RUN = FIXTURES / "torch-two-faults" / "run"  # rank 1 sleeps 40 ms every step (tests/data/README.md)
TENSORBOARD = Path(sys.executable).with_name("tensorboard")

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Server:
    """A command serving on ``port`` (TensorBoard, or rnnprof view of it), started in ``cwd``; ``close()`` stops
    it and whatever it started."""

    def __init__(self, argv: list[str], cwd: Path, port: int):
        self.base = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), start_new_session=True)
        self.started = []
        deadline = time.time() + 180
        while time.time() < deadline and self.process.poll() is None:
            try:
                with urllib.request.urlopen(f"{self.base}/data/plugin/rnnprof/runs", timeout=5) as response:
                    self.runs = json.loads(response.read())
                    break
            except OSError:
                time.sleep(1)
        else:
            out = self.process.stdout.read() if self.process.poll() is not None else ""
            self.close()
            pytest.fail(f"{argv[:3]} did not serve rnnprof's runs: {out[-2000:]}")
        self.started = descendants(self.process.pid)

    def close(self) -> None:
        if self.process.poll() is None:
            self.started += descendants(self.process.pid)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for p in self.started:
            if p.running():
                os.kill(p.pid, signal.SIGKILL)
        self.process.stdout.close()


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> Path:
    """A user's folder: ``runs/straggler`` is the planted straggler's run directory."""
    home = tmp_path_factory.mktemp("user")
    shutil.copytree(STRAGGLER_RUN, home / "runs" / "straggler")
    return home


@pytest.fixture(scope="module")
def chromium():
    b = browser()
    yield b
    b.close()


@pytest.fixture(scope="module")
def planted() -> dict:
    """The straggler's finding as ``rnnprof audit --json`` gives it."""
    console = Console(record=True, width=10_000)
    with console.capture() as capture:
        # exit status 1: a finding at error, as audit's default --fail-on error asks
        assert main(["audit", str(STRAGGLER_RUN), "--json"], console=console) == 1
    findings = json.loads(capture.get())["findings"]
    straggler = [f for f in findings if f["rule"] == "PF001"]
    assert straggler and straggler[0]["subject"]["rank"] == "rank1", findings  # the planted one: rank 1
    return straggler[0]


def _assert_tab_shows(chromium, base: str, planted: dict) -> None:
    saving = f"{planted['saving_ms']:,.3f} ms"
    text = chromium.text(f"{base}/#rnnprof", until=saving)
    assert "PF001" in text and saving in text, text[-3000:]
    sentence = next(line for line in text.splitlines() if "PF001" in line)
    # one finding: what audit found (its title names the rank) and what fixing it saves
    assert sentence.startswith(f"error PF001 {planted['title']}.") and f"save {saving} a step" in sentence, sentence
    for part in ("Time per step", "Memory", "Critical path", "share of the path"):
        assert part in text, part
    outside = [u for u in chromium.requests if not u.startswith((base, "data:", "about:", "blob:"))]
    assert outside == [], f"the tab loaded from elsewhere: {outside[:5]}"


def test_tensorboard_started_as_a_user_does_shows_the_straggler(logdir, chromium, planted):
    port = _free_port()
    server = _Server([str(TENSORBOARD), "--logdir", "runs/", "--port", str(port), "--host", "127.0.0.1"], logdir,
                     port)
    try:
        assert server.runs == ["straggler"]
        _assert_tab_shows(chromium, server.base, planted)
    finally:
        server.close()


def test_rnnprof_view_opens_tensorboard_on_the_tab(logdir, chromium, planted):
    port = _free_port()
    server = _Server([sys.executable, "-m", "rnnprof", "view", "runs/", "--port", str(port)], logdir, port)
    try:
        _assert_tab_shows(chromium, server.base, planted)
    finally:
        server.close()
