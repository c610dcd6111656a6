"""The diagnosis benchmark's DDP jobs (benchmarks/diagnosis_jobs/) under rnnprof trace and torchrun: each fault
does what it claims, by the job's own clock and in the raw Kineto files, and ``--control`` removes it."""

from __future__ import annotations

import bisect
import functools
import gzip
import json
import statistics
from pathlib import Path
from typing import Any

import msgspec
import pytest
from rich.console import Console

from fixtures import importable_benchmarks
from rnnprof.cli import main

importable_benchmarks()
import diagnosis  # noqa: E402

pytestmark = pytest.mark.slow
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


KEPT = ("name", "cat", "ts", "dur", "tid")  # what the tests read of an event


# An event of the raw file as the tests read it: its phase and ``KEPT``; the rest (args) is skipped unread, which
# takes a sixth of the time of decoding every event whole (the tiny-ops job's files: 170k events each).
_Raw = msgspec.defstruct("_Raw", [("ph", Any, None), *((key, Any, msgspec.UNSET) for key in KEPT)])


class _Document(msgspec.Struct):
    traceEvents: list[_Raw]


@functools.lru_cache(maxsize=4)  # several tests read a rank's file
def _events(run: Path, rank: int) -> tuple[dict, ...]:
    """The complete events of a rank's raw Kineto file, each with the ``KEPT`` keys it has."""
    with gzip.open(run / "torch" / f"rank{rank}.json.gz") as f:
        document = msgspec.json.decode(f.read(), type=_Document)
    return tuple({k: v for k in KEPT if (v := getattr(e, k)) is not msgspec.UNSET}
                 for e in document.traceEvents if e.ph == "X")


def _steps(events: list[dict]) -> int:
    return sum(1 for e in events if e["name"].startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation")


# The straggler's control and the slow loader's are the same balanced job: the model, batches and steps of
# _ddp.py, no rank sleeping, every batch at once; the slow loader's hands its batches over through a DataLoader with
# no worker process, whose loading the tests read in its trace. One run of it is both: conftest's
# ``diagnosis_control``, made once for the session (tests/test_memory_faults.py reads it too).
SAME_CONTROL = {"straggler-rank": "slow-loader"}
BALANCED = ("slow-loader", True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, request):
    """``runs(case, control)``: the case's run (or its control's) under rnnprof trace, and its step time by the
    job's own clock, made once for the module."""
    cache = {}

    def run(name: str, control: bool):
        if control:
            name = SAME_CONTROL.get(name, name)
        if (name, control) not in cache:
            if (name, control) == BALANCED:
                folder = request.getfixturevalue("diagnosis_control")
                cache[name, control] = (folder / "run",
                                        diagnosis.ddp_step_ms(folder / "clock", diagnosis.clock_first(name, control)))
            else:
                cache[name, control] = diagnosis.run_ddp(name, control, tmp_path_factory.mktemp(name))
        return cache[name, control]

    return run


@pytest.fixture(scope="module")
def audited():
    """``rnnprof audit --json``'s document of a run (as the benchmark's ``diagnosis.audit`` asks for it), made once
    for the tests that read it, in this process."""
    cache = {}

    def audit(run: Path) -> dict:
        if run not in cache:
            console = Console(record=True, width=10_000)
            with console.capture() as capture:
                assert main(["audit", str(run), "--json", "--fail-on", "never"], console=console) == 0
            cache[run] = json.loads(capture.get())
        return cache[run]

    return audit


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
    tokens = 32 * 64  # --batch 32 --length 64 (DDP["tiny-ops"])
    assert diagnosis.DDP["tiny-ops"][2] == ["--batch", "32", "--length", "64"]
    for rank in (0, 1):
        events = _events(run, rank)
        selects = sum(e["name"] == "aten::select" for e in events)
        assert selects >= tokens * _steps(events)
        assert sum(e["name"] == "aten::embedding" for e in events) == 0
        quiet = _events(control, rank)
        assert sum(e["name"] == "aten::select" for e in quiet) < 10 * _steps(quiet)
        assert sum(e["name"] == "aten::embedding" for e in quiet) == _steps(quiet)
        # the job's own clock of the lookup: the tokens one at a time take several times the one lookup, in CPU
        # time and in wall time, and most of the time the step's CPU time grew by
        first = diagnosis.clock_first("tiny-ops", False), diagnosis.clock_first("tiny-ops", True)
        clocks = [json.loads((r.parent / "clock" / f"rank{rank}.json").read_text()) for r in (run, control)]
        for key in ("extra_s", "extra_cpu_s"):
            one_by_one, batched = (statistics.median(c[key][f:]) for c, f in zip(clocks, first))
            assert one_by_one > 5 * batched, (key, one_by_one, batched)
        grown = [statistics.median(c["thread_cpu_s"][f:]) for c, f in zip(clocks, first)]
        lookups = [statistics.median(c["extra_cpu_s"][f:]) for c, f in zip(clocks, first)]
        assert 0.5 * (grown[0] - grown[1]) < lookups[0] - lookups[1] < 1.5 * (grown[0] - grown[1]), (grown, lookups)
    assert step > control_step


def _tiny_ms_per_step(run: Path) -> float:
    """From the raw Kineto JSON: per rank and ProfilerStep, the operators run 100+ times with a median under
    50 µs, their outermost executions on each thread and the gaps under 50 µs between them, summed; the largest
    rank's per step; the median over the steps (ms)."""
    per_step: dict[str, float] = {}
    for rank in (0, 1):
        events = _events(run, rank)
        steps = [e for e in events if e["name"].startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation"]
        cpu_ops = sorted((e for e in events if e.get("cat") == "cpu_op"), key=lambda e: e["ts"])
        starts = [e["ts"] for e in cpu_ops]
        for step in steps:
            # the cpu_ops starting in [ts, ts + dur), in the order of their start
            ops = cpu_ops[bisect.bisect_left(starts, step["ts"]):bisect.bisect_left(starts, step["ts"] + step["dur"])]
            durations: dict[str, list[float]] = {}
            for e in ops:
                durations.setdefault(e["name"], []).append(e["dur"])
            tiny = {n for n, d in durations.items() if len(d) >= 100 and statistics.median(d) < 50}
            total, reach = 0.0, {}
            for e in sorted((e for e in ops if e["name"] in tiny), key=lambda e: (e["tid"], e["ts"], -e["dur"])):
                end = reach.get(e["tid"])
                if end is not None and e["ts"] < end:
                    continue
                if end is not None and 0 < e["ts"] - end < 50:
                    total += e["ts"] - end
                total += e["dur"]
                reach[e["tid"]] = e["ts"] + e["dur"]
            per_step[step["name"]] = max(per_step.get(step["name"], 0.0), total)
    return statistics.median(per_step.values()) / 1000


def test_the_audit_measures_the_tiny_operators_as_the_raw_json_does(runs, audited):
    run, _ = runs("tiny-ops", False)
    (tiny,) = [f for f in audited(run)["findings"] if f["rule"] == "PF006"]
    assert tiny["evidence"]["tiny_ms_per_step"] == pytest.approx(_tiny_ms_per_step(run), rel=0.01)
    # the saving is that time less the profiler's cost in it: some where the job's own clock has the traced
    # steps (3 to 8) well above the untraced ones after them
    assert 0 < tiny["saving_ms"] <= tiny["evidence"]["tiny_ms_per_step"]
    clock = json.loads((run.parent / "clock" / "rank0.json").read_text())["step_s"]
    traced = slice(diagnosis.DDP_SKIP, diagnosis.DDP_SKIP + diagnosis.DDP_TRACED)
    if statistics.median(clock[traced]) > 1.2 * statistics.median(clock[diagnosis.CLOCK_FIRST:]):
        assert tiny["saving_ms"] < tiny["evidence"]["tiny_ms_per_step"], tiny["evidence"]
        assert tiny["evidence"]["profiler_ms_in_tiny_per_step"] > 0
    assert tiny["evidence"]["executions_per_step"]["aten::select"] >= 32 * 64
    control, _ = runs("tiny-ops", True)
    assert not [f for f in audited(control)["findings"] if f["rule"] == "PF006"]  # none tiny


def _lookup_ms(run: Path, control: Path) -> tuple[float, float]:
    """What the tiny operators cost a traced step by the job's own clock of its embedding lookup (ms), and its
    noise: per rank of the planted run, the lookup's wall time in the traced steps (median) less the profiler's
    part of it, which the lookup's CPU time gives (its median in the untraced steps after the capture over its
    median in the traced ones), less the one lookup of the control (its untraced steps' median); the largest
    rank's. The noise: the traced steps' MAD on that rank, scaled alike, and the control's MAD."""
    ranks = json.loads((run / "manifest.json").read_text())["ranks"]
    figures = []
    for record in ranks:
        clock = json.loads((run.parent / "clock" / f"rank{record['rank']}.json").read_text())
        traced = record["steps"]
        untraced = range(diagnosis.clock_first("tiny-ops", False), len(clock["extra_s"]))
        share = (statistics.median(clock["extra_cpu_s"][s] for s in untraced)
                 / statistics.median(clock["extra_cpu_s"][s] for s in traced))
        walls = [1000 * clock["extra_s"][s] * share for s in traced]
        figures.append(diagnosis.median_mad(walls))
    batched = [diagnosis.median_mad([1000 * v for v in json.loads(path.read_text())["extra_s"][
        diagnosis.clock_first("tiny-ops", True):]]) for path in sorted((control.parent / "clock").glob("rank*.json"))]
    (planted, planted_mad), (one, one_mad) = max(figures), max(batched)
    return planted - one, planted_mad + one_mad


# the jobs with one fault each (the benchmark alone runs the extra operator and the two faults at once)
@pytest.mark.parametrize("name", ["straggler-rank", "slow-loader", "tiny-ops"])
def test_the_audit_ranks_each_fault_first_and_raises_no_alarm_on_its_control(runs, audited, name):
    _, (fault,), _ = diagnosis.DDP[name]
    run, (step, step_mad) = runs(name, False)
    control, (control_step, control_mad) = runs(name, True)
    findings = audited(run)["findings"]
    assert findings and fault.matches(findings[0]), findings[:2]
    first = findings[0]
    if not diagnosis.is_alarm(first):
        # only the run's own jitter may keep it from a warning: on a loaded machine the traced steps of the
        # tiny-ops job vary by up to 15 ms, and a figure within 3 times that is info
        assert name == "tiny-ops" and not first["evidence"]["significance"]["significant"], first
    # the estimate is within the fault's measured cost, +-60%, or its noise where wider (the benchmark's target,
    # +-40%, is over 3 rounds)
    saving = first["saving_ms"]
    cost, noise = step - control_step, step_mad + control_mad
    if name == "tiny-ops":
        # the tiny operators are the ranks' own work, and both ranks keep the 2 cores busy: beside another test's
        # processes a step takes its work over the share of a core it gets, which changes from one second to the
        # next (the planted and the control run are a minute apart; their steps' difference ranged from 15 to 40
        # ms of CPU). The cost is the lookup's own clock in the traced steps the saving is measured in
        cost, noise = _lookup_ms(run, control)
    assert abs(saving - cost) <= max(0.6 * cost, noise), (saving, cost, noise)
    alarms = [f for f in audited(control)["findings"] if diagnosis.is_alarm(f)]
    assert not alarms, alarms

