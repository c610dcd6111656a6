"""benchmarks/diagnosis.py's scoring: precision, recall, ranked first and the saving's error, from findings built
here in ``rnnprof audit --json``'s shape; the targets it checks; the step time of a DDP job's own clocks."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest

from fixtures import importable_benchmarks

importable_benchmarks()
import diagnosis  # noqa: E402
from _measure import Targets  # noqa: E402
from diagnosis import CaseResult, Fault, check_targets, score  # noqa: E402

STRAGGLER = Fault("straggler", ("PF1",), "planted", (("rank", "rank1"),), related=("PA4",))
COPIES = Fault("copies", ("PF4",), "real")


def finding(rule, title, severity="warning", saving_ms=None, rank=None, device=None):
    return {"rule": rule, "severity": severity, "title": title, "saving_ms": saving_ms,
            "saving_pct": None, "saving_basis": "test", "confidence": 0.8, "evidence": {},
            "subject": {"rank": rank, "device": device, "op": None}}


def test_precision_and_recall_count_alarms_only():
    results = [
        CaseResult("planted", "planted", [finding("PF1", "rank 1 is a straggler", "error", 44.0, rank="1"),
                                          finding("PF2", "many short kernels"),  # unexpected alarm
                                          finding("PF3", "copies", "info")],  # info: not an alarm
                   (STRAGGLER,), cost_ms=40.0),
        CaseResult("control", "control", [finding("PF2", "many short kernels")]),  # an alarm on a control
        CaseResult("real", "real", [finding("PF4", "idle GPU", "info")], (COPIES,)),  # missed: only info
    ]
    result = score(results)
    assert result.true_alarms == 1 and len(result.false_alarms) == 2
    assert result.precision == pytest.approx(1 / 3)
    assert (result.matched, result.expected) == (1, 2) and result.recall == 0.5
    assert result.control_alarms == [("control", "PF2: many short kernels")]
    assert result.missed == [("real", "copies")]
    (planted,) = result.faults
    assert planted.found and planted.first and planted.saving_ms == 44.0 and planted.cost_ms == 40.0
    assert planted.error == pytest.approx(0.1) and planted.saving_ok


def test_a_fault_found_below_the_first_finding_is_not_ranked_first_and_its_own_saving_is_scored():
    results = [CaseResult("p", "planted", [finding("PF2", "many short kernels", "error", 40.0),
                                           finding("PF1", "rank1 straggles", "info", saving_ms=41.0, rank="rank1"),
                                           finding("PF1", "rank1 arrives last at every collective", saving_ms=50.0,
                                                   rank="rank1")], (STRAGGLER,), cost_ms=40.0)]
    (fault,) = score(results).faults
    assert fault.found and not fault.first
    assert fault.saving_ms == 50.0 and fault.error == pytest.approx(0.25)  # the matching alarm's, not the info's


def test_a_fault_no_alarm_matches_has_no_saving():
    results = [CaseResult("p", "planted", [finding("PF2", "many short kernels", "error", 40.0)], (STRAGGLER,),
                          cost_ms=40.0)]
    (fault,) = score(results).faults
    assert not fault.found and not fault.first and fault.saving_ms is None and not fault.saving_ok


@pytest.mark.parametrize("saving, ok", [(56.0, True), (24.0, True), (57.0, False), (23.0, False), (None, False)])
def test_the_saving_must_be_within_40_percent_of_the_measured_cost(saving, ok):
    results = [CaseResult("p", "planted", [finding("PF1", "straggler", saving_ms=saving, rank="1")], (STRAGGLER,),
                          cost_ms=40.0)]
    (fault,) = score(results).faults
    assert fault.first and fault.saving_ok is ok


@pytest.mark.parametrize("saving, cost, noise, ok", [
    (3.0, 0.5, 4.0, True),  # a fault that costs nothing measurable here, estimated within the noise
    (6.0, 0.5, 4.0, False),  # claimed far beyond the noise
    (45.0, 40.0, 30.0, True), (75.0, 40.0, 30.0, False),  # a wide noise widens the tolerance, up to the noise
    (2.0, -1.0, 1.0, False)])
def test_a_cost_within_the_noise_is_met_by_an_estimate_within_the_noise(saving, cost, noise, ok):
    results = [CaseResult("p", "planted", [finding("PF1", "straggler", saving_ms=saving, rank="1")], (STRAGGLER,),
                          cost_ms=cost, noise_ms=noise)]
    (fault,) = score(results).faults
    assert fault.saving_ok is ok


@pytest.mark.parametrize("subject, matches", [
    (dict(rank="rank1"), True), (dict(rank="1"), True), (dict(rank=1), True), (dict(device="rank1/gpu:1"), True),
    (dict(rank="rank0"), False), (dict(rank="11"), False), (dict(), False), (dict(device="gpu:1"), False)])
def test_a_fault_with_a_subject_matches_that_rank_only(subject, matches):
    assert STRAGGLER.matches(finding("PF1", "straggler rank", **subject)) is matches


def test_a_fault_matches_its_rule_ids_not_the_titles():
    updates = Fault("u", ("PA003",), "")
    assert updates.matches(finding("PA003", "Updates on one device"))
    assert updates.matches(finding("PA003-update-on-one-device", "Updates on one device"))  # placement-audit's id
    assert not updates.matches(finding("PA0031", "PA003: updates on one device"))  # another id, whatever the title
    assert not updates.matches(finding("PF004", "updates on one device"))
    assert not COPIES.matches(finding("PF9", "Many Device-to-device COPIES"))


def test_a_rule_with_evidence_conditions_matches_only_findings_with_that_evidence():
    loader = Fault("loader", ("PF005", "PF001 cause=input"), "")
    late = finding("PF001", "rank1 arrives last")
    assert not loader.matches(late)
    assert loader.matches({**late, "evidence": {"cause": "input"}})
    assert not loader.matches({**late, "evidence": {"cause": "compute"}})
    assert loader.matches(finding("PF005", "rank1 waits for its next batch"))


def test_a_related_alarm_on_the_faults_subject_is_neither_false_nor_a_diagnosis():
    results = [CaseResult("p", "planted", [finding("PA4", "rank1 is busy 22x as long", "warning", 20.0, rank="1"),
                                           finding("PF1", "rank1 arrives last", "error", 40.0, rank="1"),
                                           finding("PA4", "rank0 is busy", "warning", 5.0, rank="0")],
                          (STRAGGLER,), cost_ms=40.0)]
    result = score(results)
    assert result.true_alarms == 2 and result.false_alarms == [("p", "PA4: rank0 is busy")]  # the wrong rank
    (fault,) = result.faults
    assert fault.found and not fault.first and fault.saving_ms == 40.0  # the related alarm is not the diagnosis


def _targets(results) -> tuple[int, list]:
    targets = Targets()
    check_targets(score(results), targets)
    return targets.report(), targets.rows


def test_targets_are_met_only_when_controls_are_quiet_faults_first_and_savings_close(capsys):
    good = [CaseResult("p", "planted", [finding("PF1", "straggler", "error", 45.0, rank="1")], (STRAGGLER,),
                       cost_ms=40.0),
            CaseResult("c", "control", [finding("PF2", "short kernels", "info")])]
    assert _targets(good)[0] == 0
    loud = [good[0], CaseResult("c", "control", [finding("PF2", "short kernels", "warning")])]
    code, rows = _targets(loud)
    assert code == 1 and [ok for _, _, ok in rows] == [False, True, True]
    far = [CaseResult("p", "planted", [finding("PF1", "straggler", "error", 80.0, rank="1")], (STRAGGLER,),
                      cost_ms=40.0), good[1]]
    code, rows = _targets(far)
    assert code == 1 and [ok for _, _, ok in rows] == [True, True, False] and "+100%" in rows[2][1]
    second = [CaseResult("p", "planted", [finding("PF2", "short kernels", "error", 40.0),
                                          finding("PF1", "straggler", "error", 40.0, rank="1")], (STRAGGLER,),
                         cost_ms=40.0), good[1]]
    code, rows = _targets(second)
    assert code == 1 and [ok for _, _, ok in rows] == [True, False, True]  # its own estimate is right
    capsys.readouterr()


def test_a_ddp_jobs_step_time_is_its_slowest_ranks_median_after_the_capture(tmp_path):
    # the warm-up, traced and export steps (9 s each here) are left out
    assert diagnosis.CLOCK_FIRST >= diagnosis.DDP_SKIP + diagnosis.DDP_TRACED + 1
    assert diagnosis.DDP_STEPS - diagnosis.CLOCK_FIRST >= 9
    skipped = [9] * diagnosis.CLOCK_FIRST
    (tmp_path / "rank0.json").write_text(json.dumps({"rank": 0, "step_s": skipped + [0.010, 0.012, 0.011]}))
    (tmp_path / "rank1.json").write_text(json.dumps({"rank": 1, "step_s": skipped + [0.020, 0.030, 0.050]}))
    assert diagnosis.ddp_step_ms(tmp_path) == pytest.approx((30.0, 10.0))  # rank 1: median 30 ms, MAD 10 ms
    # by the training threads' CPU time: rank 0's is the larger here
    (tmp_path / "rank0.json").write_text(json.dumps({"rank": 0, "step_s": skipped + [0.010, 0.012, 0.011],
                                                     "thread_cpu_s": skipped + [0.009, 0.007, 0.008]}))
    (tmp_path / "rank1.json").write_text(json.dumps({"rank": 1, "step_s": skipped + [0.020, 0.030, 0.050],
                                                     "thread_cpu_s": skipped + [0.004, 0.005, 0.006]}))
    assert diagnosis.ddp_step_ms(tmp_path, key="thread_cpu_s") == pytest.approx((8.0, 1.0))
    assert diagnosis.ddp_step_ms(tmp_path) == pytest.approx((30.0, 10.0))
    (tmp_path / "rank1.json").write_text(json.dumps({"rank": 1, "step_s": skipped}))
    with pytest.raises(diagnosis.CaseError):
        diagnosis.ddp_step_ms(tmp_path)


def test_every_case_names_real_inputs_and_the_audits_own_rule_ids():
    from rnnprof.analyzers.audit.registry import RULES

    ids = {rule.id for rule in RULES}
    faults = [*diagnosis.TF_PLANTS.values(), *(fault for _, ddp, _ in diagnosis.DDP.values() for fault in ddp)]
    for real in diagnosis.REAL.values():
        assert all(p.is_file() for p in real.paths) and real.reason
        assert {spec.split()[0] for spec in real.judged} <= ids
        faults.extend(real.expected)
    for fault in faults:
        assert fault.rules and fault.reason
        assert {spec.split()[0] for spec in (*fault.rules, *fault.related)} <= ids, fault.name
    for script, _, _ in diagnosis.DDP.values():
        assert (diagnosis.JOBS / script).is_file()
    from rnnprof.models.config import PLANTS

    assert set(diagnosis.TF_PLANTS) == set(PLANTS)


def test_a_configurations_step_time_is_the_median_of_its_runs_and_its_noise_covers_their_spread():
    assert diagnosis.combine([(30.0, 0.5), (58.0, 0.9), (31.0, 0.4)]) == (31.0, 14.0)  # half of 58 - 30
    assert diagnosis.combine([(40.0, 3.0), (41.0, 2.0), (40.5, 4.0)]) == (40.5, 3.0)  # the runs' median MAD
    assert diagnosis.combine([(12.0, 1.0)]) == (12.0, 1.0)


def test_a_real_trace_known_for_some_rules_scores_only_their_alarms():
    results = [CaseResult("copies pair", "real", [finding("PF2", "exposed communication"),  # not judged
                                                  finding("PF4", "DtoD copies", "warning")], (COPIES,),
                          judged=("PF4",)),
               CaseResult("copies control", "real", [finding("PF4", "HtoD copies"), finding("PF3", "idle")],
                          judged=("PF4",))]
    result = score(results)
    assert result.true_alarms == 1 and result.false_alarms == [("copies control", "PF4: HtoD copies")]
    assert result.not_judged == [("copies pair", "PF2: exposed communication"), ("copies control", "PF3: idle")]
    assert (result.matched, result.expected) == (1, 1)


def test_the_output_says_why_a_fault_with_known_limits_misses_its_target(capsys):
    threads = Fault("one thread", ("PA6",), "planted", limits="the bound assumes free cores")
    far = [CaseResult("threads", "planted", [finding("PA6", "towers took turns", "error", 30.0)], (threads,),
                      cost_ms=10.0, noise_ms=1.0)]
    diagnosis.print_results(far, score(far))
    out = capsys.readouterr().out
    assert "saving off: threads: one thread; why: the bound assumes free cores" in out
    close = [CaseResult("threads", "planted", [finding("PA6", "towers took turns", "error", 11.0)], (threads,),
                        cost_ms=10.0, noise_ms=1.0)]
    diagnosis.print_results(close, score(close))
    assert "why:" not in capsys.readouterr().out


def test_rounds_agree_when_half_their_range_is_within_a_tenth_of_their_median():
    assert diagnosis.settled([(40.0, 1.0), (41.0, 2.0), (38.0, 1.0)])  # half of 3 ms, 40 ms: 3.75 %
    assert diagnosis.settled([(40.0, 1.0), (48.0, 9.0), (40.5, 1.0)])  # half of 8 ms, within 4.05 ms
    assert not diagnosis.settled([(37.2, 1.8), (55.4, 6.0), (40.0, 0.4)])  # a round of this machine: 9.1 ms of 40
    assert not diagnosis.settled([(34.0, 2.3), (25.4, 0.6), (39.1, 1.2)])  # 6.85 ms of 34.0
    assert diagnosis.settled([(12.0, 1.0)])


def test_a_run_that_takes_turns_is_timed_on_its_own_steps_and_the_swapped_ones_apart(tmp_path):
    """Blocks of 4 after the capture, the first swapped; the first and the last step of each block are left out
    (50 and 70, 90 and 80, 60 and 75): swapped 10, 12, 14 and 16 ms, its own 40 and 42."""
    skipped = [9] * diagnosis.CLOCK_FIRST
    steps = [0.050, 0.010, 0.012, 0.070, 0.090, 0.040, 0.042, 0.080, 0.060, 0.014, 0.016, 0.075]
    marks = [False] * diagnosis.CLOCK_FIRST + [True] * 4 + [False] * 4 + [True] * 4
    (tmp_path / "rank0.json").write_text(json.dumps({"rank": 0, "step_s": skipped + steps, "swapped": marks}))
    assert diagnosis.ddp_step_ms(tmp_path) == pytest.approx((41.0, 1.0))
    assert diagnosis.ddp_step_ms(tmp_path, swapped=True) == pytest.approx((13.0, 2.0))
    (tmp_path / "rank0.json").write_text(json.dumps({"rank": 0, "step_s": skipped + steps}))
    with pytest.raises(diagnosis.CaseError, match="swapped"):
        diagnosis.ddp_step_ms(tmp_path, swapped=True)


def test_the_jobs_swap_their_configuration_in_every_other_block_from_the_step_asked():
    sys.path.insert(0, str(diagnosis.JOBS))
    import _ddp

    args = _ddp.arguments("job", swap=True).parse_args(["--swap-from", "5", "--swap-block", "2"])
    assert [_ddp.swapped(args, step) for step in range(11)] == [False] * 5 + [True, True, False, False, True, True]
    assert [_ddp.faulty(args, step) for step in range(11)] == [True] * 5 + [False, False, True, True, False, False]
    control = _ddp.arguments("job", swap=True).parse_args(["--control", "--swap-from", "5", "--swap-block", "2"])
    assert [_ddp.faulty(control, step) for step in range(11)] == [False] * 5 + [True, True, False, False, True, True]
    plain = _ddp.arguments("job").parse_args([])
    assert all(_ddp.faulty(plain, step) and not _ddp.swapped(plain, step) for step in range(30))
    with pytest.raises(SystemExit):
        _ddp.arguments("job").parse_args(["--swap-from", "5"])


def test_a_fault_in_a_run_that_took_turns_costs_its_own_steps_less_those_with_it_removed(tmp_path):
    """Blocks of 4, the first swapped (the fault removed): 10, 12, 14 and 16 ms without it (median 13, MAD 2), 40
    and 42 ms with it (median 41, MAD 1), each block's first and last step left out: 28 ms, noise 3 ms."""
    skipped = [9] * diagnosis.CLOCK_FIRST
    steps = [0.050, 0.010, 0.012, 0.070, 0.090, 0.040, 0.042, 0.080, 0.060, 0.014, 0.016, 0.075]
    marks = [False] * diagnosis.CLOCK_FIRST + [True] * 4 + [False] * 4 + [True] * 4
    (tmp_path / "rank0.json").write_text(json.dumps({"rank": 0, "step_s": skipped + steps, "swapped": marks}))
    own, removed = diagnosis.ddp_step_ms(tmp_path), diagnosis.ddp_step_ms(tmp_path, swapped=True)
    assert diagnosis.cost_in_run(own, removed) == pytest.approx((28.0, 3.0))


def test_the_fault_table_judges_the_saving_against_the_cost_in_the_run_and_shows_the_one_between_runs(capsys):
    fault = diagnosis.Fault("extra operator", ("PF001",), "rank 1 runs an extra operator", (("rank", "rank1"),))
    finding = {"rule": "PF001", "title": "rank1 arrives last", "severity": "warning", "saving_ms": 19.0,
               "subject": {"rank": "rank1"}}
    case = diagnosis.CaseResult("extra-op", "planted", [finding], (fault,), cost_ms=21.0, noise_ms=2.0,
                                runs_cost_ms=12.6)
    result = diagnosis.score([case])
    (scored,) = result.faults
    assert scored.saving_ok and scored.cost_ms == 21.0 and scored.runs_cost_ms == 12.6  # +51 % against 12.6
    diagnosis.print_results([case], result)
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("extra-op ")]
    # case, found, first, cost, noise, saving, error, met by, runs
    assert rows[-1] == ["extra-op", "yes", "yes", "21.0", "2.0", "19.0", "-10%", "40%", "12.6"]


def test_a_fault_among_several_has_no_met_by_of_its_own():
    """Two faults at once: neither one's own cost is measured (the replay judges their fixes together)."""
    results = [CaseResult("two", "planted", [finding("PF1", "straggler", saving_ms=40.0, rank="1")],
                          (STRAGGLER, dataclasses.replace(STRAGGLER, name="rank 0", subject=(("rank", "0"),))),
                          cost_ms=40.0)]
    assert [f.met_by for f in score(results).faults] == ["-", "-"]
