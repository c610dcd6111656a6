"""Step selection (--steps, --skip-first, --drop-last) on comm, count-ops and placement-audit."""

import gzip
import json

import numpy as np
import pytest

from rnnprof.analyzers.steps import StepSelection, StepSelectionError, chosen_steps, parse_range
from rnnprof.cli import main

from fixtures import FIXTURES

NCCL = FIXTURES / "kineto-2rank-nccl-rank0.json.gz"
TF_GPU = FIXTURES / "tf1-timeline-gpu-loop-step0.json"
STEPS = np.array([1009, 1010, 1011, 1012, 1013, 1014])


@pytest.mark.parametrize("selection,expected", [
    (StepSelection(), [1009, 1010, 1011, 1012, 1013, 1014]),
    (StepSelection(first=1010, last=1012), [1010, 1011, 1012]),
    (StepSelection(first=1012), [1012, 1013, 1014]),
    (StepSelection(last=1010), [1009, 1010]),
    (StepSelection(skip_first=2), [1011, 1012, 1013, 1014]),
    (StepSelection(drop_last=True), [1009, 1010, 1011, 1012, 1013]),
    (StepSelection(first=1010, last=1013, skip_first=1, drop_last=True), [1011, 1012]),
    (StepSelection(first=1000, last=1009), [1009]),
])
def test_chosen_steps(selection, expected):
    assert chosen_steps(STEPS, selection).tolist() == expected


@pytest.mark.parametrize("selection", [StepSelection(first=2000), StepSelection(skip_first=6),
                                       StepSelection(first=1014, drop_last=True), StepSelection(last=5)])
def test_a_selection_that_leaves_no_step_is_refused(selection):
    with pytest.raises(StepSelectionError, match="leaves no step"):
        chosen_steps(STEPS, selection)


def test_a_selection_on_a_trace_without_steps_is_refused():
    with pytest.raises(StepSelectionError, match="no step markers"):
        chosen_steps(np.array([], dtype=np.int32), StepSelection(drop_last=True))


@pytest.mark.parametrize("text,expected", [("1009:1013", (1009, 1013)), ("5", (5, 5)), ("5:", (5, None)),
                                           (":7", (None, 7)), (" 3 : 4 ", (3, 4))])
def test_parse_range(text, expected):
    assert parse_range(text) == expected


@pytest.mark.parametrize("text", ["a:b", "1-3", "1:2:3", "", "5:3", "1.5:2"])
def test_parse_range_refuses(text):
    with pytest.raises(StepSelectionError):
        parse_range(text)


def raw_kernels_launched_in(step: int) -> int:
    """Kernels whose cuda_runtime call starts inside ProfilerStep#<step>, counted in the JSON itself."""
    events = json.load(gzip.open(NCCL))["traceEvents"]
    (span,) = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == f"ProfilerStep#{step}"]
    calls = {e["args"]["correlation"] for e in events if e.get("cat") == "cuda_runtime"
             and span[0] <= e["ts"] < span[1] and "correlation" in e.get("args", {})}
    return sum(1 for e in events if e.get("cat") == "kernel" and e["args"].get("correlation") in calls)


def test_gpu_work_belongs_to_the_step_that_launched_it(capsys):
    assert main(["count-ops", str(NCCL), "--steps", "6:6", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kernels"]["steps"] == [6]
    (gpu,) = [d for d in doc["kernels"]["devices"] if d["device"] == "rank0/gpu:0"]
    assert gpu["gpu_kernels"] == raw_kernels_launched_in(6)
    assert gpu["outside_steps"] == 0


def test_comm_table_names_the_selected_steps(capsys):
    assert main(["comm", str(NCCL), "--skip-first", "1"]) == 0
    out = capsys.readouterr().out
    assert "steps 5 to 6 (--skip-first 1)" in out
    assert "idle time by cause" in out and "stream:7" in out


@pytest.mark.parametrize("command", ["comm", "count-ops", "placement-audit"])
@pytest.mark.parametrize("flags,message", [
    (["--steps", "x:y"], "is not a step range"),
    (["--steps", "7:4"], "FIRST is after LAST"),
    (["--steps", "100:200"], "leaves no step"),
    (["--skip-first", "3"], "leaves no step"),
    (["--skip-first", "-1"], "at least 0"),
])
def test_bad_selection_is_one_line_exit_2(capsys, command, flags, message):
    assert main([command, str(NCCL), *flags]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in captured.err


@pytest.mark.parametrize("command", ["comm", "count-ops"])
def test_selection_on_a_trace_without_step_markers_is_one_line_exit_2(capsys, command):
    assert main([command, str(TF_GPU), "--drop-last"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "no step markers" in lines[0]


def test_placement_audit_audits_only_the_selected_steps(capsys):
    """PA004 (the rule that applies to PyTorch ranks) measures the selected steps only: the sampled ranks
    hold ProfilerStep#551 and #552 (read from the raw JSON by the fixture's own step markers)."""
    ranks = [str(FIXTURES / f"kineto-sampled-rank{r}.json.gz") for r in (0, 1)]

    def imbalance(*flags):
        assert main(["placement-audit", *ranks, "--json", "--fail-on", "never", "--imbalance-threshold", "1",
                     *flags]) == 0
        doc = json.loads(capsys.readouterr().out)
        (finding,) = [f for f in doc["findings"] if f["rule"] == "PA004-device-imbalance"]
        return finding["evidence"]

    assert imbalance()["steps_traced"] == 2
    assert imbalance("--steps", "552")["steps_traced"] == 1
    assert imbalance("--drop-last")["steps_traced"] == 1
    assert imbalance("--drop-last")["work_us_per_step"] != imbalance()["work_us_per_step"]



# -- diff, critical-path and report ------------------------------------------------------------------------------

SAMPLED = [FIXTURES / "kineto-sampled-rank0.json.gz", FIXTURES / "kineto-sampled-rank1.json.gz"]


def raw_steps(path) -> list[int]:
    """The ProfilerStep numbers of a Kineto file, read from its JSON."""
    events = json.load(gzip.open(path))["traceEvents"]
    return sorted(int(e["name"].split("#")[1]) for e in events
                  if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#"))


def test_diff_selects_each_sides_steps_on_its_own_numbers(capsys):
    assert main(["diff", str(NCCL), str(SAMPLED[0]), "--skip-first", "1", "--json"]) == 0
    time = json.loads(capsys.readouterr().out)["time"]
    assert time["steps_a"] == raw_steps(NCCL)[1:] and time["steps_b"] == raw_steps(SAMPLED[0])[1:]
    assert main(["diff", str(NCCL), str(NCCL), "--steps", "6:6", "--drop-last", "--json"]) == 2
    assert "leaves no step" in capsys.readouterr().err


@pytest.mark.parametrize("flags,expected", [(["--skip-first", "1"], lambda s: s[1:]),
                                            (["--drop-last"], lambda s: s[:-1]),
                                            (["--steps", "552:552"], lambda s: [x for x in s if x == 552])])
def test_critical_path_takes_only_the_selected_steps(capsys, flags, expected):
    assert main(["critical-path", *map(str, SAMPLED), "--json", *flags]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [s["step"] for s in doc["steps"]] == expected(raw_steps(SAMPLED[0]))


def test_critical_path_step_outside_the_selection_is_one_line_exit_2(capsys):
    first, last = raw_steps(SAMPLED[0])[0], raw_steps(SAMPLED[0])[-1]
    assert main(["critical-path", str(SAMPLED[0]), "--steps", f"{last}:{last}", "--step", str(first)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"has no step {first}" in lines[0]


def test_report_shows_only_the_selected_steps(tmp_path, capsys):
    import re

    out = tmp_path / "r.html"
    assert main(["report", str(NCCL), "-o", str(out), "--steps", "5:6"]) == 0
    page = out.read_text()
    specs = dict(re.findall(r'<script type="application/json" id="(spec-\d+)">(.*?)</script>', page, re.S))
    charts = {name: json.loads(specs[spec_id]) for name, spec_id in
              re.findall(r'<div class="chart" data-chart="([\w-]+)" data-spec="(spec-\d+)">', page)}
    drawn = {row["step"] for row in charts["step-breakdown"]["datasets"]["step_breakdown"]}
    assert drawn == {s for s in raw_steps(NCCL) if 5 <= s <= 6}
    assert "steps selected by --steps 5:6: 5, 6" in page


def test_report_selection_on_a_trace_without_step_markers_is_one_line_exit_2(tmp_path, capsys):
    assert main(["report", str(TF_GPU), "-o", str(tmp_path / "r.html"), "--drop-last"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "no step markers" in lines[0]


def test_step_windows_never_overlap_and_skip_untraced_steps():
    from rnnprof.analyzers.steps import step_windows

    # device 0: steps 1, 2 back to back, step 2's first kernel starts while step 1's last still runs (the host ran
    # ahead); then step 5 (steps 3 and 4 not traced) long after. device 1: step 1 only.
    device = np.array([0, 0, 0, 0, 0, 1])
    step = np.array([1, 1, 2, 2, 5, 1])
    ts = np.array([0.0, 10.0, 15.0, 30.0, 100.0, 3.0])
    end = np.array([8.0, 20.0, 25.0, 40.0, 110.0, 4.0])
    w = step_windows(device, step, ts, end)
    rows = [(int(d), int(k), float(a), float(b)) for d, k, a, b in zip(w.device, w.step, w.start, w.end)]
    # step 1 ends where step 2 starts (15, not 20: the rest of its kernel is step 2's time); step 2, followed by
    # an untraced gap, ends with its work (40), not at step 5's start (100)
    assert rows == [(0, 1, 0.0, 15.0), (0, 2, 15.0, 40.0), (0, 5, 100.0, 110.0), (1, 1, 3.0, 4.0)]
    starts, ends, origin, window = w.clip(device, ts, end)
    assert sorted(zip(origin.tolist(), window.tolist(), starts.tolist(), ends.tolist())) == [
        (0, 0, 0.0, 8.0), (1, 0, 10.0, 15.0), (1, 1, 15.0, 20.0), (2, 1, 15.0, 25.0), (3, 1, 30.0, 40.0),
        (4, 2, 100.0, 110.0), (5, 3, 3.0, 4.0)]
