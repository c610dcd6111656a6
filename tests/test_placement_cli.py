"""rnnprof placement-audit from the command line: fixtures, --fail-on, bad input."""

from __future__ import annotations

import collections
import functools
import gzip
import json
import statistics
import subprocess
import sys

import pytest

from rnnprof.analyzers.placement import RULES, Severity
from rnnprof.cli import main

from fixtures import FIXTURES

FIXTURE = str(FIXTURES / "tf1-timeline-gpu-loop-step0.json")


def test_gpu_timeline_alone_reports_what_it_can_and_why_not_the_rest(capsys):
    assert main(["placement-audit", FIXTURE, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    not_checked = {n["rule"].split("-")[0]: n["reason"] for n in doc["rules_not_checked"]}
    assert {"PA001", "PA002", "PA004", "PA006", "PA007"} <= set(not_checked)
    assert "graph" in not_checked["PA001"] and "manifest" in not_checked["PA006"]
    assert "PA005-avoidable-transfers" in doc["rules_checked"]
    (trip,) = [f for f in doc["findings"] if f["severity"] == "warning"]
    # gradients/Mean_grad/Prod goes to the host and floordiv comes back; the placeholder feeds do not count
    assert "gradients/Mean_grad/Prod" in trip["ops"] and "gradients/Mean_grad/floordiv" in trip["ops"]
    assert not any("Placeholder" in op for op in trip["ops"])
    assert trip["cost_us_per_step"] > 0 and trip["fix"]


def test_fail_on_warning_fails_and_prints_the_report_first(capsys):
    assert main(["placement-audit", FIXTURE, "--fail-on", "warning"]) == 1
    captured = capsys.readouterr()
    assert "PA005" in captured.out and "Not checked" in captured.out
    assert captured.err.strip().count("\n") == 0 and "at or above warning" in captured.err
    assert main(["placement-audit", FIXTURE, "--fail-on", "never"]) == 0


def test_trace_only_audit_does_not_import_tensorflow():
    code = ("import sys; from rnnprof.cli import main; rc = main(['placement-audit', %r, '--json']); "
            "print('TF' if 'tensorflow' in sys.modules else 'noTF', file=sys.stderr); sys.exit(rc)" % FIXTURE)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stderr.strip().endswith("noTF")


@pytest.mark.parametrize("content, name", [(b"", "empty.json"), (b"not a trace", "junk.txt"),
                                           (b"\x00\x01garbage", "graph.pb")])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, content, name):
    path = tmp_path / name
    path.write_bytes(content)
    assert main(["placement-audit", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err


def test_missing_path_and_bad_flag(tmp_path, capsys):
    assert main(["placement-audit", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["placement-audit", FIXTURE, "--fail-on", "sometimes"]) == 2


@pytest.mark.parametrize("width", [80, 120])
def test_table_folds_long_words_instead_of_cutting_them(width):
    import io

    from rich.console import Console

    from rnnprof.analyzers.placement import PlacementFinding, PlacementResult, Severity
    from rnnprof.reports.placement import render_table

    long_word = "colocate_gradients_with_ops=True"
    finding = PlacementFinding("PA002-replica-work-pinned", Severity.ERROR, "t", devices=("cpu:0",),
                               ops=("tower_1/projection/MatMul",), cost_us_per_step=32400.0, cost_basis="b",
                               fix=f"build the gradients with {long_word} so they follow")
    out = io.StringIO()
    render_table(PlacementResult((finding,), (), ("PA002-replica-work-pinned",)), ["run"],
                 Console(file=out, width=width, color_system=None))
    text = out.getvalue()
    assert "…" not in text and "32.40 ms" in text
    assert long_word in "".join(line.split("│")[2].strip() for line in text.splitlines() if line.count("│") > 2)


@pytest.mark.parametrize("fixture", ["tf1-timeline-cpu-loop-step0.json", "tf1-timeline-gpu-matmul.json",
                                     "kineto-sampled-rank0.json.gz", "kineto-2rank-nccl-rank0.json.gz"])
def test_every_fixture_says_what_it_checked_and_why_not_the_rest(fixture, capsys):
    assert main(["placement-audit", str(FIXTURES / fixture), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    reasons = {n["rule"]: n["reason"] for n in doc["rules_not_checked"] + doc.get("rules_not_applicable", [])}
    assert set(reasons) | set(doc["rules_checked"]) == {r.id for r in RULES}
    assert all(len(reason) > 20 for reason in reasons.values())
    if fixture.startswith("kineto"):  # a PyTorch trace: only the imbalance across devices applies
        assert doc["framework"] == "pytorch"
        assert {n["rule"] for n in doc["rules_not_applicable"]} == {r.id for r in RULES} - {"PA004-device-imbalance"}
        assert "soft placement" in reasons["PA001-soft-placement-fallback"]
    else:
        assert "framework" not in doc and "rules_not_applicable" not in doc
        assert "graph" in reasons["PA001-soft-placement-fallback"]
    assert not [f for f in doc["findings"] if f["severity"] == "error"]
    # Kineto copies do not name their tensors: never claimed as avoidable round trips
    if fixture.startswith("kineto"):
        assert not [f for f in doc["findings"] if f["severity"] == "warning"]
    if fixture.startswith("tf1-timeline-cpu"):
        assert "tower scopes" in reasons["PA003-update-on-one-device"]


SAMPLED_RANKS = [str(FIXTURES / "kineto-sampled-rank0.json.gz"), str(FIXTURES / "kineto-sampled-rank1.json.gz")]


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for lo, hi in sorted(intervals):
        if hi > end:
            total += hi - max(lo, end)
            end = hi
    return total


@functools.lru_cache(maxsize=None)
def _work_us_per_step(path: str) -> dict[int, float]:
    """From the raw Kineto JSON: per ProfilerStep#N, the union of the GPU's compute kernels (NCCL kernels,
    copies and memsets left out), each kernel in the step of the CUDA runtime call that launched it."""
    with gzip.open(path, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1]))
             for e in events if e["name"].startswith("ProfilerStep#")]

    def step_at(ts):
        return next((n for lo, hi, n in steps if lo <= ts < hi), None)

    launched_in = {e["args"]["correlation"]: step_at(e["ts"]) for e in events
                   if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    kernels: dict[int, list] = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "kernel" and not e["name"].startswith("ncclKernel"):
            step = launched_in.get(e["args"].get("correlation"))
            if step is not None:
                kernels[step].append((e["ts"], e["ts"] + e["dur"]))
    return {step: _union_length(intervals) for step, intervals in kernels.items()}


def _expected_spreads() -> list[float]:
    """(max - min) / max of the two ranks' busy time, per step."""
    rank0, rank1 = (_work_us_per_step(path) for path in SAMPLED_RANKS)
    assert set(rank0) == set(rank1) and len(rank0) >= 2
    return [(max(rank0[s], rank1[s]) - min(rank0[s], rank1[s])) / max(rank0[s], rank1[s]) for s in sorted(rank0)]


@pytest.mark.parametrize("threshold", [None, "below every step", "above every step"])
def test_imbalance_threshold_decides_pa004_on_real_ranks(capsys, threshold):
    spreads = _expected_spreads()
    percent = {None: None, "below every step": 100 * min(spreads) - 1, "above every step": 100 * max(spreads) + 1}[
        threshold]
    flags = [] if percent is None else ["--imbalance-threshold", f"{percent:.2f}"]
    assert main(["placement-audit", *SAMPLED_RANKS, "--json", *flags]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "PA004-device-imbalance" in doc["rules_checked"]
    found = [f for f in doc["findings"] if f["rule"] == "PA004-device-imbalance"]
    limit = 0.20 if percent is None else round(percent, 2) / 100
    assert bool(found) == (max(spreads) > limit)
    if found:
        evidence = found[0]["evidence"]
        assert evidence["threshold"] == pytest.approx(limit)
        assert evidence["steps_over_threshold"] == sum(s > limit for s in spreads)
        assert evidence["median_spread"] == pytest.approx(statistics.median(spreads), abs=5e-4)
        assert evidence["max_spread"] == pytest.approx(max(spreads), abs=5e-4)
        busy = [statistics.mean(_work_us_per_step(path).values()) for path in SAMPLED_RANKS]
        assert evidence["work_us_per_step"] == pytest.approx({"rank0/gpu:0": busy[0], "rank1/gpu:1": busy[1]},
                                                             abs=0.05)


@pytest.mark.parametrize("bad", ["nan", "inf", "-1", "101", "ten"])
def test_imbalance_threshold_must_be_a_percentage(capsys, bad):
    assert main(["placement-audit", *SAMPLED_RANKS, "--imbalance-threshold", bad]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--imbalance-threshold" in err and "Traceback" not in err


def test_default_imbalance_threshold_is_the_rules_own():
    from rnnprof.analyzers.placement import imbalance
    from rnnprof.commands import placement_audit

    assert placement_audit.DEFAULT_IMBALANCE_PERCENT == pytest.approx(100 * imbalance.WARNING_SPREAD)


def _run_dir(root, steps):
    from test_loaders import _write_rnnprof_run

    return _write_rnnprof_run(root, steps)


def test_several_run_directories_are_refused_in_one_line(tmp_path, capsys):
    """Two runs share node names: combining them would mix their placements, so one run is audited at a time."""
    first, second = _run_dir(tmp_path / "a", [0]), _run_dir(tmp_path / "b", [0])
    assert main(["placement-audit", str(first), str(second), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.strip().splitlines()
    assert str(first) in line and str(second) in line and "one run is audited at a time" in line
    assert main(["placement-audit", str(first), "--json"]) == 0  # each alone is fine


def test_graphdef_and_run_metadata_of_one_run_are_combined_node_by_node(tmp_path):
    """The user graph says where each node asked to run, the RunMetadata's partitions where it was put:
    combined, a node keeps both (neither file's empty field wipes the other's)."""
    from tensorboard.compat.proto import config_pb2

    from rnnprof.commands.audit_inputs import read_audit_input
    from test_graphs import CPU0, CPU1, partitions, user_graph

    graph_file = tmp_path / "graph.pb"
    graph_file.write_bytes(user_graph().SerializeToString())
    meta = config_pb2.RunMetadata()
    for p in partitions():
        meta.partition_graphs.add().CopyFrom(p)
    meta_file = tmp_path / "functions.pb"
    meta_file.write_bytes(meta.SerializeToString())
    for order in ([graph_file, meta_file], [meta_file, graph_file]):
        g = read_audit_input([str(p) for p in order]).graph
        assert (g.nodes["x"]["requested_device"], g.nodes["x"]["assigned_device"]) == ("/device:CPU:0", CPU0)
        assert (g.nodes["w"]["requested_device"], g.nodes["w"]["assigned_device"]) == ("/device:CPU:1", CPU1)
        assert g.nodes["split/_send"]["requested_device"] == ""  # only the runtime has it


UPDATES = tuple(f"update/sgd/update_shared/{v}/ResourceApplyGradientDescent"
                for v in ("decoder/layer_0/bias", "decoder/layer_0/kernel", "embedding/decoder", "embedding/encoder",
                          "encoder/layer_0/bias"))


def test_ops_that_share_scopes_are_listed_once_with_what_differs():
    from rnnprof.reports.placement import scope_folded

    assert scope_folded(list(UPDATES[:2])) == ["update/sgd/update_shared/decoder/layer_0/…/ResourceApplyGradientDescent",
                                               "  bias", "  kernel"]
    assert scope_folded(["shared/a/w", "shared/b"]) == ["shared/…", "  a/w", "  b"]
    assert scope_folded(["MatMul", "tower_1/MatMul"]) == ["MatMul", "tower_1/MatMul"]  # a name of one part: as it is
    assert scope_folded(["a/x", "b/y"]) == ["a/x", "b/y"]  # nothing shared
    assert scope_folded(["a/b/c"]) == ["a/b/c"]


@pytest.mark.parametrize("width", [80, 160])
def test_at_80_columns_the_ops_go_under_the_finding_and_no_name_is_cut(width):
    """In an ops column of its own, 80 columns left 15 characters, and each node name came out in pieces."""
    from rich.console import Console

    from rnnprof.analyzers.placement import PlacementFinding, PlacementResult, Severity
    from rnnprof.reports.placement import render_table

    finding = PlacementFinding("PA003-update-on-one-device", Severity.WARNING,
                               "all 5 variable update ops run on /job:ps/replica:0/task:0/device:CPU:0",
                               devices=("/job:ps/replica:0/task:0/device:CPU:0",), ops=UPDATES, cost_us_per_step=19.0)
    console = Console(width=width, record=True, force_terminal=False)
    render_table(PlacementResult((finding,), (), ("PA003-update-on-one-device",)), ["run"], console)
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= width
    cells = [line.split("│")[2 if width < 120 else 4].strip() for line in lines if line.count("│") >= 4]
    for part in ("decoder/layer_0/bias", "decoder/layer_0/kernel", "embedding/decoder", "embedding/encoder"):
        assert part in cells  # whole, on a line of its own
    assert "… 1 more (--json lists all)" in cells
    header = next(line for line in lines if "rule" in line and "┃" in line)
    assert ("ops" in [c.strip() for c in header.split("┃")]) == (width >= 120)  # a column of their own where wide


def _logical_towers(per_device_ops, manifest, steps=5, step_len=1000.0):
    """Two towers on cpu:0 and cpu:1 of one process: ``per_device_ops`` {device index: [(name, op type, start,
    dur)]} repeated each step; audited with ``manifest`` (a dict)."""
    from rnnprof.analyzers.placement import audit_placement
    from rnnprof.analyzers.placement.inputs import AuditInput
    from rnnprof.events import Device, EventTableBuilder, Kind
    from rnnprof.events.manifest import Manifest

    b = EventTableBuilder("test")
    for step in range(steps):
        for index, ops in per_device_ops.items():
            for name, op_type, start, dur in ops:
                b.add(step * step_len + start, dur, name, op_type, Device("cpu", index), "ops", Kind.HOST_OP, step=step)
    result = audit_placement(AuditInput(events=b.build(), manifest=Manifest.from_dict(manifest)))
    (finding,) = [f for f in result.findings if f.rule_id == "PA004-device-imbalance"]
    return finding


SHARED_CORES = {"devices": [{"name": f"/job:localhost/replica:0/task:0/device:CPU:{k}", "kind": "logical-cpu"}
                            for k in (0, 1)], "machine": {"cpu_count": 2}}
TOWER_1 = [("tower_1/MatMul", "MatMul", 0, 200), ("tower_1/Softmax", "Softmax", 200, 100)]


def test_the_same_ops_running_slower_on_logical_devices_is_contention_not_imbalance():
    """cpu:0 runs tower 0's MatMul and Softmax in 300 and 150 µs, cpu:1 tower 1's in 200 and 100, each step, and
    cpu:0 also the client's 10 µs feed: busy 460 against 300 µs (35 % spread), 150 µs of it the same ops taking
    longer. On logical devices sharing the host's cores that is contention (info); on devices of their own, a
    warning either way; extra work on cpu:0 is a warning on shared cores too."""
    slower = {0: [("_arg_tower_0/x_0_0", "_Arg", 0, 10), ("tower_0/MatMul", "MatMul", 10, 300),
                  ("tower_0/Softmax", "Softmax", 310, 150)], 1: TOWER_1}
    shared = _logical_towers(slower, SHARED_CORES)
    assert shared.severity == Severity.INFO
    assert shared.evidence["op_us_per_step"] == {"unequal_work": 0.0, "same_ops_slower": 150.0}
    assert shared.evidence["contention"] is True and shared.evidence["shared_cores"] == 2
    assert "contention" in shared.title and shared.fix.startswith("Nothing to move")
    own = _logical_towers(slower, {})  # nothing says the devices share cores
    assert own.severity == Severity.WARNING and "contention" not in own.evidence
    assert own.evidence["op_us_per_step"] == {"unequal_work": 0.0, "same_ops_slower": 150.0}
    extra = {0: [("tower_0/MatMul", "MatMul", 0, 200), ("tower_0/Softmax", "Softmax", 200, 100),
                 ("tower_1/Softmax", "Softmax", 300, 150)], 1: TOWER_1[:1]}
    more = _logical_towers(extra, SHARED_CORES)
    # cpu:0 runs the Softmax twice (100 and 150 µs), cpu:1 not at all: 2 x 125 µs of unequal work per step
    assert more.severity == Severity.WARNING and "contention" not in more.evidence
    assert more.evidence["op_us_per_step"] == {"unequal_work": 250.0, "same_ops_slower": 0.0}


def _cpu_ranks(per_rank_ops, manifest, steps=5, step_len=10_000.0):
    """Two gloo CPU ranks: ``per_rank_ops`` {rank: [(name, start, dur)]} host operators on one thread, repeated each
    step (a child inside its parent as PyTorch records it) in a ProfilerStep range to the last one's end; audited
    with ``manifest`` (a dict)."""
    from rnnprof.analyzers.placement import audit_placement
    from rnnprof.analyzers.placement.inputs import AuditInput
    from rnnprof.events import Device, EventTableBuilder, Kind
    from rnnprof.events.manifest import Manifest

    b = EventTableBuilder("test")
    cpus = tuple(Device("cpu", 0, worker=f"rank{r}") for r in sorted(per_rank_ops))
    for step in range(steps):
        for rank, ops in per_rank_ops.items():
            end = max(start + dur for _, start, dur in ops)
            b.add(step * step_len, end, f"ProfilerStep#{step}", "ProfilerStep", cpus[rank], "1", Kind.ANNOTATION,
                  step=step)
            for name, start, dur in ops:
                b.add(step * step_len + start, dur, name, name, cpus[rank], "1", Kind.HOST_OP, step=step)
    table = b.build()
    table.metadata.host_operator_devices = cpus
    result = audit_placement(AuditInput(events=table, manifest=Manifest.from_dict(manifest)))
    return [f for f in result.findings if f.rule_id == "PA004-device-imbalance"]


TORCH_ON_ONE_HOST = {"framework": "torch", "machine": {"cpu_count": 2}}


def test_ranks_sharing_a_hosts_cores_that_run_the_same_operators_slower_are_contention():
    """Each step rank 0 runs aten::linear (its aten::mm inside) in 3 ms, rank 1 the same in 6 ms: 3 ms more (the
    child, inside its parent, is not counted twice). Ranks started on one machine share its cores: contention,
    info; where nothing says where they ran, no contention is called."""
    def linear(start, dur):
        return [("aten::linear", start, dur), ("aten::mm", start + 10, dur - 20)]

    (finding,) = _cpu_ranks({0: linear(0, 3000), 1: linear(0, 6000)}, TORCH_ON_ONE_HOST)
    assert finding.severity == Severity.INFO and finding.evidence["contention"] is True
    assert finding.evidence["op_us_per_step"] == {"unequal_work": 0.0, "same_ops_slower": 3000.0}
    assert "the ranks share the host's 2 cores" in finding.title
    (elsewhere,) = _cpu_ranks({0: linear(0, 3000), 1: linear(0, 6000)}, {})
    assert "contention" not in elsewhere.evidence and "contention" not in elsewhere.title


def test_a_rank_whose_extra_time_is_a_sleep_is_no_contention(capsys):
    """tests/data/torch-two-faults: rank 1 sleeps 40 ms a step (untraced), rank 0 loads for 20 ms; rank 1's operators
    also run slower while rank 0's gloo thread waits beside them on the 2 cores, but the sleep is most of rank 1's
    extra busy time: PA004 stays a warning and says no contention."""
    assert main(["placement-audit", str(FIXTURES / "torch-two-faults" / "run"), "--json"]) == 0
    (finding,) = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["rule"] == "PA004-device-imbalance"]
    busy = finding["evidence"]["work_us_per_step"]
    split = finding["evidence"]["op_us_per_step"]
    assert finding["severity"] == "warning" and "contention" not in finding["evidence"]
    assert 0 < split["same_ops_slower"] < 0.5 * (busy["rank1/cpu:0"] - busy["rank0/cpu:0"])
