"""Kernel launch statistics in count-ops, checked against the raw Kineto JSON; none for TF traces."""

import gzip
import json
from collections import defaultdict

import numpy as np
import pytest

from rnnprof.analyzers.launches import launch_stats, launchers
from rnnprof.cli import main
from rnnprof.events import Device, EventTableBuilder, Kind
from rnnprof.traces import load_events

from fixtures import FIXTURES

NCCL = FIXTURES / "kineto-2rank-nccl-rank0.json.gz"
SAMPLED = [FIXTURES / "kineto-sampled-rank0.json.gz", FIXTURES / "kineto-sampled-rank1.json.gz"]
TF_GPU = FIXTURES / "tf1-timeline-gpu-loop-step0.json"


def raw_launches(path, steps=None) -> dict[str, dict[str, list[float]]]:
    """Per kernel name: kernel durations, launch delays and launch-call durations, from the JSON itself.

    ``steps``: only kernels whose runtime call starts inside one of these ``ProfilerStep#N`` ranges.
    """
    events = json.load(gzip.open(path))["traceEvents"]
    spans = [(e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1])) for e in events
             if e.get("name", "").startswith("ProfilerStep#")]
    calls = {e["args"]["correlation"]: e for e in events
             if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    found: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for e in events:
        if e.get("cat") != "kernel":
            continue
        call = calls.get(e["args"].get("correlation"))
        if steps is not None:
            if call is None or not any(lo <= call["ts"] < hi and n in steps for lo, hi, n in spans):
                continue
        entry = found[e["name"]]
        entry["dur"].append(e["dur"])
        if call is not None:
            entry["delay"].append(e["ts"] - call["ts"])
            entry["call"].append(call["dur"])
    return found


def count_ops_json(capsys, *argv) -> dict:
    assert main(["count-ops", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_launch_delay_per_kernel_agrees_with_the_raw_trace(capsys):
    raw = raw_launches(NCCL)
    doc = count_ops_json(capsys, str(NCCL))["launches"]
    assert doc["available"] is True
    by_name = {k["name"]: k for k in doc["by_kernel"]}
    assert sorted(by_name) == sorted(raw)
    for name, entry in raw.items():
        mine = by_name[name]
        assert mine["kernels"] == len(entry["dur"]) and mine["launched"] == len(entry["delay"])
        assert mine["launch_delay_median_us"] == pytest.approx(np.median(entry["delay"]), abs=1e-3)
        assert mine["launch_delay_p95_us"] == pytest.approx(np.percentile(entry["delay"], 95), abs=1e-3)
        assert mine["kernel_median_us"] == pytest.approx(np.median(entry["dur"]), abs=1e-3)
        assert mine["launch_call_median_us"] == pytest.approx(np.median(entry["call"]), abs=1e-3)
        assert mine["short_kernels"] == sum(d < 10 for d in entry["dur"])
        assert mine["shorter_than_launch_call"] == sum(d < c for d, c in zip(entry["dur"], entry["call"]))
    all_delays = [d for entry in raw.values() for d in entry["delay"]]
    assert doc["launch_delay_median_us"] == pytest.approx(np.median(all_delays), abs=1e-3)
    all_durs = [d for entry in raw.values() for d in entry["dur"]]
    assert doc["kernels"] == len(all_durs)
    assert doc["short_kernel_share"] == pytest.approx(np.mean(np.array(all_durs) < 10))
    # Longest summed kernel time first.
    totals = [k["total_us"] for k in doc["by_kernel"]]
    assert totals == sorted(totals, reverse=True)


def raw_host_ops(path) -> dict[str, list[tuple[float, float]]]:
    """Per cpu_op name, ``(op duration, summed duration of its kernels)`` for every execution that launched
    kernels, linked the way Kineto records it: the runtime call's "External id" is its cpu_op's."""
    events = json.load(gzip.open(path))["traceEvents"]
    ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op" and "External id" in e["args"]}
    call_op = {e["args"]["correlation"]: e["args"].get("External id") for e in events
               if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    kernel_time: dict[int, float] = defaultdict(float)
    for e in events:
        if e.get("cat") == "kernel" and call_op.get(e["args"].get("correlation")) in ops:
            kernel_time[call_op[e["args"]["correlation"]]] += e["dur"]
    found: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for external_id, total in kernel_time.items():
        found[ops[external_id]["name"]].append((ops[external_id]["dur"], total))
    return found


def test_host_ops_against_their_kernels_agree_with_the_raw_trace(capsys):
    raw = raw_host_ops(NCCL)
    doc = count_ops_json(capsys, str(NCCL))["launches"]
    by_name = {o["name"]: o for o in doc["by_host_op"]}
    assert sorted(by_name) == sorted(raw)
    for name, executions in raw.items():
        host, kernels = np.array(executions).T
        mine = by_name[name]
        assert mine["ops"] == len(executions)
        assert mine["host_median_us"] == pytest.approx(np.median(host), abs=1e-3)
        assert mine["kernels_median_us"] == pytest.approx(np.median(kernels), abs=1e-3)
        assert mine["longer_on_host"] == int((host > kernels).sum())
    assert main(["count-ops", str(NCCL)]) == 0
    assert "host ops against the kernels they launched" in capsys.readouterr().out


def test_short_kernel_threshold_and_step_selection(capsys):
    raw = raw_launches(NCCL, steps={5})
    doc = count_ops_json(capsys, str(NCCL), "--steps", "5:5", "--short-kernel-us", "50")["launches"]
    durations = [d for entry in raw.values() for d in entry["dur"]]
    assert doc["short_kernel_us"] == 50
    assert doc["kernels"] == len(durations)
    assert doc["short_kernels"] == sum(d < 50 for d in durations)


def test_launch_bound_note_follows_host_wait(capsys):
    # The NCCL fixture's GPU waits on launches about three quarters of its span (see test_comm_hta_steps).
    doc = count_ops_json(capsys, str(NCCL))["launches"]
    assert doc["launch_bound"] == ["rank0/gpu:0"]
    assert doc["host_wait_share_of_span"]["rank0/gpu:0"] > 0.5
    assert main(["count-ops", str(NCCL)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "rank0/gpu:0 is launch-bound" in out and "launch delay median" in out


def test_two_ranks_match_launches_within_each_rank(capsys):
    # Correlation ids restart in every process: a kernel of rank 1 must never be matched with a call of rank 0.
    doc = count_ops_json(capsys, *map(str, SAMPLED))["launches"]
    raws = [raw_launches(path) for path in SAMPLED]
    assert doc["launched"] == sum(len(e["delay"]) for raw in raws for e in raw.values())
    delays = [d for raw in raws for e in raw.values() for d in e["delay"]]
    assert doc["launch_delay_median_us"] == pytest.approx(np.median(delays), abs=1e-3)
    assert doc["launch_delay_p95_us"] == pytest.approx(np.percentile(delays, 95), abs=1e-3)


def test_correlation_ids_shared_by_two_workers_stay_apart():
    b = EventTableBuilder("test")
    for rank, call_ts in ((0, 0.0), (1, 50.0)):
        host, gpu = Device("host", 0, f"rank{rank}"), Device("gpu", 0, f"rank{rank}")
        b.add(call_ts, 5.0, "cudaLaunchKernel", "cudaLaunchKernel", host, "1", Kind.RUNTIME, correlation=7)
        b.add(call_ts + 10, 2.0, "k", "k", gpu, "stream:7", Kind.KERNEL, correlation=7)
    table = b.build()
    assert launchers(table).tolist() == [-1, 0, -1, 2]
    stats = launch_stats(table, host_wait_share={})
    assert stats.delay_median_us == 10.0 and stats.delay_p95_us == 10.0


def test_tf_trace_says_launches_are_not_recorded(capsys):
    doc = count_ops_json(capsys, str(TF_GPU))["launches"]
    assert doc["available"] is False and "TensorFlow" in doc["reason"]
    assert main(["count-ops", str(TF_GPU)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Kernel launches: no statistics" in out
    assert load_events(TF_GPU).correlation.max() < 0  # the trace indeed links no launch to a kernel


def test_host_self_time_takes_out_direct_children_on_the_same_thread_only():
    import numpy as np

    from rnnprof.analyzers.launches import host_self_time
    from rnnprof.events import Device, EventTableBuilder, Kind

    b = EventTableBuilder("kineto")
    host = Device("host")
    rows = [  # (ts, dur, thread)
        (0, 100, "1"),  # outer: children 10..40 and 50..90 (the latter's child is not its direct child)
        (10, 30, "1"),
        (50, 40, "1"),
        (60, 10, "1"),  # grandchild of the outer op
        (0, 100, "2"),  # same span, other thread: no child of the first
        (95, 20, "1"),  # starts inside the outer op, ends after it: only its part inside is taken out
        (200, 5, "1"), (200, 5, "1"),  # alike: the first recorded is the outer one
    ]
    for ts, dur, lane in rows:
        b.add(ts, dur, "op", "op", host, lane, Kind.HOST_OP)
    table = b.build()
    got = host_self_time(table, np.arange(len(rows)))
    assert got.tolist() == [100 - 30 - 40 - 5, 30, 40 - 10, 10, 100, 20, 0, 5]


def test_a_calls_innermost_host_op_is_the_same_in_arrays_as_by_a_stack_on_every_real_lane():
    """``enclosing_host_ops`` finds a lane's innermost open op in arrays where its ops nest, else op by op with a
    stack; on every lane of the Kineto traces of tests/data the two agree for every runtime call and annotation,
    and the lanes whose ops do not nest (the V100 trace has some) are the ones left to the stack."""
    from rnnprof.analyzers.launches import _innermost_by_stack, _innermost_nested

    compared = not_nested = 0
    for path in sorted(FIXTURES.glob("kineto-*.json.gz")):
        table = load_events(str(path))
        ops = np.flatnonzero(table.kind == Kind.HOST_OP)
        events = np.flatnonzero(np.isin(table.kind, (Kind.RUNTIME, Kind.ANNOTATION)))
        lane = table.device.astype(np.int64) * (len(table.strings) + 1) + table.lane
        for key in np.intersect1d(lane[ops], lane[events]).tolist():
            theirs, mine = ops[lane[ops] == key], events[lane[events] == key]
            by_stack = _innermost_by_stack(table, theirs, mine)
            in_arrays = _innermost_nested(table, theirs, mine)
            if in_arrays is None:
                not_nested += 1
                continue
            assert np.array_equal(in_arrays, by_stack), (path.name, key)
            compared += int((by_stack >= 0).sum())
    assert compared > 100_000 and not_nested >= 1


def test_ops_that_overlap_without_nesting_are_left_to_the_stack():
    """Two ops of one thread that overlap, neither holding the other: the arrays cannot tell which is open
    innermost, so they give up; the stack gives the later one where it still holds the call."""
    from rnnprof.analyzers.launches import _innermost_nested, enclosing_host_ops

    b = EventTableBuilder("kineto")
    host = Device("host")
    for ts, dur, kind in ((0, 50, Kind.HOST_OP), (30, 40, Kind.HOST_OP), (40, 5, Kind.RUNTIME),
                          (60, 5, Kind.RUNTIME), (10, 5, Kind.RUNTIME), (45, 20, Kind.RUNTIME)):
        b.add(ts, dur, "x", "x", host, "1", kind)
    table = b.build()
    assert _innermost_nested(table, np.array([0, 1]), np.array([2, 3, 4, 5])) is None
    assert enclosing_host_ops(table, np.array([2, 3, 4, 5])).tolist() == [1, 1, 0, 1]
