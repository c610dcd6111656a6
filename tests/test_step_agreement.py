"""One step time and one measure of work across the commands: on the two gloo ranks, comm, whatif,
critical-path, audit, diff and report give each step the time the raw trace's ProfilerStep#N ranges give it
(the longest rank's duration), and where a command measures a step its own way it prints that measure beside
the step time and says why they differ; PA004's per-device work is comm's time outside communication."""

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
    return json.loads(gzip.decompress(open(path, "rb").read()))["traceEvents"]


def _markers(path: str) -> dict[int, dict]:
    """The rank's ProfilerStep#N ranges from its raw JSON, by step."""
    return {int(e["name"].split("#")[1]): e for e in _raw(path)
            if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")}


def _expected() -> dict[int, float]:
    """Each step's time from the raw files: its ProfilerStep#N duration, the longest rank's."""
    per_rank = [_markers(path) for path in RANKS]
    return {s: max(m[s]["dur"] for m in per_rank) for s in sorted(per_rank[0])}


def _json(capsys, *argv) -> dict:
    code = main([*argv, "--json"])
    out = capsys.readouterr()
    assert code in (0, 1), out.err  # audit exits 1 at an error finding
    return json.loads(out.out)


@pytest.fixture(scope="module")
def expected() -> dict[int, float]:
    steps = _expected()
    assert steps == pytest.approx({2: 10195.895, 3: 7860.896})  # the files as tests/data's README records them
    return steps


def test_comm_whatif_critical_path_audit_diff_give_each_step_one_time(capsys, expected):
    comm = _json(capsys, "comm", *RANKS)
    assert comm["step_time"]["basis"] == "step markers"
    assert {int(s): us for s, us in comm["step_time"]["step_us"].items()} == pytest.approx(expected)

    whatif = _json(capsys, "whatif", *RANKS, "--comm", "0.5")
    assert {s["step"]: s["step_us"] for s in whatif["steps"]} == pytest.approx(expected)
    path = _json(capsys, "critical-path", *RANKS)
    assert {int(s): us for s, us in path["step_time"]["step_us"].items()} == pytest.approx(expected)

    audit = _json(capsys, "audit", *RANKS, "--fail-on", "never")
    assert audit["noise"]["step_ms_median"] == pytest.approx(statistics.median(expected.values()) / 1000, abs=1e-3)
    diff = _json(capsys, "diff", "--a", *RANKS, "--b", *RANKS)
    assert diff["step_time"]["a"]["us_per_step"] == pytest.approx(statistics.mean(expected.values()))


def test_a_command_measuring_a_step_its_own_way_says_why_it_differs(capsys, expected):
    """The replay measures step 2 from its first event to its last own event's end, 13.15 ms: rank 1's gloo
    thread closes its all_reduce range 3.04 ms after rank 1's ProfilerStep#2 ends (the raw trace says so); the
    critical path's step 3 starts where that range ends. Each says so, with the figure of the raw trace."""
    rank1 = _raw(RANKS[1])
    marker = _markers(RANKS[1])[2]
    gloo = next(e for e in rank1 if e.get("name") == "gloo:all_reduce" and marker["ts"] <= e["ts"] < marker["ts"]
                + marker["dur"])
    past_ms = (gloo["ts"] + gloo["dur"] - marker["ts"] - marker["dur"]) / 1000
    assert past_ms > 2.5
    whatif = _json(capsys, "whatif", *RANKS, "--comm", "0.5")
    measured = {s["step"]: s["measured_us"] for s in whatif["steps"]}
    assert measured[2] > 1.2 * expected[2] and measured[3] == pytest.approx(expected[3], rel=0.02)
    notes = [n for n in whatif["notes"] if n.startswith("step ")]
    assert len(notes) == 1 and notes[0].startswith(f"step 2: {measured[2] / 1000:.3f} ms by the replay's measure")
    assert f"rank1/cpu:0's gloo:all_reduce ends {past_ms:.2f} ms after the step's marker" in notes[0]
    path = _json(capsys, "critical-path", *RANKS)
    notes = [n for n in path["notes"] if n.startswith("step 3")]
    assert len(notes) == 1 and f"step 2's gloo:all_reduce on rank1/cpu:0 ran {past_ms:.2f} ms past" in notes[0]


def test_the_report_gives_the_same_step_time(tmp_path, expected):
    out = tmp_path / "report.html"
    assert main(["report", *RANKS, "-o", str(out)]) == 0
    text = html.unescape(re.sub(r"<[^>]+>", " ", out.read_text()))
    median_ms = statistics.median(expected.values()) / 1000
    assert f"Step time {median_ms:.3f} ms (median)" in " ".join(text.split())


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
