"""The critical path across the ranks of a real 2-rank CPU DDP (gloo) job run here under torchrun
(``tests/ddp_straggler_job.py``, 10 profiled steps).

Planted straggler: rank 1 sleeps 60 ms before each backward, outside every operator. Rank 0's all-reduce then
waits inside gloo for rank 1's; the path must cross to rank 1 through the all-reduce's join and name the sleep
as rank 1's untraced host time, measured as the script's own clock measured the sleep. Control: the same job
without the sleep; the path must not blame untraced host time beyond what the run's own steps vary by.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rnnprof.analyzers.critical_path import analyze_critical_path
from rnnprof.traces import load_events

UNTRACED = "untraced"  # the class of a host thread's time outside every traced operator
SLEEP_S = 0.060  # conftest.DDP_SLEEP_S: the captures are conftest's ddp_straggler_run and ddp_balanced_run
STEPS = list(range(2, 12))  # ProfilerStep#2..#11: the 10 active steps of the job's schedule

pytestmark = [pytest.mark.slow,
              pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")]


def _raw_steps(path: Path) -> dict[int, tuple[float, float, float]]:
    """ProfilerStep#N -> its start, its duration and the start of its first operator, in µs, from the raw JSON."""
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    steps = {int(e["name"].split("#")[1]): (float(e["ts"]), float(e["dur"])) for e in events
             if str(e.get("name", "")).startswith("ProfilerStep#")}
    ops = sorted(float(e["ts"]) for e in events if e.get("cat") == "cpu_op"
                 and not str(e.get("name", "")).startswith("ProfilerStep#"))
    return {n: (ts, dur, next((t for t in ops if t >= ts), ts)) for n, (ts, dur) in steps.items()}


def _jitter_us(periods: list[dict[int, tuple[float, float, float]]]) -> float:
    """The run's own jitter, from the raw JSON: how much a rank's step time varies over the run, and how long
    after the first rank starts a step the last starts its first operator (the step's window opens at the
    earlier rank's start, and a rank that starts later spends the difference outside every operator)."""
    spread = max(max(p[s][1] for s in STEPS) - min(p[s][1] for s in STEPS) for p in periods)
    skew = max(max(p[s][2] for p in periods) - min(p[s][0] for p in periods) for s in STEPS)
    return max(spread, skew)


@pytest.fixture(scope="module")
def straggler(ddp_straggler_run):
    out = ddp_straggler_run
    table = load_events([str(out / "rank0.json"), str(out / "rank1.json")])
    sleeps = {int(k): v for k, v in json.loads((out / "rank1-sleeps.json").read_text()).items()}
    return analyze_critical_path(table), sleeps, _jitter_us([_raw_steps(out / f"rank{r}.json") for r in (0, 1)])


@pytest.fixture(scope="module")
def balanced(ddp_balanced_run):
    out = ddp_balanced_run
    table = load_events([str(out / "rank0.json"), str(out / "rank1.json")])
    periods = [_raw_steps(out / f"rank{r}.json") for r in (0, 1)]
    return analyze_critical_path(table), periods


def test_the_path_goes_through_the_sleeping_ranks_untraced_sleep(straggler):
    report, sleeps, jitter = straggler
    assert [s.step for s in report.steps] == STEPS and set(sleeps) >= set(STEPS)
    through = []
    for step in report.steps:
        untraced = [link for link in step.links if link.event_class == UNTRACED and link.device == "rank1/cpu:0"]
        sleep = max(untraced, key=lambda link: link.dur_us, default=None)
        if sleep is None or sleep.dur_us < 0.5 * sleeps[step.step]:
            continue
        through.append(step.step)
        assert sleep.name == "untraced host time on rank1"
        # The script's clock, less any part of the sleep before the step's window (rank 1 may start its step
        # while rank 0 still finishes the previous one): the link ends where the sleep ends, or later by the time
        # the woken rank waits for a core, which the run's own jitter bounds (on 2 loaded cores, up to ~5 ms).
        in_window = min(sleeps[step.step], sleep.ts_us + sleep.dur_us - step.window_us[0])
        assert sleep.dur_us == pytest.approx(in_window, abs=max(3000, jitter)), (step.step, sleep.dur_us,
                                                                                  sleeps[step.step], jitter)
        # from there it reaches the step's end on rank 1, or on rank 0 through the all-reduce: rank 1's call hands
        # it to gloo (enqueue), whose run joins rank 0's (collective)
        after = step.links[step.links.index(sleep):]
        assert after[-1].device.startswith("rank1/") or {"enqueue", "collective"} & {link.edge for link in after}
    assert len(through) >= 9, through


def test_the_balanced_control_blames_no_untraced_host_time_beyond_the_runs_own_jitter(balanced):
    report, steps = balanced
    assert [s.step for s in report.steps] == STEPS
    jitter = _jitter_us(steps)
    for step in report.steps:
        named = [link for link in step.links if link.event_class == UNTRACED]
        assert all(link.dur_us <= jitter for link in named), (step.step, [l.dur_us for l in named], jitter)
        # nothing like the planted sleep, even summed with the few µs of Python between operators
        assert step.by_class.get(UNTRACED, 0.0) < 0.25 * SLEEP_S * 1e6, step.step
