"""rnnprof whatif on a real 2-rank CPU DDP (gloo) job run here under torchrun (``tests/ddp_straggler_job.py``,
10 profiled steps, the captures shared with test_critical_path_ddp through conftest).

Planted straggler: rank 1 sleeps 60 ms before each backward, outside every operator; rank 0 waits for it at the
gradient all-reduce. Replaying the fix (rank 1's untraced host time at rank 0's, ``--fix PF001``) must take
out what the script's own clock says the sleep took, step by step, and predict the control's step (the same job
without the sleep, by its own clock) within 10 %, or within the control's own step-to-step spread where that is
wider (on a loaded 2-core machine the control's steps vary by more than 10 %). On the control the same fix must
change the step by no more than that spread.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from rnnprof.analyzers.replay import TOLERANCE_PCT, whatif
from rnnprof.analyzers.replay.fixes import fix_changes
from rnnprof.traces import load_events

STEPS = list(range(2, 12))  # ProfilerStep#2..#11

pytestmark = [pytest.mark.slow,
              pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")]


def _clock(out: Path) -> list[float]:
    """Each profiled step's time by the script's own clock (µs): the slower rank's, as the step waits for it."""
    ranks = [{int(k): v for k, v in json.loads((out / f"rank{r}-steps.json").read_text()).items()} for r in (0, 1)]
    return [max(r[s] for r in ranks) for s in STEPS]


def _spread(values: list[float]) -> float:
    """A run's own step-to-step noise: the larger of its median absolute deviation and half its range."""
    median = statistics.median(values)
    return max(statistics.median(abs(v - median) for v in values), (max(values) - min(values)) / 2)


def _fixed(out: Path):
    table = load_events([str(out / "rank0.json"), str(out / "rank1.json")])
    return whatif(table, fix_changes("PF001:rank1", table))


def test_the_fix_takes_out_the_sleep_the_scripts_clock_measured(ddp_straggler_run):
    report = _fixed(ddp_straggler_run)
    sleeps = {int(k): v for k, v in json.loads((ddp_straggler_run / "rank1-sleeps.json").read_text()).items()}
    assert [s.step for s in report.steps] == STEPS
    errors = []
    for step in report.steps:
        assert abs(step.replayed_us - step.measured_us) <= TOLERANCE_PCT / 100 * step.measured_us or step.reasons
        saving = step.measured_us - step.predicted_us
        errors.append((saving - sleeps[step.step]) / sleeps[step.step])
    assert abs(statistics.median(errors)) <= 0.10, errors
    # a step in which the other rank lost a time slice at the same place keeps part of the gap: most steps do not
    assert sum(abs(e) <= 0.20 for e in errors) >= 7, errors
    # the wait it made rank 0 do at the all-reduce vanishes
    median = sorted(report.steps, key=lambda s: s.predicted_us)[len(STEPS) // 2]
    waits = {w.rank: w for w in median.waits}
    assert waits["rank0"].measured_us > 0.5 * sleeps[median.step] > waits["rank0"].predicted_us


def test_the_fixed_planted_run_predicts_the_controls_step(ddp_straggler_run, ddp_balanced_run):
    predicted = _fixed(ddp_straggler_run).median("predicted_us")
    control = _clock(ddp_balanced_run)
    measured = statistics.median(control)
    allowed = max(0.10 * measured, _spread(control))
    assert abs(predicted - measured) <= allowed, (predicted, measured, allowed, control)
    # and far from the planted run's own step: the fix is what moved it
    assert statistics.median(_clock(ddp_straggler_run)) - predicted > 0.8 * 60_000


def test_on_the_balanced_control_the_fix_changes_the_step_by_no_more_than_its_jitter(ddp_balanced_run):
    report = _fixed(ddp_balanced_run)
    control = _clock(ddp_balanced_run)
    assert abs(report.median("predicted_us") - report.median("measured_us")) <= _spread(control)
    for step in report.steps:
        assert abs(step.replayed_us - step.measured_us) <= TOLERANCE_PCT / 100 * step.measured_us or step.reasons


def test_audit_takes_the_stragglers_saving_from_the_replay_of_its_fix(ddp_straggler_run, capsys):
    from rnnprof.cli import main

    paths = [str(ddp_straggler_run / "rank0.json"), str(ddp_straggler_run / "rank1.json")]
    assert main(["audit", *paths, "--json", "--fail-on", "never"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (finding,) = [f for f in doc["findings"] if f["rule"] == "PF001"]
    sleeps = json.loads((ddp_straggler_run / "rank1-sleeps.json").read_text())
    slept_ms = statistics.median(sleeps[str(s)] for s in STEPS) / 1000
    assert finding["saving_basis"].startswith("replay of its fix") and finding["subject"]["rank"] == "rank1"
    assert finding["saving_ms"] == pytest.approx(slept_ms, rel=0.10)
    assert any(n.startswith("replay: fixing PF001 rank1") for n in doc["notes"])
