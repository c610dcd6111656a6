"""The diagnosis benchmark's DDP jobs (benchmarks/diagnosis_jobs/) under rnnprof trace and torchrun: each fault
does what it claims, by the job's own clock and in the raw Kineto files, and ``--control`` removes it."""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import diagnosis  # noqa: E402

pytestmark = pytest.mark.slow
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _events(run: Path, rank: int) -> list[dict]:
    with gzip.open(run / "torch" / f"rank{rank}.json.gz", "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def _steps(events: list[dict]) -> int:
    return sum(1 for e in events if e["name"].startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    cache = {}

    def run(name: str, control: bool):
        if (name, control) not in cache:
            cache[name, control] = diagnosis.run_ddp(name, control, tmp_path_factory.mktemp(name))
        return cache[name, control]

    return run


def test_a_straggler_rank_costs_every_rank_its_sleep(runs):
    run, (step, _) = runs("straggler-rank", False)
    control, (control_step, _) = runs("straggler-rank", True)
    assert step - control_step >= 25.0  # 40 ms of sleep; the all-reduce makes rank 0 wait for it
    for rank in (0, 1):  # both ranks' clocks see it
        steps = json.loads((run.parent / "clock" / f"rank{rank}.json").read_text())["step_s"][diagnosis.CLOCK_FIRST:]
        assert statistics.median(steps) >= 0.040
    assert _steps(_events(run, 0)) == diagnosis.DDP_TRACED


def test_a_slow_loader_is_slow_on_one_rank_only(runs):
    run, (step, _) = runs("slow-loader", False)
    control, (control_step, _) = runs("slow-loader", True)
    loads = {rank: [e["dur"] for e in _events(run, rank) if e["name"] == LOADER] for rank in (0, 1)}
    assert len(loads[1]) == diagnosis.DDP_TRACED
    assert min(loads[1]) >= 40_000 and statistics.median(loads[0]) < 5_000  # µs: 40 ms of loading on rank 1
    quiet = [e["dur"] for rank in (0, 1) for e in _events(control, rank) if e["name"] == LOADER]
    assert quiet and max(quiet) < 5_000
    assert step - control_step >= 25.0


def test_tiny_ops_run_an_operator_per_token_and_the_control_one_lookup(runs):
    run, (step, _) = runs("tiny-ops", False)
    control, (control_step, _) = runs("tiny-ops", True)
    tokens = 16 * 32  # --batch 16 --length 32 (DDP["tiny-ops"])
    assert diagnosis.DDP["tiny-ops"][2] == ["--batch", "16", "--length", "32"]
    for rank in (0, 1):
        events = _events(run, rank)
        selects = sum(e["name"] == "aten::select" for e in events)
        assert selects >= tokens * _steps(events)
        assert sum(e["name"] == "aten::embedding" for e in events) == 0
        quiet = _events(control, rank)
        assert sum(e["name"] == "aten::select" for e in quiet) < 10 * _steps(quiet)
        assert sum(e["name"] == "aten::embedding" for e in quiet) == _steps(quiet)
    assert step > control_step
