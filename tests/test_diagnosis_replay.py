"""benchmarks/diagnosis_replay.py without running a job: where the fault's marker goes in a trace, how the
predictions are judged against the targets, and the scoring of a case with two faults (benchmarks/diagnosis.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures import importable_benchmarks

importable_benchmarks()
import diagnosis  # noqa: E402
import diagnosis_replay as replay  # noqa: E402
from _measure import Targets  # noqa: E402
from diagnosis import CaseResult, Fault, score  # noqa: E402
from diagnosis_replay import Grow, Prediction, check_predictions  # noqa: E402
from rnnprof.cli import main  # noqa: E402


def test_a_fault_is_replayed_as_host_time_before_its_operator_on_its_rank(capsys):
    """The flags, and what ``whatif`` makes of them on the gloo pair: rank 1's 5 ms before its first
    ``aten::add_`` of each step, and rank 0's 2 ms (the job's own clock of it) before its first ``aten::view``,
    lengthen every step, by at most their sum (the slack of the rank that did not end the step absorbs some)."""
    flags = replay.delay_flags((Grow("rank1", "^aten::add_$", 5.0), Grow("rank0", "^aten::view$")), {"rank0": 2.0})
    assert flags == ["--delay", "rank1=5@^aten::add_$", "--delay", "rank0=2@^aten::view$"]
    data = Path(__file__).resolve().parent / "data"
    assert main(["whatif", str(data / "torch-gloo-rank0.json.gz"), str(data / "torch-gloo-rank1.json.gz"), *flags,
                 "--json"]) == 0
    for step in json.loads(capsys.readouterr().out)["steps"]:
        assert 0 < step["change_us"] <= 7000 + 1e-6, step


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


def test_a_case_with_two_faults_ranks_each_among_the_audits_top_fixes_and_judges_their_savings_together():
    a = Fault("sleeper", ("PF1",), "planted", (("rank", "rank1"),))
    b = Fault("loader", ("PF5",), "planted", (("rank", "rank0"),))
    findings = [{"rule": "PF5", "severity": "error", "title": "", "saving_ms": 20.0, "subject": {"rank": "rank0"},
                 "evidence": {"bound_ms": 25.0}},  # a saving from a replay keeps the rule's bound in evidence
                {"rule": "PF1", "severity": "error", "title": "", "saving_ms": 18.0, "subject": {"rank": "rank1"}},
                {"rule": "PA4", "severity": "warning", "title": "", "saving_ms": 9.0, "subject": {"rank": "rank1"}}]
    case = CaseResult("two", "planted", findings, (a, b), cost_ms=40.0, top_fixes=(0, 1))
    faults = score([case]).faults
    assert [f.first for f in faults] == [True, True] and not any(f.alone for f in faults)
    assert all(f.cost_ms is None for f in faults)
    assert diagnosis._savings(case) == 43.0  # the rules' bounds: 25 + 18
    targets = Targets()
    diagnosis.check_targets(score([case]), targets)
    assert "0 of 0" in targets.rows[-1][1]  # no saving judged alone
    # the symptom ranked above them (its fix not replayed): each is still among the fixes replayed together
    late = CaseResult("two", "planted", [findings[2], *findings[:2]], (a, b), cost_ms=40.0, top_fixes=(1, 2))
    assert [f.first for f in score([late]).faults] == [True, True]
    left = CaseResult("two", "planted", findings, (a, b), cost_ms=40.0, top_fixes=(0, 2))
    assert [f.first for f in score([left]).faults] == [False, True]  # the sleeper's finding is not among them
    none = CaseResult("two", "planted", findings, (a, b), cost_ms=40.0)  # no fix replayed
    assert [f.first for f in score([none]).faults] == [False, False]


def test_a_fault_hidden_behind_another_counts_among_the_top_fixes_as_the_alarm_its_bound_makes_it():
    """The loader's fix alone saves nothing while the other rank sleeps: the audit lowers it to info, keeping its
    severity by the bound (``severity_by_bound``), and replays it among its top fixes. Found and first there; an
    info finding with no such severity is not; alone in its case, an info finding is never the diagnosis."""
    a = Fault("sleeper", ("PF1",), "planted", (("rank", "rank1"),))
    b = Fault("loader", ("PF5",), "planted", (("rank", "rank0"),))
    sleeper = {"rule": "PF1", "severity": "warning", "title": "", "saving_ms": 16.0, "subject": {"rank": "rank1"}}
    hidden = {"rule": "PF5", "severity": "info", "title": "", "saving_ms": 0.0, "subject": {"rank": "rank0"},
              "evidence": {"severity_by_bound": "warning", "bound_ms": 20.0}}
    quiet = {**hidden, "evidence": {"bound_ms": 20.0}}  # info by its own figure: within the jitter
    result = score([CaseResult("two", "planted", [sleeper, hidden], (a, b), cost_ms=40.0, top_fixes=(0, 1))])
    assert [(f.found, f.first) for f in result.faults] == [(True, True), (True, True)] and not result.missed
    result = score([CaseResult("two", "planted", [sleeper, quiet], (a, b), cost_ms=40.0, top_fixes=(0, 1))])
    assert [(f.found, f.first) for f in result.faults] == [(True, True), (False, False)]
    alone = score([CaseResult("one", "planted", [hidden], (b,), cost_ms=20.0)])
    assert [(f.found, f.first) for f in alone.faults] == [(False, False)]


def test_where_the_runs_took_turns_each_prediction_is_judged_against_its_own_runs_swapped_steps():
    """Three rounds: each run's prediction against the other configuration measured in the same run (its swapped
    steps). By the medians alone (44 against 40 ms) the prediction would be 10 % off; run by run it is +10 %, 0 and
    -9.1 %, median 0. Against the other configuration's own runs (40 ms): +10 %."""
    runs = tuple((Path(f"run{k}"), clock) for k, clock in enumerate(((80.0, 1.0), (90.0, 2.0), (70.0, 3.0))))
    source = replay.Config(runs, 80.0, 5.0, swapped=((40.0, 1.0), (50.0, 1.5), (33.0, 0.5)))
    target = replay.Config((), 40.0, 4.0)
    assert replay.measured_against(source, target) == pytest.approx((40.0, 3.5))  # median of 2, 3.5 and 3.5
    p = Prediction("case", "fix", "--fix PF001", 40.0, 3.5, 44.0, (44.0, 50.0, 30.0), (40.0, 50.0, 33.0), 40.0)
    assert p.error == pytest.approx(0.0)
    assert p.runs_error == pytest.approx(0.10)
    # runs that did not take turns: the other configuration's own runs, both noises
    assert replay.measured_against(replay.Config(runs, 80.0, 5.0), target) == pytest.approx((40.0, 9.0))
    assert Prediction("case", "fix", "", 40.0, 9.0, 44.0, (44.0, 50.0, 30.0)).error == pytest.approx(0.10)


def test_the_error_as_a_share_of_the_change_leaves_the_steps_size_aside():
    """Planted runs of 80, 90 and 70 ms, their swapped steps (the fault removed) 40, 50 and 33 ms, predicted 44, 50
    and 30 ms: the errors are +4, 0 and -3 ms, of changes of 40, 40 and 37 ms: +10 %, 0 and -8.1 %, median 0; a
    round whose prediction is 6 ms off a change of 40 ms is 15 % off it, whatever the step's size."""
    p = Prediction("case", "fix", "--fix PF001", 40.0, 3.5, 44.0, (44.0, 50.0, 30.0), (40.0, 50.0, 33.0), 40.0,
                   source_per_round=(80.0, 90.0, 70.0))
    assert p.change_error == pytest.approx(0.0)
    one = Prediction("case", "fault", "x", 140.0, 1.0, 146.0, (146.0,), (140.0,), source_per_round=(100.0,))
    assert one.change_error == pytest.approx(0.15) and one.error == pytest.approx(6 / 140)
    assert Prediction("case", "fix", "", 40.0, 9.0, 44.0, (44.0,), (40.0,)).change_error is None  # no source step
