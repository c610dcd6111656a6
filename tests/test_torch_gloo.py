"""Two-rank CPU DDP (gloo) Kineto traces: each rank is a device measured by its host operators.

The expected figures are computed here from the raw JSON (unions of intervals by event name and
category), not taken from rnnprof's output.
"""

import gzip
import json
import re
import shutil
import subprocess
import sys

import pytest

from rnnprof.analyzers.comm import analyze_comm
from rnnprof.analyzers.device_work import BASIS_HOST_OPS
from rnnprof.analyzers.opcount import count_kernels
from rnnprof.cli import main
from rnnprof.events import Device
from rnnprof.traces import load_events

from fixtures import FIXTURES
from processes import run_retried, stderr_ends

SCRIPT = FIXTURES / "make_torch_gloo_traces.py"
RANKS = [FIXTURES / f"torch-gloo-rank{r}.json.gz" for r in range(2)]
COLLECTIVE = re.compile(r"^(c10d::\w+|gloo:\w+|record_param_comms)$")
STEP = re.compile(r"^ProfilerStep#(\d+)$")

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning",
                                        "ignore:.*inplace keyword:Warning")


def raw_events(path):
    with gzip.open(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def union(intervals):
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def clipped(intervals, lo, hi):
    return [(max(a, lo), min(b, hi)) for a, b in intervals if min(b, hi) > max(a, lo)]


def raw_windows(events):
    """Per step, its window on the rank: from its first operator or collective (one starting in its ProfilerStep
    range; or the previous window's start, if later) to the next step's window; the last to the last end."""
    ranges = sorted((e["ts"], e["ts"] + e["dur"], int(STEP.match(e["name"]).group(1))) for e in events
                    if STEP.match(e["name"]))
    work = [e for e in events if e["cat"] == "cpu_op" or (COLLECTIVE.match(e["name"]) and e["cat"] == "user_annotation")]
    first = {n: min(e["ts"] for e in work if a <= e["ts"] < b) for a, b, n in ranges}
    starts, start = [], float("-inf")
    for _, _, n in ranges:
        start = max(start, first[n])
        starts.append(start)
    starts[0] = min(first.values())
    last = max(e["ts"] + e["dur"] for e in work if any(a <= e["ts"] < b for a, b, _ in ranges))
    return {n: (lo, hi) for (_, _, n), lo, hi in zip(ranges, starts, starts[1:] + [last])}


def raw_figures(events, step=None):
    """Per rank from the raw events: collectives (c10d::*, gloo:*) and cpu_op time, as unions; with ``step``, those
    of the events in any step cut at the step's window (``raw_windows``)."""
    window = None
    if step is not None:
        window = raw_windows(events)[step]
        spans = [(e["ts"], e["ts"] + e["dur"]) for e in events if STEP.match(e["name"])]
        events = [e for e in events if any(a <= e["ts"] < b for a, b in spans)]
    collectives = [e for e in events if COLLECTIVE.match(e["name"]) and e["cat"] in ("cpu_op", "user_annotation")]
    operators = [e for e in events if e["cat"] == "cpu_op" and not COLLECTIVE.match(e["name"])]
    comm = [(e["ts"], e["ts"] + e["dur"]) for e in collectives]
    # An operator's time while its own thread is in a collective is communication, not compute.
    compute = []
    for op in operators:
        pieces = [(op["ts"], op["ts"] + op["dur"])]
        for c in collectives:
            if c["tid"] == op["tid"]:
                pieces = [p for a, b in pieces for p in ((a, min(b, c["ts"])), (max(a, c["ts"] + c["dur"]), b))
                          if p[1] > p[0]]
        compute += pieces
    whole = comm + [(e["ts"], e["ts"] + e["dur"]) for e in operators]
    if window is not None:
        comm, compute, whole = (clipped(x, *window) for x in (comm, compute, whole))
    return {"communication_us": union(comm), "compute_us": union(compute), "busy_us": union(whole),
            "overlap_us": union(comm) + union(compute) - union(comm + compute),
            "end_us": max(end for _, end in whole), "comm_start_us": min(s for s, _ in comm)}


@pytest.fixture(scope="module")
def report():
    return analyze_comm(load_events(RANKS))


def test_the_traces_are_what_the_readme_says():
    for rank, path in enumerate(RANKS):
        with gzip.open(path, "rt") as f:
            document = json.load(f)
        assert document["distributedInfo"]["backend"] == "gloo" and document["distributedInfo"]["rank"] == rank
        names = {e["name"] for e in document["traceEvents"]}
        assert {"c10d::allreduce_", "gloo:all_reduce", "forward", "backward", "optimizer"} <= names
        assert not any(e.get("cat") in ("kernel", "cuda_runtime") for e in document["traceEvents"])
        assert path.stat().st_size < 300_000


def test_each_rank_is_a_cpu_device_measured_by_its_host_operators(report):
    assert [d.device for d in report.devices] == [Device("cpu", 0, "rank0"), Device("cpu", 0, "rank1")]
    assert all(d.basis == BASIS_HOST_OPS for d in report.devices)


@pytest.mark.parametrize("rank", [0, 1])
def test_whole_trace_figures_match_the_raw_intervals(report, rank):
    expected = raw_figures(raw_events(RANKS[rank]))
    total = report.devices[rank].total
    assert expected["communication_us"] > 0
    for key in ("communication_us", "compute_us", "busy_us", "overlap_us", "end_us"):
        assert getattr(total, key) == pytest.approx(expected[key], abs=0.01), key


@pytest.mark.parametrize("rank", [0, 1])
def test_per_step_figures_match_the_raw_intervals(report, rank):
    events = raw_events(RANKS[rank])
    steps = sorted(int(STEP.match(e["name"]).group(1)) for e in events if STEP.match(e["name"]))
    assert report.steps == tuple(steps) and len(steps) == 2
    for step in steps:
        expected = raw_figures(events, step)
        mine = report.devices[rank].steps[step]
        assert mine.communication_us > 0
        for key in ("communication_us", "compute_us", "busy_us", "overlap_us"):
            assert getattr(mine, key) == pytest.approx(expected[key], abs=0.01), (step, key)


@pytest.mark.parametrize("rank", [0, 1])
def test_an_operator_waiting_in_its_threads_collective_is_not_compute(report, rank):
    # DDP's AccumulateGrad hook calls c10d::allreduce_ on the main thread: that stretch is communication only.
    events = raw_events(RANKS[rank])
    (hook,) = [e for e in events if e["name"].endswith("AccumulateGrad") and any(
        c["name"] == "c10d::allreduce_" and e["ts"] <= c["ts"] < e["ts"] + e["dur"] for c in events)][:1]
    uncut = union((e["ts"], e["ts"] + e["dur"]) for e in events
                  if e["cat"] == "cpu_op" and not COLLECTIVE.match(e["name"]))
    assert report.devices[rank].total.compute_us < uncut - 1.0


def test_stragglers_per_step_from_raw_ends(report):
    events = [raw_events(path) for path in RANKS]
    by_step = {s.step: s for s in report.stragglers}
    assert sorted(by_step) == list(report.steps)
    for step, straggler in by_step.items():
        figures = [raw_figures(e, step) for e in events]
        ends = [f["end_us"] for f in figures]
        starts = [f["comm_start_us"] for f in figures]
        assert straggler.last_to_finish == Device("cpu", 0, f"rank{ends.index(max(ends))}")
        assert straggler.finish_lag_vs_earliest_us == pytest.approx(max(ends) - min(ends), abs=0.01)
        assert straggler.last_comm_start == Device("cpu", 0, f"rank{starts.index(max(starts))}")


HTA_SCRIPT = """
import json, re, sys, warnings
warnings.simplefilter("ignore")
from hta.trace_analysis import TraceAnalysis
trace = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True).t
symbols = trace.symbol_table.get_sym_table()
found = {}
for rank, frame in trace.traces.items():
    names = frame["name"].map(lambda code: symbols[code])
    comm = frame[names.str.match(sys.argv[2])]
    found[int(rank)] = [[float(t), float(t + d)] for t, d in zip(comm["ts"], comm["dur"])]
print(json.dumps(found))
"""


def test_communication_agrees_with_holistictraceanalysis(tmp_path, report):
    # HTA parses the rank traces; its per-rank union of the collectives' intervals (rounded to µs) matches ours.
    # HTA parses several ranks in a multiprocessing pool (fork): that runs in a fresh interpreter, because a
    # fork of this process, which holds other tests' threads, can deadlock.
    for path in RANKS:
        shutil.copy(path, tmp_path / path.name)
    done = subprocess.run([sys.executable, "-c", HTA_SCRIPT, str(tmp_path), COLLECTIVE.pattern],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    by_rank = {int(rank): intervals for rank, intervals in json.loads(done.stdout.strip().splitlines()[-1]).items()}
    assert sorted(by_rank) == [0, 1]
    for rank, intervals in by_rank.items():
        assert len(intervals) >= 2
        mine = report.devices[rank].total.communication_us
        assert mine == pytest.approx(union(intervals), abs=2.0 * len(intervals))


def test_count_ops_counts_aten_ops_by_type_per_rank():
    counts = count_kernels(load_events(RANKS))
    for rank, path in enumerate(RANKS):
        events = raw_events(path)
        spans = [(e["ts"], e["ts"] + e["dur"]) for e in events if STEP.match(e["name"])]
        expected = {}
        for e in events:
            if e["cat"] == "cpu_op" and e["name"].startswith("aten::") and any(a <= e["ts"] < b for a, b in spans):
                expected[e["name"]] = expected.get(e["name"], 0) + 1
        mine = counts.by_device_type[f"rank{rank}/cpu:0"]
        assert {k: v for k, v in mine.items() if k.startswith("aten::")} == expected
        assert mine["c10d::allreduce_"] == 2


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_comm_reports_both_ranks_per_step_with_stragglers_and_says_how_they_are_measured(capsys):
    code, out, err = run_cli(capsys, "comm", *RANKS, "--per-step")
    assert code == 0, err
    flat = " ".join(out.split())
    assert "rank0/cpu:0" in out and "rank1/cpu:0" in out and "step 2" in out and "step 3" in out
    assert "stragglers" in out and "gloo:all_reduce" in out
    assert "ranks without a GPU, measured by their host operators" in flat
    assert "no communication found" not in flat
    code, out, err = run_cli(capsys, "comm", *RANKS, "--json")
    document = json.loads(out)
    assert [d["basis"] for d in document["devices"]] == [BASIS_HOST_OPS] * 2
    assert "host operators" in document["notes"][0]


def test_cli_count_ops_by_type_has_a_column_per_rank(capsys):
    code, out, err = run_cli(capsys, "count-ops", *RANKS, "--by", "type")
    assert code == 0, err
    assert "rank0/cpu:0" in out and "rank1/cpu:0" in out and "aten::" in out and "rank0/host" not in out


@pytest.mark.slow
def test_the_capture_script_records_two_loadable_rank_traces(tmp_path):
    result = run_retried([sys.executable, str(SCRIPT), str(tmp_path)], timeout=120)
    assert result.returncode == 0, stderr_ends(result)
    paths = sorted(tmp_path.glob("torch-gloo-rank*.json.gz"))
    assert [p.name for p in paths] == ["torch-gloo-rank0.json.gz", "torch-gloo-rank1.json.gz"]
    report = analyze_comm(load_events(paths))
    assert [d.device.worker for d in report.devices] == ["rank0", "rank1"]
    assert all(d.total.communication_us > 0 and len(d.steps) == 2 for d in report.devices)


def test_a_gpu_rank_keeps_its_c10d_calls_on_the_host():
    # The NCCL rank's c10d::allreduce_/record_param_comms are host-side launches, not its communication.
    from rnnprof.analyzers.classify import EventClass, classify

    table = load_events(FIXTURES / "kineto-2rank-nccl-rank0.json.gz")
    assert [d.kind for d in table.devices] == ["host", "gpu"] and table.metadata.host_operator_devices == ()
    names = table.text(table.name)
    launches = [i for i, n in enumerate(names) if COLLECTIVE.match(n)]
    assert len(launches) > 0
    assert set(classify(table)[launches].tolist()) == {int(EventClass.HOST)}
    assert {table.devices[d].kind for d in table.device[launches]} == {"host"}


def _rank_trace(tmp_path, events, rank=0):
    path = tmp_path / f"rank{rank}.json"
    path.write_text(json.dumps({"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": rank,
                                                                         "world_size": 2},
                                "traceEvents": events}))
    return path


def test_a_gpu_rank_without_its_kernels_is_still_no_device(tmp_path, capsys):
    # CUDA runtime calls say the rank had a GPU whose activity was not captured: not a CPU rank.
    path = _rank_trace(tmp_path, [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 5},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1, "dur": 1,
         "args": {"correlation": 1}}])
    code, out, err = run_cli(capsys, "comm", path)
    assert code == 2 and out == "" and "no device activity" in err and len(err.strip().splitlines()) == 1


def test_record_param_comms_is_a_cpu_ranks_communication(tmp_path):
    path = _rank_trace(tmp_path, [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 2, "dur": 3},  # nested
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 20, "dur": 4},
        {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 2, "ts": 8, "dur": 14}])
    (device,) = analyze_comm(load_events(path)).devices
    assert device.device == Device("cpu", 0, "rank0")
    total = device.total
    assert (total.compute_us, total.communication_us, total.busy_us, total.overlap_us) == (10, 16, 24, 2)
