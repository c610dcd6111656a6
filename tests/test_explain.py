"""rnnprof explain and scale --explain: the step time of each device count split into parts, and their shares
of the gap from the ideal speedup."""

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest

from rnnprof.cli import main
from rnnprof.traces import load_events

DATA = Path(__file__).parent / "data"
PARTS = ("compute_not_scaled", "exposed_communication", "waiting", "host_overhead", "input")

COLLECTIVE_OP = re.compile(r"^(Collective(Reduce|Gather|Bcast)|Nccl\w*AllReduce|\w*AllReduce)")  # not _Send/_Recv


def assert_adds_up(document: dict) -> None:
    """The invariant of every explained sweep: for every N the parts' gaps add up to the measured gap (and the
    parts to the measured step, the lost speedups to the lost speedup) within 5%; the ideal is stated."""
    assert document["scaling"] in ("weak", "strong") and "ideal step time" in document["ideal"]
    assert document["rows"]
    for row in document["rows"]:
        gap = row["step_us"] - row["ideal_step_us"]
        parts = sum(row["gap_by_part_us"][p] for p in PARTS)
        assert abs(parts - gap) <= 0.05 * max(abs(gap), 1e-6 * row["step_us"]), row
        assert abs(row["parts"]["total_us"] - row["step_us"]) <= 0.05 * row["step_us"]
        lost = sum(row["lost_speedup_by_part"][p] for p in PARTS)
        assert abs(lost - (row["ideal_speedup"] - row["speedup"])) <= 0.05 * max(abs(row["lost_speedup"]), 1e-3)


def _explain_json(capsys, *argv) -> dict:
    code = main(["explain", *argv, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


@pytest.fixture
def kineto_sweep(tmp_path):
    """A 1-rank trace as N=1 and the gloo pair as N=2, each in its own folder."""
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    shutil.copy(DATA / "kineto-1gpu-v100.json.gz", one)
    for rank in (0, 1):
        shutil.copy(DATA / f"torch-gloo-rank{rank}.json.gz", two)
    return one, two


def _device_span_per_step_ms(path: Path) -> float:
    """From the raw JSON: first GPU event start to last GPU event end, over the ProfilerStep# count."""
    events = json.load(gzip.open(path))["traceEvents"]
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e]
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    span = max(e["ts"] + e["dur"] for e in gpu) - min(e["ts"] for e in gpu)
    return span / len(steps) / 1000.0


def test_kineto_folders_are_explained_and_add_up(kineto_sweep, capsys):
    one, two = kineto_sweep
    document = _explain_json(capsys, str(one), str(two), "--scaling", "weak")
    assert_adds_up(document)
    rows = {r["devices"]: r for r in document["rows"]}
    assert set(rows) == {1, 2}  # N from the folders' rank counts
    # N=1's step: the GPU's span over its steps, read from the raw JSON here
    assert rows[1]["step_us"] / 1000 == pytest.approx(_device_span_per_step_ms(one / "kineto-1gpu-v100.json.gz"),
                                                      rel=0.05)
    assert rows[1]["ideal_step_us"] == rows[1]["step_us"] and rows[2]["ideal_step_us"] == rows[1]["step_us"]
    assert rows[2]["ideal_speedup"] == 2
    assert "weak scaling" in document["ideal"]


def test_strong_scaling_halves_the_ideal_and_the_table_says_how_the_ideal_is_defined(kineto_sweep, capsys):
    one, two = kineto_sweep
    document = _explain_json(capsys, str(one), str(two), "--scaling", "strong")
    assert_adds_up(document)
    rows = {r["devices"]: r for r in document["rows"]}
    assert rows[2]["ideal_step_us"] == pytest.approx(rows[1]["step_us"] / 2)
    code = main(["explain", str(one), str(two), "--scaling", "strong"])
    out = capsys.readouterr().out
    assert code == 0 and "strong scaling (fixed total batch): ideal step time = T_base * base / N" in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_devices_flag_states_n_where_the_runs_do_not(kineto_sweep, capsys):
    one, two = kineto_sweep
    document = _explain_json(capsys, str(one), str(two), "--scaling", "weak", "--devices", "1,4")
    assert [r["devices"] for r in document["rows"]] == [1, 4]
    assert_adds_up(document)


@pytest.mark.parametrize("argv, message", [
    (["--devices", "1"], "--devices names 1 device count(s) for 2 run(s)"),
    ([], "state the ideal with --scaling weak"),
    (["--scaling", "weak", "--devices", "2,2"], "device count given twice"),
])
def test_bad_input_is_one_line_and_exit_2(kineto_sweep, capsys, argv, message):
    one, two = kineto_sweep
    code = main(["explain", str(one), str(two), *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_a_sweep_saved_without_explain_is_refused(tmp_path, capsys):
    (tmp_path / "sweep.json").write_text(json.dumps({"format": "rnnprof-sweep", "rows": [
        {"devices": 1, "variable_update": "replicated", "words_per_second": 1.0, "speedup": 1.0}]}))
    code = main(["explain", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "without --explain" in err


def test_lost_speedup_chart_stacks_every_part_per_device_count(kineto_sweep, capsys):
    from rnnprof.reports.charts import spec
    from rnnprof.reports.explain import lost_speedup_chart

    one, two = kineto_sweep
    document = _explain_json(capsys, str(one), str(two), "--scaling", "weak")
    data = spec(lost_speedup_chart(document))["datasets"]["lost"]
    assert len(data) == 2 * len(PARTS)
    for row in document["rows"]:
        bars = [d["lost_speedup"] for d in data if d["devices"] == row["devices"]]
        assert sum(bars) == pytest.approx(row["lost_speedup"], abs=1e-3)


# --- real sweeps (TensorFlow, logical CPU devices) -----------------------------------------------------------

SMALL = ["--model", "rnnlm", "--preset", "small", "--devices", "1,2", "--warmup", "1", "--batches", "3"]


def _scale_explain(tmp_path, capsys, name, *argv) -> dict:
    out = tmp_path / name
    code = main(["scale", *SMALL, *argv, "--explain", "--out", str(out), "--json"])
    captured = capsys.readouterr()
    return _explained_sweep(out, code, captured.out, captured.err)


def _explained_sweep(out: Path, code: int, stdout: str, stderr: str) -> dict:
    """The --json document of ``scale --explain --out OUT``, which printed ``stdout`` and ``stderr``, after the
    checks of every explained sweep."""
    assert code == 0, stderr
    document = json.loads(stdout)
    # piped, each traced configuration is a line on stderr as it starts and as it ends
    runs = [f"{r['variable_update']} x{r['devices']}, traced" for r in document["rows"]]
    started = [line for line in stderr.splitlines() if line.endswith(": started")]
    assert sorted(line.split("] ", 1)[1] for line in started) == sorted(f"{run}: started" for run in runs)
    assert [line.split("]", 1)[0] for line in started] == [f"rnnprof scale: [{k + 1}/{len(runs)}"
                                                          for k in range(len(runs))]
    assert sum(": done in " in line for line in stderr.splitlines()) == len(runs)
    assert json.loads((out / "explain.json").read_text()) == document["explain"]
    assert_adds_up(document["explain"])
    return document


@pytest.fixture(scope="module")
def modes_sweep(tmp_path_factory):
    """``scale --explain`` of replicated and parameter_server on 1 and 2 devices, once for the module: its document,
    and for each configuration, in order, the timed step times recorded when its first traced step began."""
    from contextlib import redirect_stderr, redirect_stdout
    from io import StringIO

    from rnnprof.recording import session

    seen, original = [], session.capture_after

    def recording(writer, *args, **kwargs):  # what had been timed when the first traced step began
        seen.append(list(writer.manifest["step_times"]["timed"]))
        return original(writer, *args, **kwargs)

    out, stdout, stderr = tmp_path_factory.mktemp("explain") / "modes", StringIO(), StringIO()
    with pytest.MonkeyPatch.context() as patch, redirect_stdout(stdout), redirect_stderr(stderr):
        patch.setattr(session, "capture_after", recording)
        code = main(["scale", *SMALL, "--variable-update", "replicated,parameter_server", "--explain", "--out",
                     str(out), "--json"])
    return _explained_sweep(out, code, stdout.getvalue(), stderr.getvalue()), seen


@pytest.mark.slow
def test_timed_steps_all_come_before_tracing_starts(modes_sweep):
    document, seen = modes_sweep
    assert len(seen) == len(document["rows"]) == 4
    for row, timed_before_tracing in zip(document["rows"], seen):
        assert len(timed_before_tracing) == 3
        assert row["step_seconds"] == timed_before_tracing


@pytest.mark.slow
def test_planted_softmax_is_compute_left_on_device0_and_unplanted_is_not(tmp_path, capsys):
    # a larger vocabulary: the softmax is most of the step, so pinning it shows above the noise of shared cores
    planted = _scale_explain(tmp_path, capsys, "planted", "--vocab-size", "8000", "--plant",
                             "softmax-on-device0")["explain"]
    plain = _scale_explain(tmp_path, capsys, "plain", "--vocab-size", "8000")["explain"]
    # logical CPU devices share the machine's cores: the explanation says so
    assert any("logical CPU devices sharing the same" in note for note in planted["notes"])
    p2 = next(r for r in planted["rows"] if r["devices"] == 2)
    u2 = next(r for r in plain["rows"] if r["devices"] == 2)
    # planted: the step is bound by cpu:0, whose compute above the devices' mean is a large part of the step
    assert p2["bounding_devices"].count("cpu:0") > len(p2["bounding_devices"]) / 2
    assert p2["parts"]["left_on_one_device_us"] > 0.15 * p2["step_us"]
    # unplanted: no device holds much more compute than the other
    assert u2["parts"]["left_on_one_device_us"] < 0.05 * u2["step_us"]
    assert p2["parts"]["left_on_one_device_us"] > 2 * u2["parts"]["left_on_one_device_us"]
    # the gap from the ideal: the 1-device baseline is timed apart on shared cores; where a gap stands out of
    # the timed steps' jitter, the planted sweep puts most of it in compute that did not scale, and the
    # unplanted one puts little on one device; where it does not, the explanation says its split is no verdict
    for row, explained in ((p2, planted), (u2, plain)):
        if not row["gap_significance"]["significant"]:
            assert any("N=2: the gap from the ideal" in n and "no verdict" in n for n in explained["notes"])
    # cpu:0 is named as bounding the step by its compute above the mean, a share of the same run's step; a
    # share of the compute that did not scale is not judged: that grows with whatever slowed the 2-device run
    # and not its baseline, timed apart (once 39.7 of 79.5 ms beside another test's TensorFlow run)
    # Where tracing changed the 2-device step as much as its gap (the cores shared with other work at different
    # moments), no cause is ranked and no device named, and the note says why; the planted compute on cpu:0 is
    # still measured above (left on one device, bounding most steps)
    assert u2["bound_by"] is None
    if p2["causes_ranked"]:
        assert p2["bound_by"] == "cpu:0"
    else:
        assert p2["bound_by"] is None and any("N=2: tracing made the step" in n and "no cause is ranked" in n
                                              for n in planted["notes"])
    if p2["gap_significance"]["significant"]:
        assert p2["gap_share_by_part"]["compute_not_scaled"] > 0.5
    if u2["gap_significance"]["significant"]:
        assert u2["parts"]["left_on_one_device_us"] < 0.25 * u2["gap_us"]  # measured 2-11 %


@pytest.mark.slow
def test_replicated_and_parameter_server_are_explained_side_by_side(modes_sweep):
    document, _ = modes_sweep
    explained = document["explain"]
    modes = {r["mode"] for r in explained["rows"]}
    assert modes == {"replicated", "parameter_server"}
    rows = {(r["mode"], r["devices"]): r for r in explained["rows"]}
    # replicated exchanges gradients with collective all-reduce ops on the devices, and explain finds time in
    # them (exposed, or waiting for the other device); parameter_server averages them on the CPU, with no
    # collective at all. (The two modes' times in communication are not compared: they are about 1 ms of a
    # 140 ms step, and under load the parameter server's transfers and waits grew past replicated's.)
    def in_collectives(row):
        return row["parts"]["exposed_communication_us"] + row["parts"]["waiting_us"]

    def collective_ops(row):
        table = load_events(row["source"])
        return {name for name in table.strings if COLLECTIVE_OP.match(name)}

    assert collective_ops(rows["replicated", 2]) and not collective_ops(rows["parameter_server", 2])
    assert in_collectives(rows["replicated", 2]) > 0


def test_report_of_an_explained_sweep_shows_the_lost_speedup(kineto_sweep, tmp_path, capsys):
    one, two = kineto_sweep
    explained = _explain_json(capsys, str(one), str(two), "--scaling", "weak")
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    rows = [{"devices": r["devices"], "variable_update": "replicated", "words_per_second": 1000.0 * r["speedup"],
             "speedup": r["speedup"]} for r in explained["rows"]]
    (sweep / "sweep.json").write_text(json.dumps({"format": "rnnprof-sweep", "rows": rows, "explain": explained}))
    html = tmp_path / "report.html"
    assert main(["report", str(sweep), "-o", str(html)]) == 0
    text = html.read_text()
    assert "Why the speedup falls short of linear" in text and "lost speedup (ideal - measured)" in text
    assert explained["ideal"] in text


def _comm(*devices):
    """A CommReport of one step: per device (compute, communication, overlap, memcpy, busy), window 0..150 µs
    (or 0..100 µs for a lone device)."""
    from rnnprof.analyzers.comm_result import Breakdown, CommReport, DeviceComm
    from rnnprof.events import Device

    end = 100.0 if len(devices) == 1 else 150.0
    rows = []
    for k, (compute, comm, overlap, memcpy, busy, *first_comm) in enumerate(devices):
        b = Breakdown(start_us=0.0, end_us=end, busy_us=busy, compute_us=compute, communication_us=comm,
                      memcpy_us=memcpy, memset_us=0.0, overlap_us=overlap, events=3,
                      first_comm_us=first_comm[0] if first_comm else None)
        rows.append(DeviceComm(device=Device("cpu", k), total=b, steps={0: b}))
    return CommReport(devices=tuple(rows), stragglers=(), steps=(0,), extra_patterns=(), comm_event_names=())


def test_parts_by_hand():
    from rnnprof.analyzers.explain import ExplainInput, explain_sweep

    one = ExplainInput(devices=1, comm=_comm((80.0, 0.0, 0.0, 10.0, 90.0)))
    two = ExplainInput(devices=2, comm=_comm((110.0, 30.0, 0.0, 0.0, 140.0), (70.0, 30.0, 0.0, 0.0, 100.0)))
    weak = explain_sweep([two, one], "weak")
    row = {r.devices: r for r in weak.rows}[2]
    # the busiest device (cpu:0) bounds the step: 110 compute (ideal 80; the mean 90), 30 comm, 10 idle
    assert row.bounding_devices == ("cpu:0",)
    assert row.step_us == 150 and row.ideal_step_us == 100
    assert row.parts.compute_not_scaled == pytest.approx(30) and row.parts.left_on_one_device == pytest.approx(20)
    assert row.gap_us == pytest.approx({"compute_not_scaled": 30, "exposed_communication": 30, "waiting": 0,
                                        "host_overhead": 0, "input": -10})
    assert row.speedup == pytest.approx(2 * 100 / 150)
    # cpu:0 holds 20 of the 150 µs step above the mean (13 %, at least LEFT_BOUNDS_SHARE): it bounds the step
    assert row.bound_by == "cpu:0" and row.as_dict()["bound_by"] == "cpu:0"
    # 10 of 150 µs above the mean (7 %): too little to say so
    small = {r.devices: r for r in explain_sweep(
        [one, ExplainInput(2, _comm((100.0, 40.0, 0.0, 0.0, 140.0), (80.0, 40.0, 0.0, 0.0, 120.0)))],
        "weak").rows}[2]
    assert small.parts.left_on_one_device == pytest.approx(10) and small.bound_by is None
    strong = {r.devices: r for r in explain_sweep([one, two], "strong").rows}[2]
    assert strong.ideal_step_us == 50
    assert strong.gap_us == pytest.approx({"compute_not_scaled": 70, "exposed_communication": 30, "waiting": 0,
                                           "host_overhead": 5, "input": -5})
    # the timed step time scales every part by the same factor
    timed = {r.devices: r for r in explain_sweep([one, ExplainInput(2, two.comm, timed_step_us=300.0)],
                                                 "weak").rows}[2]
    assert timed.parts.exposed_communication == pytest.approx(60) and timed.gap_total_us == 200


def test_a_gap_within_the_timed_steps_jitter_is_said_to_be_no_verdict():
    from rnnprof.analyzers.explain import ExplainInput, explain_sweep

    comm_one = _comm((80.0, 0.0, 0.0, 10.0, 90.0))
    comm_two = _comm((110.0, 30.0, 0.0, 0.0, 140.0), (70.0, 30.0, 0.0, 0.0, 100.0))
    base = ExplainInput(1, comm_one, timed_step_us=100.0, timed_steps_us=(60.0, 100.0, 140.0))  # jitter ~59 µs

    def row(steps):
        two = ExplainInput(2, comm_two, timed_step_us=sum(steps) / len(steps), timed_steps_us=steps)
        report = explain_sweep([base, two], "weak")
        return {r.devices: r for r in report.rows}[2], report.notes

    noisy, notes = row((90.0, 150.0, 210.0))  # a 50 µs gap; its own steps' robust spread is 1.4826 x 60 µs
    assert not noisy.gap_significance.significant and noisy.gap_significance.threshold_us == pytest.approx(
        3 * 1.4826 * 60.0)
    assert any("N=2: the gap from the ideal" in n and "no verdict" in n for n in notes)
    clear, notes = row((398.0, 400.0, 402.0))  # 300 µs above the ideal: more than 3 x the base's 1.4826 x 40 µs
    assert clear.gap_significance.threshold_us == pytest.approx(3 * 1.4826 * 40.0)
    assert clear.gap_significance.significant and clear.as_dict()["gap_significance"]["significant"] is True
    assert not any("no verdict" in n for n in notes)
    untimed = explain_sweep([base, ExplainInput(2, comm_two, timed_step_us=150.0)], "weak")
    assert {r.devices: r for r in untimed.rows}[2].gap_significance is None  # no timed steps recorded


@pytest.mark.parametrize("argv, message", [
    (["--trace-steps", "3"], "--trace-steps applies with --explain"),
    (["--explain", "--trainer", "rnnprof,distribute"], "does not combine with --trainer"),
])
def test_scale_explain_flags_are_refused_before_training(tmp_path, capsys, argv, message):
    code = main(["scale", *SMALL, "--out", str(tmp_path / "sweep"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "sweep").exists()


@pytest.mark.slow
def test_torch_ddp_sweep_is_explained_with_n_from_the_world_size(tmp_path, capsys):
    # the small preset's batches through a smaller LSTM and vocabulary: what is checked is N and the step's figure
    document = _scale_explain(tmp_path, capsys, "torch", "--framework", "torch", "--layers", "1", "--units", "16",
                              "--vocab-size", "60")
    rows = {r["devices"]: r for r in document["explain"]["rows"]}
    assert set(rows) == {1, 2}
    assert any("processes sharing the same" in note for note in document["explain"]["notes"])
    manifest = json.loads((tmp_path / "torch" / "runs" / "replicated-2dev" / "manifest.json").read_text())
    assert manifest["world_size"] == 2 and len(manifest["ranks"]) == 2
    # the explained step is the sweep's own timed figure: total time of the timed steps / their number
    row = next(r for r in document["rows"] if r["devices"] == 2)
    assert rows[2]["step_us"] == pytest.approx(1e6 * sum(row["step_seconds"]) / len(row["step_seconds"]), rel=1e-6)


@pytest.mark.slow
def test_grpc_cluster_sweep_is_explained_with_n_from_the_workers(tmp_path, capsys):
    out = tmp_path / "cluster"
    code = main(["scale", "--model", "rnnlm", "--preset", "small", "--devices", "1", "--workers", "1,2",
                 "--warmup", "1", "--batches", "3", "--explain", "--out", str(out), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    explained = json.loads(captured.out)["explain"]
    assert_adds_up(explained)
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["replicated-1x1dev", "replicated-2x1dev"]
    assert [r["devices"] for r in explained["rows"]] == [1, 2]


def test_time_in_collectives_before_the_last_device_starts_is_waiting():
    from rnnprof.analyzers.explain import ExplainInput, explain_sweep

    one = ExplainInput(devices=1, comm=_comm((80.0, 0.0, 0.0, 10.0, 90.0)))
    # cpu:0 (busiest) enters its collectives at 100 µs, cpu:1 at 112 µs: 12 of cpu:0's 30 µs of exposed
    # communication wait for cpu:1
    two = ExplainInput(devices=2, comm=_comm((110.0, 30.0, 0.0, 0.0, 140.0, 100.0), (70.0, 30.0, 0.0, 0.0, 100.0, 112.0)))
    row = {r.devices: r for r in explain_sweep([one, two], "weak").rows}[2]
    assert row.parts.waiting == pytest.approx(12) and row.parts.exposed_communication == pytest.approx(18)
    assert row.parts.input == 0 and row.parts.total == pytest.approx(150)


def test_a_path_that_does_not_exist_is_one_line(tmp_path, capsys):
    code = main(["explain", str(tmp_path / "nowhere"), "--scaling", "weak"])
    err = capsys.readouterr().err
    assert code == 2 and "nowhere: does not exist" in err and len(err.strip().splitlines()) == 1


def _comm_ms(end_ms: float, *devices):
    """``_comm`` in milliseconds, over a window 0..``end_ms``."""
    from rnnprof.analyzers.comm_result import Breakdown, CommReport, DeviceComm
    from rnnprof.events import Device

    rows = []
    for k, (compute, comm, overlap, memcpy, busy) in enumerate(devices):
        b = Breakdown(start_us=0.0, end_us=end_ms * 1000, busy_us=busy * 1000, compute_us=compute * 1000,
                      communication_us=comm * 1000, memcpy_us=memcpy * 1000, memset_us=0.0,
                      overlap_us=overlap * 1000, events=3)
        rows.append(DeviceComm(device=Device("cpu", k), total=b, steps={0: b}))
    return CommReport(devices=tuple(rows), stragglers=(), steps=(0,), extra_patterns=(), comm_event_names=())


def _explain_table(report) -> str:
    from io import StringIO

    from rich.console import Console

    from rnnprof.reports.explain import render_table

    out = StringIO()
    render_table(report, Console(file=out, width=100, color_system=None))
    return out.getvalue()


def test_a_part_below_its_ideal_is_time_taken_off_not_a_share():
    """N=2's bounding device computes 60 ms against the 80 ms ideal (weak scaling): compute scaled better than
    ideal, 20 ms off; communication adds 60 ms and input 10 ms. The parts that added time are shares of the 70 ms
    they added (86 % and 14 %, adding up to 100 %), the compute is -20.0 ms and named, and no share passes 100 %
    or goes below 0 (as -40 % and 120 % of the 50 ms gap would)."""
    from rnnprof.analyzers.explain import ExplainInput, explain_sweep

    one = ExplainInput(devices=1, comm=_comm_ms(100, (80, 0, 0, 10, 90)))
    two = ExplainInput(devices=2, comm=_comm_ms(150, (60, 60, 0, 20, 140), (60, 60, 0, 20, 140)))
    report = explain_sweep([one, two], "weak")
    row = {r.devices: r for r in report.rows}[2]
    assert row.gap_total_us == pytest.approx(50_000)
    assert row.gap_us["compute_not_scaled"] == pytest.approx(-20_000)
    assert row.causes_ranked
    assert row.added_share("exposed_communication") == pytest.approx(60 / 70)
    assert row.added_share("input") == pytest.approx(10 / 70)
    assert row.added_share("compute_not_scaled") is None
    assert sum(row.added_share(p) or 0 for p in PARTS) == pytest.approx(1.0)
    text = _explain_table(report)
    n2 = next(line for line in text.splitlines() if line.split()[:1] == ["2"])
    assert n2.split()[5:] == ["-20.0ms", "86%", "0%", "0%", "14%"]
    assert "N=2: compute scaled better than ideal, 20.0 ms per step off the step time" in text
    assert not re.search(r"-\d+%|\d{3,}%", n2)


def test_a_step_tracing_changed_more_than_the_gap_ranks_no_cause():
    """scale --explain on rnnlm small, 2 CPU devices: the traced steps took 133.9 ms against 34.6 ms timed. The
    traced shares applied to the timed step gave 'not scaled -192%' and 'host, launch 289%' under 'they add up
    to 100%'. Here the same: 150 ms traced, 34.6 ms timed, a 9.6 ms gap from the 25 ms base."""
    from rnnprof.analyzers.explain import ExplainInput, explain_sweep

    one = ExplainInput(devices=1, comm=_comm_ms(100, (80, 0, 0, 10, 90)), timed_step_us=25_000)
    two = ExplainInput(devices=2, comm=_comm_ms(150, (20, 10, 0, 0, 30), (20, 10, 0, 0, 30)),
                       timed_step_us=34_600)
    report = explain_sweep([one, two], "weak")
    row = {r.devices: r for r in report.rows}[2]
    assert row.gap_total_us == pytest.approx(9_600)
    assert row.traced_change_us == pytest.approx(150_000 - 34_600)
    assert not row.causes_ranked and row.bound_by is None
    assert all(row.added_share(p) is None for p in PARTS)
    assert row.as_dict()["causes_ranked"] is False
    note = next(n for n in report.notes if n.startswith("N=2: tracing made the step"))
    assert "4.3x as long (150.0 ms traced against 34.6 ms timed)" in note and "no cause is ranked" in note
    assert "9.6 ms gap" in note
    text = _explain_table(report)
    n2 = next(line for line in text.splitlines() if line.split()[:1] == ["2"])
    assert n2.split()[5:] == ["-"] * 5
    assert "%" not in n2
