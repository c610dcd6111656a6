"""PyTorch capture: ``TorchCapture`` in one process, and ``rnnprof trace --framework torch`` on two gloo ranks.

Expected figures are computed here from the raw Kineto JSON, not taken from rnnprof's output.
"""

import gzip
import json
import os
import re
import sys
import threading

import pytest

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning",
                                        "ignore::UserWarning")

STEP = re.compile(r"^ProfilerStep#(\d+)$")


def raw_events(path):
    with gzip.open(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def spans(events, name):
    return sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["name"] == name)


@pytest.mark.slow
def test_capture_records_exactly_the_window_with_its_phases_and_shapes(tmp_path):
    import torch

    from rnnprof.recording.torch_profiler import TorchCapture

    torch.manual_seed(0)
    model = torch.nn.Linear(16, 16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    capture = TorchCapture(tmp_path, rank=3, skip_steps=2, steps=2)
    for _ in range(6):
        with capture.phase("forward"):
            loss = model(torch.randn(4, 16)).square().sum()
        with capture.phase("backward"):
            loss.backward()
        with capture.phase("optimizer"):
            optimizer.step()
        capture.step()
    facts = capture.close()
    assert capture.close() == facts  # closing twice changes nothing
    assert facts["trace"] == "torch/rank3.json.gz" and facts["steps"] == [2, 3] and facts["steps_run"] == 6
    assert facts["backend"] is None and facts["world_size"] is None
    events = raw_events(tmp_path / facts["trace"])
    markers = {int(STEP.match(e["name"]).group(1)): (e["ts"], e["ts"] + e["dur"])
               for e in events if STEP.match(e["name"])}
    assert sorted(markers) == [2, 3]
    for phase in ("forward", "backward", "optimizer"):
        ranges = spans(events, phase)
        assert len(ranges) == 2  # one per captured step, each inside its step's marker
        assert all(any(a <= s and e <= b for a, b in markers.values()) for s, e in ranges)
    addmm = [e for e in events if e["name"] == "aten::addmm"]
    assert len(addmm) == 2 and addmm[0]["args"]["Input Dims"] == [[16], [4, 16], [16, 16], [], []]
    assert "flops" not in facts  # FLOPs come from the recorded shapes in the analysis, not from this process
    assert not list(tmp_path.glob("torch/.*"))  # no scratch file left behind


@pytest.mark.slow
def test_a_run_stopped_inside_the_window_keeps_the_steps_it_ran(tmp_path):
    import torch

    from rnnprof.recording.torch_profiler import TorchCapture

    capture = TorchCapture(tmp_path, rank=0, skip_steps=1, steps=5)
    for _ in range(3):
        torch.randn(8, 8).mm(torch.randn(8, 8))
        capture.step()
    facts = capture.close()
    assert facts["steps"] == [1, 2]
    names = {e["name"] for e in raw_events(tmp_path / facts["trace"])}
    assert {"ProfilerStep#1", "ProfilerStep#2"} <= names and "ProfilerStep#0" not in names


@pytest.mark.parametrize("skip_steps, done", [(1, 0), (2, 1)])
def test_a_run_stopped_before_its_window_writes_no_trace(tmp_path, skip_steps, done):
    import torch

    from rnnprof.recording.torch_profiler import TorchCapture

    capture = TorchCapture(tmp_path, rank=0, skip_steps=skip_steps, steps=3)
    for _ in range(done):
        torch.randn(8, 8).mm(torch.randn(8, 8))
        capture.step()
    torch.randn(8, 8).mm(torch.randn(8, 8))  # a skipped step, cut short
    facts = capture.close()
    assert facts["trace"] is None and facts["steps"] == []
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="threads have their own nice value on Linux only")
def test_the_trace_writer_thread_runs_at_nice_19_and_leaves_the_process_as_it_was():
    from rnnprof.recording.torch_profiler import background_priority

    seen = {}

    def writer():
        background_priority()
        seen["writer"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    before = os.getpriority(os.PRIO_PROCESS, os.getpid())  # the main thread's id is the process's
    thread = threading.Thread(target=writer)
    thread.start()
    thread.join()
    assert seen["writer"] == 19 and os.getpriority(os.PRIO_PROCESS, os.getpid()) == before


class _SetAfter:
    """An event that reads as set from its ``n``-th look on."""

    def __init__(self, n: int):
        self.looks, self.n = 0, n

    def is_set(self) -> bool:
        self.looks += 1
        return self.looks > self.n


def test_a_compression_stopped_between_blocks_is_finished_by_whoever_takes_over(tmp_path, monkeypatch):
    from rnnprof.recording.torch_profiler import BlockCompression

    monkeypatch.setattr(BlockCompression, "BLOCK", 1000)
    data = json.dumps({"traceEvents": [{"name": f"op{k}", "ts": k, "dur": 1} for k in range(2000)]}).encode()
    scratch, target = tmp_path / ".scratch.json", tmp_path / "rank0.json.gz"
    scratch.write_bytes(data)
    job = BlockCompression(str(scratch), target)
    assert job.run(until=_SetAfter(3)) is None  # the background thread stops after 3 blocks
    assert not job.done and not target.exists() and scratch.exists()
    assert job.run() is None  # the waiting thread does the rest
    assert job.done and not scratch.exists() and gzip.decompress(target.read_bytes()) == data
    assert len(data) > 3 * BlockCompression.BLOCK  # it was stopped part way


def test_a_compression_that_fails_says_why_and_leaves_no_scratch_file(tmp_path):
    from rnnprof.recording.torch_profiler import BlockCompression

    scratch = tmp_path / ".scratch.json"
    scratch.write_bytes(b"{}")
    (tmp_path / "taken").mkdir()  # a folder where the trace should go
    job = BlockCompression(str(scratch), tmp_path / "taken")
    error = job.run()
    assert error is not None and "taken" in str(error) and job.done and not scratch.exists()


def test_a_window_needs_a_step():
    from rnnprof.recording.torch_profiler import TorchCapture

    with pytest.raises(ValueError, match="steps >= 1"):
        TorchCapture("unused", steps=0)


# -- rnnprof trace --framework torch: one 2-rank capture of the small preset, read by every test below -------------

WARMUP, BATCHES, TRACE_STEPS = 1, 2, 2
WINDOW = [WARMUP + BATCHES + k for k in range(TRACE_STEPS)]  # steps count from 0, warm-up included
COLLECTIVE = re.compile(r"^(c10d::\w+|gloo:\w+|record_param_comms)$")
TRACE_ARGS = ["trace", "--framework", "torch", "--model", "rnnlm", "--preset", "small", "--devices", "2",
              "--warmup", str(WARMUP), "--batches", str(BATCHES), "--trace-steps", str(TRACE_STEPS)]


def run_cli(*argv, width=200):
    from io import StringIO

    from rich.console import Console

    from rnnprof.cli import main

    buffer = StringIO()
    code = main([str(a) for a in argv], console=Console(file=buffer, width=width))
    return code, buffer.getvalue()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("torch-trace") / "run"
    code, text = run_cli(*TRACE_ARGS, "--out", out)
    assert code == 0, text
    assert f"run directory: {out}" in " ".join(text.split()) and "2 rank traces" in text
    return out


@pytest.fixture(scope="module")
def manifest(run):
    return json.loads((run / "manifest.json").read_text())


def rank_traces(run):
    return [run / "torch" / f"rank{r}.json.gz" for r in range(2)]


@pytest.mark.slow
def test_one_kineto_trace_per_rank_with_step_markers_and_phase_ranges(run):
    assert sorted(p.name for p in (run / "torch").iterdir()) == [  # each with its flight recorder's window
        "rank0.flight-recorder", "rank0.json.gz", "rank1.flight-recorder", "rank1.json.gz"]
    for rank, path in enumerate(rank_traces(run)):
        with gzip.open(path, "rt") as f:
            document = json.load(f)
        info = document["distributedInfo"]
        assert (info["rank"], info["world_size"], info["backend"]) == (rank, 2, "gloo")
        events = [e for e in document["traceEvents"] if e.get("ph") == "X"]
        markers = {int(STEP.match(e["name"]).group(1)): (e["ts"], e["ts"] + e["dur"])
                   for e in events if STEP.match(e["name"])}
        assert sorted(markers) == WINDOW
        phases = {name: spans(events, name) for name in ("forward", "backward", "optimizer")}
        for step, (start, end) in markers.items():
            inside = {name: [s for s in ranges if start <= s[0] and s[1] <= end] for name, ranges in phases.items()}
            assert all(len(found) == 1 for found in inside.values()), (step, inside)
            forward, backward, optimizer = (inside[n][0] for n in ("forward", "backward", "optimizer"))
            assert forward[1] <= backward[0] and backward[1] <= optimizer[0]  # in this order, not overlapping
        # DDP all-reduces the gradients during backward: every c10d::allreduce_ lies in a backward range
        allreduces = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["name"] == "c10d::allreduce_"]
        assert len(allreduces) >= TRACE_STEPS
        assert all(any(a <= s and e <= b for a, b in phases["backward"]) for s, e in allreduces)
        assert any(e["args"].get("Input Dims") for e in events if e["name"] == "aten::mm")  # record_shapes


@pytest.mark.slow
def test_the_manifest_names_the_ranks_their_files_and_throughput(run, manifest):
    assert manifest["status"] == "complete" and manifest["framework"] == "torch"
    assert (manifest["world_size"], manifest["backend"], manifest["device_kind"]) == (2, "gloo", "cpu-processes")
    assert manifest["captured"]["kineto"] == ["torch/rank0.json.gz", "torch/rank1.json.gz"]
    assert manifest["profiled_steps"] == WINDOW and manifest["traced_steps"] == []
    config = manifest["config"]
    assert config["framework"] == "torch" and config["devices"] == 2 and config["preset"] == "small"
    words_per_rank_step = config["batch_size"] * config["src_max_len"]  # every target token of a window is a word
    assert [r["rank"] for r in manifest["ranks"]] == [0, 1]
    for rank in manifest["ranks"]:
        assert (run / rank["trace"]).is_file() and rank["steps"] == WINDOW
        assert rank["throughput"]["words"] == BATCHES * words_per_rank_step
        assert rank["throughput"]["words_per_second"] == pytest.approx(
            rank["throughput"]["words"] / rank["throughput"]["total_seconds"])
        assert "flops" not in rank and len(rank["traced_step_seconds"]) == TRACE_STEPS
    combined = manifest["throughput"]
    assert combined["words"] == 2 * BATCHES * words_per_rank_step and combined["steps"] == BATCHES
    # a step ends with its slowest rank: the run's time is at least each rank's own
    assert all(combined["total_seconds"] >= r["throughput"]["total_seconds"] - 1e-9 for r in manifest["ranks"])
    assert combined["total_seconds"] == pytest.approx(sum(manifest["step_times"]["timed"]))
    assert len(manifest["step_times"]["warmup"]) == WARMUP and len(manifest["step_times"]["timed"]) == BATCHES


@pytest.mark.skipif(not os.path.exists("/proc/thread-self/schedstat"), reason="Linux's per-thread schedstat")
def test_each_rank_records_each_steps_wait_for_a_core_of_its_training_thread_and_of_gloos_threads(manifest):
    """A 2-rank gloo job all-reduces in every step on gloo's threads (``pt_gloo_runloop``): the capture records
    their wait for a core per step beside the training thread's, as many steps, each 0 or more."""
    from rnnprof.events import names

    for rank in manifest["ranks"]:
        own, comm = rank[names.RANK_STEP_RUNQUEUE_SECONDS], rank[names.RANK_STEP_COMM_RUNQUEUE_SECONDS]
        assert len(comm) == len(own) == len(rank["step_seconds"]) == rank["steps_run"], rank
        assert min(comm) >= 0.0 and min(own) >= 0.0


@pytest.mark.skipif(not os.path.exists("/proc/thread-self/schedstat"), reason="Linux's per-thread schedstat")
def test_gloos_threads_are_found_by_name_and_read_until_they_end():
    """``CommThreadWaits`` reads the threads named as gloo names its collectives' threads, found again when the
    process's count of threads changes; a thread that ended is no longer read, another name is never read."""
    from rnnprof.recording.torch_telemetry import COMM_THREADS, TASKS, CommThreadWaits

    waits, named, ready = CommThreadWaits(), threading.Event(), threading.Event()
    before = set(waits.read())  # a gloo group made in this process by another test, if any

    def thread(name):
        with open(f"{TASKS}/{threading.get_native_id()}/comm", "w") as f:
            f.write(name)
        ready.set()
        named.wait()

    threads = [threading.Thread(target=thread, args=(name,)) for name in (*COMM_THREADS, "pt_tcpstore_uv")]
    for t in threads:
        ready.clear()
        t.start()
        ready.wait()
    try:
        found, gloo = waits.read(), str(threads[0].native_id)
        assert set(found) - before == {gloo} and found[gloo] >= 0.0, found
    finally:
        named.set()
        for t in threads:
            t.join()
    assert gloo not in waits.read()


HTA_SCRIPT = """
import json, re, sys, warnings
warnings.simplefilter("ignore")
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)
symbols = analysis.t.symbol_table.get_sym_table()
found = {}
for rank, frame in analysis.t.traces.items():
    names = frame["name"].map(lambda code: symbols[code])
    steps = sorted(int(n.split("#")[1]) for n in set(names) if n.startswith("ProfilerStep#"))
    found[int(rank)] = {"steps": steps, "collectives": int(names.str.match(sys.argv[2]).sum())}
print(json.dumps(found))
"""


@pytest.mark.slow
def test_holistictraceanalysis_parses_the_rank_traces(run):
    import subprocess
    import sys

    # HTA parses ranks in a fork pool: in a fresh interpreter (see test_torch_gloo)
    done = subprocess.run([sys.executable, "-c", HTA_SCRIPT, str(run / "torch"), COLLECTIVE.pattern],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = {int(k): v for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}
    assert sorted(found) == [0, 1]
    for rank, path in enumerate(rank_traces(run)):
        raw = sum(1 for e in raw_events(path) if COLLECTIVE.match(e["name"]))
        assert found[rank] == {"steps": WINDOW, "collectives": raw} and raw > 0


@pytest.mark.slow
def test_comm_reads_the_run_both_ranks_per_step_and_stragglers(run):
    from test_torch_gloo import raw_figures

    code, text = run_cli("comm", run, "--json", "--per-step")
    assert code == 0, text
    document = json.loads(text)
    assert [d["device"] for d in document["devices"]] == ["rank0/cpu:0", "rank1/cpu:0"]
    assert document["steps"] == WINDOW
    for rank, device in enumerate(document["devices"]):
        events = raw_events(rank_traces(run)[rank])
        assert device["total"]["communication_us"] == pytest.approx(raw_figures(events)["communication_us"],
                                                                    abs=0.01)
        assert sorted(map(int, device["steps"])) == WINDOW
        for step in WINDOW:
            assert device["steps"][str(step)]["communication_us"] > 0
    assert [s["step"] for s in document["stragglers"]] == WINDOW
    code, text = run_cli("comm", run)
    assert code == 0 and "stragglers" in text and "host operators" in " ".join(text.split())


@pytest.mark.slow
def test_count_ops_counts_aten_ops_per_rank_as_the_raw_json_does(run):
    code, text = run_cli("count-ops", run, "--json", "--by", "type")
    assert code == 0, text
    by_device = json.loads(text)["kernels"]["by_device_type"]
    assert sorted(by_device) == ["rank0/cpu:0", "rank1/cpu:0"]
    for rank, path in enumerate(rank_traces(run)):
        events = raw_events(path)
        windows = [(e["ts"], e["ts"] + e["dur"]) for e in events if STEP.match(e["name"])]
        expected = {}
        for e in events:
            if e["cat"] == "cpu_op" and e["name"].startswith("aten::") and any(a <= e["ts"] < b for a, b in windows):
                expected[e["name"]] = expected.get(e["name"], 0) + 1
        mine = {k: v for k, v in by_device[f"rank{rank}/cpu:0"].items() if k.startswith("aten::")}
        assert mine == expected and expected["aten::mm"] > 0


def fail_on_rank_1_after_its_window(job):
    """Rank 1 captures its window, then fails; rank 0 ends normally."""
    import os

    from rnnprof.training.torch_ddp import rank_main

    result = rank_main(job)
    if os.environ["RANK"] == "1":
        raise RuntimeError("planted failure on rank 1")
    return result


@pytest.mark.slow
def test_a_crashing_rank_is_one_line_naming_it_and_the_run_is_marked(tmp_path, monkeypatch, capfd):
    from processes import left_running
    from rnnprof.cli import main
    from rnnprof.training import torch_ddp

    monkeypatch.setattr(torch_ddp, "rank_main", fail_on_rank_1_after_its_window)
    out = tmp_path / "run"
    code = main([*TRACE_ARGS[:9], "--warmup", "0", "--batches", "1", "--trace-steps", "1", "--units", "16",
                 "--vocab-size", "60", "--out", str(out)])
    err = capfd.readouterr().err
    assert code == 1, err
    last = [line for line in err.splitlines() if line.strip()][-1]
    assert last.startswith("rnnprof trace: ") and "rank 1 of 2 failed" in last and "planted failure" in last
    assert err.count("RuntimeError: planted failure on rank 1") == 2  # its traceback once, then the line
    assert left_running(grace_s=5.0) == {}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and "rank 1 of 2 failed" in manifest["error"]
    # both ranks had written their window before rank 1 failed: the run lists and reads them, and says it stopped
    assert manifest["captured"]["kineto"] == ["torch/rank0.json.gz", "torch/rank1.json.gz"]
    code = main(["comm", str(out), "--json"])
    captured = capfd.readouterr()
    assert code == 0 and len(json.loads(captured.out)["devices"]) == 2
    assert "the capture stopped (RankFailed: rank 1 of 2 failed" in captured.err


@pytest.mark.slow
def test_view_opens_rnnprofs_tab_on_a_torch_run_and_no_profile_viewer(run, capsys, announced_tensorboard):
    """A PyTorch run has no TensorBoard profile (its traces are Kineto JSON): view serves rnnprof's tab on it and
    offers no profile viewer (TensorBoard replaced by a process that prints its address line and exits)."""
    from rnnprof.cli import main

    code = main(["view", str(run), "--port", "0"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "rnnprof's findings http://127.0.0.1:6006/#rnnprof" in captured.out
    assert "profile viewer" not in captured.out
    launched = announced_tensorboard[0]
    assert launched[launched.index("--logdir") + 1] == str(run)


@pytest.mark.slow
def test_placement_audit_says_which_rules_apply_to_the_torch_run_and_measures_cpu_ranks_as_comm_does(run):
    from test_torch_gloo import raw_figures, raw_windows

    from rnnprof.analyzers.placement import RULES

    # threshold 0: any spread is a finding, so its per-rank figures are shown
    code, text = run_cli("placement-audit", run, "--json", "--imbalance-threshold", "0", "--fail-on", "never")
    assert code == 0, text
    document = json.loads(text)
    assert document["framework"] == "pytorch" and document["rules_checked"] == ["PA004-device-imbalance"]
    not_applicable = {n["rule"]: n["reason"] for n in document["rules_not_applicable"]}
    assert set(not_applicable) == {r.id for r in RULES} - {"PA004-device-imbalance"}
    assert "inter-op pool" in not_applicable["PA006-inter-op-threads"]  # not TF's threads read off the config
    (finding,) = document["findings"]
    assert "untraced host time count" in finding["evidence"]["work_measure"] and "not kernel time" in finding["cost_basis"]
    assert "PA002" not in finding["fix"]  # no TF rule is offered as the way out
    # where Linux gives it, each step's wait of the rank's training thread for a core, by the kernel's schedstat
    waits = {r["rank"]: r.get("step_runqueue_seconds") for r in json.loads((run / "manifest.json").read_text())["ranks"]}
    assert ("run queue" in finding["evidence"]["work_measure"]) == all(waits.values())
    for rank, path in enumerate(rank_traces(run)):
        events = raw_events(path)
        # a rank's busy time per step: its step window less its communication, as comm's per-step figures, and
        # less the time its thread waited for a core; a step whose wait exceeds the rest (on a loaded machine the
        # thread also waits for a core inside its collectives) counts 0, never less
        windows = raw_windows(events)
        expected = sum(max(windows[step][1] - windows[step][0] - raw_figures(events, step)["communication_us"]
                           - (1e6 * waits[rank][step] if all(waits.values()) else 0.0), 0.0)
                       for step in WINDOW) / len(WINDOW)
        assert finding["evidence"]["work_us_per_step"][f"rank{rank}/cpu:0"] == pytest.approx(expected, abs=0.1)
    code, text = run_cli("placement-audit", run, "--fail-on", "never")
    flat = " ".join(text.split())
    assert code == 0 and "Does not apply to a PyTorch run" in flat and "Rules checked: PA004." in flat
    assert "PA006-inter-op-threads: there is no TensorFlow inter-op pool" in flat


def test_imbalance_of_cpu_ranks_leaves_out_operator_time_spent_waiting_in_collectives():
    # DDP's gradient hook (an operator) waits inside c10d::allreduce_ on its thread: that wait is not busy time.
    # A CPU rank's busy time is its step window less its communication, so untraced host time counts as work.
    from test_torch_gloo import RANKS, STEP as GLOO_STEP, raw_figures, raw_windows

    from rnnprof.analyzers.placement import AuditInput
    from rnnprof.analyzers.placement.imbalance import check
    from rnnprof.traces import load_events

    (finding,) = check(AuditInput(events=load_events(RANKS)), threshold=0.0)
    for rank, path in enumerate(RANKS):
        events = raw_events(path)
        steps = sorted(int(GLOO_STEP.match(e["name"]).group(1)) for e in events if GLOO_STEP.match(e["name"]))
        windows = raw_windows(events)
        expected = sum(windows[step][1] - windows[step][0] - raw_figures(events, step)["communication_us"]
                       for step in steps) / len(steps)
        operators_only = sum(raw_figures(events, step)["compute_us"] for step in steps) / len(steps)
        busy = finding.evidence["work_us_per_step"][f"rank{rank}/cpu:0"]
        assert busy == pytest.approx(expected, abs=0.1) and busy > operators_only
