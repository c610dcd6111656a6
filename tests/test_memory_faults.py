"""Planted memory faults in tiny gloo DDP jobs (benchmarks/diagnosis_jobs/memory_faults.py) under rnnprof trace
and torchrun, each against the size the script allocated, and a control without the fault that stays quiet."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import shared_once
from rnnprof.cli import main

pytestmark = pytest.mark.slow
JOB = Path(__file__).resolve().parents[1] / "benchmarks" / "diagnosis_jobs" / "memory_faults.py"
SKIP, WINDOW = 1, 5  # the capture's --skip-steps and --steps: the job runs exactly these steps
LEAK, BUFFER = 1_000_000, 4_000_000  # bytes the script keeps per step, and rank 0's buffer
MEMORY_RULES = ("PF008", "PF009", "PF010")


def _capture(folder: Path, *job_args: str) -> None:
    subprocess.run([sys.executable, "-m", "rnnprof", "trace", "--out", str(folder / "run"), "--steps", str(WINDOW),
                    "--skip-steps", str(SKIP), "--", sys.executable, "-m", "torch.distributed.run",
                    "--nproc-per-node", "2", str(JOB), "--steps", str(SKIP + WINDOW), *job_args],
                   check=True, capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    jobs = {"leak": ["--fault", "leak", "--bytes", str(LEAK)],
            "buffer": ["--fault", "buffer", "--bytes", str(BUFFER)],
            "control": ["--fault", "buffer", "--bytes", str(BUFFER), "--control"]}
    return lambda name: shared_once(tmp_path_factory, f"memory-{name}", lambda f: _capture(f, *jobs[name])) / "run"


def _document(capsys, *argv) -> dict:
    code = main([*argv, "--json"])
    out = capsys.readouterr().out
    assert code in (0, 1), out
    return json.loads(out)


def _memory(capsys, run: Path) -> dict[str, dict]:
    return {d["device"]: d for d in _document(capsys, "memory", str(run))["devices"]}


def _alarms(capsys, run: Path) -> list[dict]:
    findings = _document(capsys, "audit", str(run))["findings"]
    return [f for f in findings if f["rule"] in MEMORY_RULES and f["severity"] in ("warning", "error")]


def test_a_rank_that_keeps_a_megabyte_per_step_is_found_as_growth(runs, capsys):
    devices = _memory(capsys, runs("leak"))
    leak, steady = devices["rank1/cpu:0"]["growth"], devices["rank0/cpu:0"]["growth"]
    assert leak["leak"] and abs(leak["per_step"] - LEAK) <= 0.05 * LEAK
    assert len(leak["step_end"]) == WINDOW and not steady["leak"]
    (finding,) = [f for f in _alarms(capsys, runs("leak")) if f["rule"] == "PF009"]
    assert finding["subject"]["device"] == "rank1/cpu:0"
    assert abs(finding["evidence"]["growth_per_step_bytes"] - LEAK) <= 0.05 * LEAK
    assert finding["saving_ms"] is None and "bytes, not time" in finding["saving_basis"]


def test_a_rank_holding_an_extra_buffer_is_found_as_imbalance_with_its_size(runs, capsys):
    document = _document(capsys, "memory", str(runs("buffer")))
    (imbalance,) = document["imbalances"]
    assert imbalance["device"] == "rank0/cpu:0"
    assert abs(imbalance["excess"] - BUFFER) <= 0.05 * BUFFER
    assert imbalance["operators"][0]["name"] == "aten::ones"
    (finding,) = [f for f in _alarms(capsys, runs("buffer")) if f["rule"] == "PF008"]
    assert abs(finding["evidence"]["freed_at_peak_bytes"] - BUFFER) <= 0.05 * BUFFER
    assert not any(d["growth"]["leak"] for d in document["devices"])


def test_the_control_has_no_memory_finding(runs, capsys):
    document = _document(capsys, "memory", str(runs("control")))
    assert document["imbalances"] == []
    assert not any(d["growth"]["leak"] for d in document["devices"])
    assert all(len(d["growth"]["step_end"]) == WINDOW for d in document["devices"])
    assert _alarms(capsys, runs("control")) == []
