"""benchmarks/diagnosis_replay.py without running a job: where the fault's marker goes in a trace, how the
predictions are judged against the targets, and the scoring of a case with two faults (benchmarks/diagnosis.py)."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import diagnosis  # noqa: E402
import diagnosis_replay as replay  # noqa: E402
from _measure import Targets  # noqa: E402
from diagnosis import CaseResult, Fault, score  # noqa: E402
from diagnosis_replay import Grow, Prediction, check_predictions  # noqa: E402


def op(name, ts, dur, tid=1):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def test_a_marker_ends_where_the_first_matching_operator_of_each_step_starts_on_its_thread():
    events = [op("ProfilerStep#3", 100.0, 50.0), op("aten::mm", 101.0, 4.0), op("Optimizer.zero_grad#SGD", 120.0, 2.0),
              op("Optimizer.zero_grad#SGD", 130.0, 2.0),  # a second one in the step: no marker
              op("ProfilerStep#4", 150.0, 50.0), op("aten::mm", 151.0, 10.0),
              op("Optimizer.zero_grad#SGD", 161.15, 1.0),  # 0.15 µs after the last operator: too close for one
              op("ProfilerStep#5", 200.0, 50.0), op("Optimizer.zero_grad#SGD", 210.0, 1.0, tid=2)]
    markers = replay._markers(events, replay.ZERO_GRAD, "planted::rank1")
    assert [(m["ts"], m["dur"], m["tid"]) for m in markers] == [(pytest.approx(119.9), 0.1, 1),
                                                                (pytest.approx(209.9), 0.1, 2)]
    assert all(m["name"] == "planted::rank1" and m["cat"] == "cpu_op" and m["pid"] == 7 for m in markers)


def test_a_planted_copy_holds_the_markers_and_scales_them_to_the_faults_cost(tmp_path):
    run = tmp_path / "run"
    (run / "torch").mkdir(parents=True)
    for rank in (0, 1):
        with gzip.open(run / "torch" / f"rank{rank}.json.gz", "wt") as f:
            json.dump({"traceEvents": [op("ProfilerStep#1", 0.0, 90.0), op("aten::add", 5.0, 1.0),
                                       op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 10.0, 3.0),
                                       op("Optimizer.zero_grad#SGD.zero_grad", 50.0, 2.0)]}, f)
    flags = replay.plant(run, tmp_path / "copy", (Grow("rank1", replay.ZERO_GRAD, 40.0),
                                                  Grow("rank0", replay.LOADING)), {"rank0": 12.5})
    assert flags == ["--scale", "planted::rank1=400000", "--scale", "planted::rank0=125000"]  # 40 ms, 12.5 ms
    with gzip.open(tmp_path / "copy" / "torch" / "rank0.json.gz", "rt") as f:
        (marker,) = [e for e in json.load(f)["traceEvents"] if e["name"].startswith("planted::")]
    assert marker["name"] == "planted::rank0" and marker["ts"] == pytest.approx(9.9)
    with gzip.open(run / "torch" / "rank1.json.gz", "rt") as f:  # the control itself is left as it was
        assert len(json.load(f)["traceEvents"]) == 4


def prediction(error, noise=0.0, combined=False):
    return Prediction("case", "fix", "--fix PF001", 10.0, noise * 10.0, 10.0 * (1 + error), combined=combined)


@pytest.mark.parametrize("errors, median_ok, each_ok", [
    ([0.01, -0.04, 0.05, 0.08], True, True),
    ([0.06, -0.07, 0.02], False, True),  # median 6 %
    ([0.01, 0.02, -0.12], True, False),  # one beyond 10 %
])
def test_the_replay_targets_are_the_median_and_each_error(errors, median_ok, each_ok):
    targets = Targets()
    check_predictions([prediction(e) for e in errors], targets)
    assert [ok for _, _, ok in targets.rows] == [median_ok, each_ok]


def test_an_error_within_its_noise_meets_the_each_target_not_the_median_and_a_failed_replay_misses():
    targets = Targets()
    check_predictions([prediction(0.3, noise=0.35), prediction(0.0),
                       Prediction("case", "fault", "x", 10.0, 0.0, None, failure="exit 2")], targets)
    (_, median, median_ok), (_, each, each_ok) = targets.rows
    assert median_ok is False and "30.00 %" in median  # the median counts the error itself
    assert each_ok is False and "2 of 3" in each  # the failed replay only


def test_two_faults_fixed_at_once_are_judged_against_the_control():
    targets = Targets()
    check_predictions([prediction(0.02), prediction(-0.15, combined=True)], targets)
    assert targets.rows[-1][2] is False and "-15.0%" in targets.rows[-1][1]


def test_a_case_with_two_faults_ranks_each_within_its_first_findings_and_judges_their_savings_together():
    a = Fault("sleeper", ("PF1",), "planted", (("rank", "rank1"),))
    b = Fault("loader", ("PF5",), "planted", (("rank", "rank0"),))
    findings = [{"rule": "PF5", "severity": "error", "title": "", "saving_ms": 20.0, "subject": {"rank": "rank0"},
                 "evidence": {"bound_ms": 25.0}},  # a saving from a replay keeps the rule's bound in evidence
                {"rule": "PF1", "severity": "error", "title": "", "saving_ms": 18.0, "subject": {"rank": "rank1"}},
                {"rule": "PA4", "severity": "warning", "title": "", "saving_ms": 9.0, "subject": {"rank": "rank1"}}]
    case = CaseResult("two", "planted", findings, (a, b), cost_ms=40.0)
    faults = score([case]).faults
    assert [f.first for f in faults] == [True, True] and not any(f.alone for f in faults)
    assert all(f.cost_ms is None for f in faults)
    assert diagnosis._savings(case) == 43.0  # the rules' bounds: 25 + 18
    targets = Targets()
    diagnosis.check_targets(score([case]), targets)
    assert "0 of 0" in targets.rows[-1][1]  # no saving judged alone
    late = CaseResult("two", "planted", [findings[2], *findings[:2]], (a, b), cost_ms=40.0)
    assert [f.first for f in score([late]).faults] == [False, True]  # third: not among the first two
