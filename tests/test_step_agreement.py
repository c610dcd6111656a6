"""One step time and one measure of work across the commands: on the two gloo ranks, comm, whatif,
critical-path, audit, diff and report give each step the time derived here from the raw trace (the longest
rank's step window: from the step's first operator, binned by the rank's ProfilerStep#N ranges, to the next
step's first), and where a command measures a step its own way it prints that measure beside the step time
and says why they differ; PA004's per-device work is comm's time outside communication."""

from __future__ import annotations

import gzip
import html
import json
import re
import statistics

import pytest

from fixtures import FIXTURES
from rnnprof.cli import main

RANKS = [str(FIXTURES / f"torch-gloo-rank{r}.json.gz") for r in (0, 1)]


def _raw(path: str) -> list[dict]:
    return [e for e in json.loads(gzip.decompress(open(path, "rb").read()))["traceEvents"] if e.get("ph") == "X"]


def _markers(path: str) -> dict[int, dict]:
    """The rank's ProfilerStep#N ranges from its raw JSON, by step."""
    return {int(e["name"].split("#")[1]): e for e in _raw(path) if str(e["name"]).startswith("ProfilerStep#")}


def _windows(path: str) -> dict[int, tuple[float, float]]:
    """A CPU rank's step windows from its raw JSON: its operators and gloo collectives (its work), each in the
    step whose ProfilerStep#N range it starts in; a step's window from its first work to the next step's first,
    the last to the last end of any step's work."""
    marks = _markers(path)
    work = [e for e in _raw(path) if e.get("cat") == "cpu_op" or str(e["name"]).startswith("gloo:")]
    first: dict[int, float] = {}
    last = 0.0
    for e in work:
        step = next((k for k, m in marks.items() if m["ts"] <= e["ts"] < m["ts"] + m["dur"]), None)
        if step is not None:
            first[step] = min(first.get(step, e["ts"]), e["ts"])
            last = max(last, e["ts"] + e["dur"])
    steps = sorted(first)
    return {s: (first[s], first[steps[k + 1]] if k + 1 < len(steps) else last) for k, s in enumerate(steps)}


def _expected() -> dict[int, float]:
    """Each step's time from the raw files: the longest of the ranks' windows of it."""
    per_rank = [_windows(path) for path in RANKS]
    return {s: max(w[s][1] - w[s][0] for w in per_rank) for s in sorted(per_rank[0])}


def _json(capsys, *argv) -> dict:
    code = main([*argv, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


@pytest.fixture(scope="module")
def expected() -> dict[int, float]:
    steps = _expected()
    assert sorted(steps) == [2, 3]
    return steps


def test_comm_whatif_critical_path_audit_diff_give_each_step_one_time(capsys, expected):
    comm = _json(capsys, "comm", *RANKS)
    assert comm["step_time"]["basis"] == "step windows"
    assert {int(s): us for s, us in comm["step_time"]["step_us"].items()} == pytest.approx(expected)
    whatif = _json(capsys, "whatif", *RANKS, "--comm", "0.5")
    assert {s["step"]: s["step_us"] for s in whatif["steps"]} == pytest.approx(expected)
    path = _json(capsys, "critical-path", *RANKS)
    assert {int(s): us for s, us in path["step_time"]["step_us"].items()} == pytest.approx(expected)
    audit = _json(capsys, "audit", *RANKS, "--fail-on", "never")
    assert audit["noise"]["step_ms_median"] == pytest.approx(statistics.median(expected.values()) / 1000, abs=1e-3)
    # diff's headline is the loop's period by the step markers, and says so; its per-device step is the window
    diff = _json(capsys, "diff", "--a", *RANKS, "--b", *RANKS)
    assert diff["step_time"]["a"]["basis"] == "step markers"
    assert "the other commands' step time is the longest device's step window" in diff["step_time"]["a"]["detail"]
    windows = [_windows(path) for path in RANKS]
    steps = {(r["device"], r["metric"]): r["a_us_per_step"] for r in diff["time"]["rows"]}
    for rank, w in enumerate(windows):
        assert steps[(f"rank{rank}/cpu:0", "step")] == pytest.approx(statistics.mean(e - b for b, e in w.values()))


def test_a_command_measuring_a_step_its_own_way_says_why_it_differs(capsys, expected):
    """The replay measures step 2 from its first event to its last own event's end, 13.15 ms: rank 1's gloo
    thread closes its all_reduce range 2.95 ms after rank 1's window of step 2 ends (the raw trace says so); the
    critical path's step 3 starts where that range ends. Each says so, with the figure of the raw trace."""
    marker = _markers(RANKS[1])[2]
    gloo = next(e for e in _raw(RANKS[1]) if e["name"] == "gloo:all_reduce"
                and marker["ts"] <= e["ts"] < marker["ts"] + marker["dur"])
    past_ms = (gloo["ts"] + gloo["dur"] - _windows(RANKS[1])[2][1]) / 1000
    assert past_ms > 2.5
    whatif = _json(capsys, "whatif", *RANKS, "--comm", "0.5")
    measured = {s["step"]: s["measured_us"] for s in whatif["steps"]}
    assert measured[2] > 1.2 * expected[2] and measured[3] == pytest.approx(expected[3], rel=0.02)
    notes = [n for n in whatif["notes"] if n.startswith("step ")]
    assert len(notes) == 1 and notes[0].startswith(f"step 2: {measured[2] / 1000:.3f} ms by the replay's measure")
    assert f"against a step time of {expected[2] / 1000:.3f} ms" in notes[0]
    assert f"rank1/cpu:0's gloo:all_reduce ends {past_ms:.2f} ms into the next step's window" in notes[0]
    path = _json(capsys, "critical-path", *RANKS)
    notes = [n for n in path["notes"] if n.startswith("step 3")]
    assert len(notes) == 1 and f"step 2's gloo:all_reduce on rank1/cpu:0 ran {past_ms:.2f} ms into" in notes[0]


def test_the_report_gives_the_same_step_time(tmp_path, expected):
    out = tmp_path / "report.html"
    assert main(["report", *RANKS, "-o", str(out)]) == 0
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", out.read_text())).split())
    assert f"Step time {statistics.median(expected.values()) / 1000:.3f} ms (median)" in text


def test_pa004_compares_the_work_comm_measures_and_does_not_call_it_busy(capsys):
    """PA004's per-device figure is comm's per-step span less communication (a CPU rank's time outside its
    collectives), averaged over the steps; its title says so instead of calling it busy time, which comm
    counts with the communication."""
    comm = _json(capsys, "comm", *RANKS, "--per-step")
    outside = {d["device"]: statistics.mean(s["span_us"] - s["communication_us"] for s in d["steps"].values())
               for d in comm["devices"]}
    audit = _json(capsys, "audit", *RANKS, "--fail-on", "never")
    (finding,) = [f for f in audit["findings"] if f["rule"].startswith("PA004")]
    assert finding["evidence"]["work_us_per_step"] == pytest.approx(outside, abs=0.1)
    heavy, light = sorted(outside, key=outside.get, reverse=True)
    assert finding["title"].startswith(f"{heavy} spends {outside[heavy] / outside[light]:.1f}x as long as {light} "
                                       "outside communication per step")
    assert "busy" not in finding["title"]
