"""rnnprof comm on small built event tables: classification, breakdowns, steps, stragglers, CLI errors."""

import gzip
import json
import re

import pytest

from fixtures import FIXTURES
from rnnprof.analyzers.classify import EventClass, classify
from rnnprof.analyzers.comm import analyze_comm
from rnnprof.cli import main
from rnnprof.events import Device, EventTableBuilder, Kind

GPU0, GPU1, GPU2 = Device("gpu", 0), Device("gpu", 1), Device("gpu", 2)
HOST = Device("host")
CPU0, CPU1 = Device("cpu", 0), Device("cpu", 1)


def build(events):
    """events: (ts, dur, name, op_type, device, kind, step[, lane]). GPU work defaults to a stream lane."""
    builder = EventTableBuilder("test")
    for ts, dur, name, op_type, device, kind, step, *lane in events:
        default = "stream:7" if device.kind == "gpu" and kind != Kind.HOST_OP else "ops"
        builder.add(ts, dur, name, op_type, device, lane[0] if lane else default, kind, step=step)
    return builder.build()


CLASSIFICATION = [
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "", GPU0, Kind.KERNEL,
     EventClass.COMMUNICATION),
    ("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "", GPU0, Kind.KERNEL,
     EventClass.COMMUNICATION),
    ("void at::native::reduce_kernel<512, 1>", "", GPU0, Kind.KERNEL, EventClass.COMPUTE),
    ("volta_sgemm_128x64_nn", "", GPU0, Kind.KERNEL, EventClass.COMPUTE),
    ("Memcpy DtoD (Device -> Device)", "", GPU0, Kind.MEMCPY, EventClass.MEMCPY),
    ("Memset (Device)", "", GPU0, Kind.MEMSET, EventClass.MEMSET),
    ("cudaLaunchKernel", "", HOST, Kind.RUNTIME, EventClass.HOST),
    # The host-side call only launches the collective: host activity, not communication time.
    ("c10d::allreduce_", "c10d::allreduce_", HOST, Kind.HOST_OP, EventClass.HOST),
    ("ProfilerStep#4", "", HOST, Kind.ANNOTATION, EventClass.ANNOTATION),
    ("nccl:all_reduce", "", GPU0, Kind.ANNOTATION, EventClass.ANNOTATION),
    ("CollectiveReduceV2", "CollectiveReduceV2", CPU0, Kind.HOST_OP, EventClass.COMMUNICATION),
    ("tower_1/CollectiveGatherV2_3", "CollectiveGatherV2", CPU1, Kind.HOST_OP, EventClass.COMMUNICATION),
    ("CollectiveBcastSendV2", "CollectiveBcastSendV2", CPU0, Kind.HOST_OP, EventClass.COMMUNICATION),
    ("NcclAllReduce", "NcclAllReduce", GPU0, Kind.HOST_OP, EventClass.COMMUNICATION),
    ("edge_7_tower_1/gradients/add/_send", "_Send", CPU0, Kind.HOST_OP, EventClass.COMMUNICATION),
    ("edge_7_tower_1/gradients/add/_recv", "_Recv", CPU1, Kind.HOST_OP, EventClass.COMMUNICATION),
    ("x/_HostSend", "_HostSend", CPU0, Kind.HOST_OP, EventClass.COMMUNICATION),
    ("x/_HostRecv", "_HostRecv", CPU0, Kind.HOST_OP, EventClass.COMMUNICATION),
    ("Send", "Send", CPU0, Kind.HOST_OP, EventClass.COMMUNICATION),
    # The runner's ring / hierarchical-copy aggregation is plain adds and copies inside its name scopes.
    ("allreduce/within_pairs/AddN_3", "AddN", CPU0, Kind.HOST_OP, EventClass.COMMUNICATION),
    ("allreduce/across_leaders/Identity", "Identity", CPU1, Kind.HOST_OP, EventClass.COMMUNICATION),
    ("gradient_aggregation/AddN", "AddN", CPU0, Kind.HOST_OP, EventClass.COMMUNICATION),
    ("tower_0/gradients/MatMul_grad/MatMul", "MatMul", CPU0, Kind.HOST_OP, EventClass.COMPUTE),
    ("tower_0/Sender/MatMul", "MatMul", CPU0, Kind.HOST_OP, EventClass.COMPUTE),
    ("MEMCPYHtoD", "MEMCPYHtoD", GPU0, Kind.MEMCPY, EventClass.MEMCPY),
]


def test_classification_of_known_names():
    table = build([(0, 1, name, op, dev, kind, -1) for name, op, dev, kind, _ in CLASSIFICATION])
    got = classify(table)
    for (name, _, _, _, expected), cls in zip(CLASSIFICATION, got):
        assert EventClass(cls) == expected, name


def test_loader_marked_communication_kind_counts_whatever_its_name():
    table = build([(0, 1, "some_vendor_collective", "", GPU0, Kind.COMMUNICATION, -1)])
    assert classify(table)[0] == EventClass.COMMUNICATION


def test_user_patterns_extend_communication():
    table = build([(0, 1, "MyRingCopy_3", "Identity", CPU0, Kind.HOST_OP, -1),
                   (0, 1, "mesh_xfer", "", GPU0, Kind.KERNEL, -1),
                   (0, 1, "MatMul", "MatMul", CPU0, Kind.HOST_OP, -1)])
    assert list(classify(table)) == [EventClass.COMPUTE] * 3
    got = classify(table, [r"^MyRing", r"(?i)MESH_XFER"])
    assert list(got) == [EventClass.COMMUNICATION, EventClass.COMMUNICATION, EventClass.COMPUTE]
    with pytest.raises(re.error):
        classify(table, ["(unclosed"])


def two_gpu_two_steps():
    return build([
        # step 0, gpu0: compute [0,10), comm [8,14), memcpy [20,22)
        (0, 10, "gemm", "", GPU0, Kind.KERNEL, 0),
        (8, 6, "ncclKernel_AllReduce", "", GPU0, Kind.COMMUNICATION, 0),
        (20, 2, "Memcpy DtoD", "", GPU0, Kind.MEMCPY, 0),
        # step 0, gpu1: compute [1,12) as two overlapping kernels on two streams, comm [12,18)
        (1, 6, "gemm", "", GPU1, Kind.KERNEL, 0),
        (5, 7, "relu", "", GPU1, Kind.KERNEL, 0),
        (12, 6, "ncclKernel_AllReduce", "", GPU1, Kind.KERNEL, 0),
        # step 1, gpu0: compute [30,40), comm [40,45), memset [44,46)
        (30, 10, "gemm", "", GPU0, Kind.KERNEL, 1),
        (40, 5, "ncclKernel_AllReduce", "", GPU0, Kind.COMMUNICATION, 1),
        (44, 2, "Memset", "", GPU0, Kind.MEMSET, 1),
        # step 1, gpu1: compute [30,50) with comm [35,38) fully overlapped
        (30, 20, "gemm", "", GPU1, Kind.KERNEL, 1),
        (35, 3, "ncclKernel_AllReduce", "", GPU1, Kind.KERNEL, 1),
        # host activity and annotations span everything but never make a GPU busy
        (-5, 100, "ProfilerStep#0", "", HOST, Kind.ANNOTATION, 0),
        (-5, 100, "aten::linear", "aten::linear", HOST, Kind.HOST_OP, 0),
        (-5, 100, "cudaLaunchKernel", "", HOST, Kind.RUNTIME, 0),
        (-5, 100, "nccl:all_reduce", "", GPU0, Kind.ANNOTATION, 0),
    ])


def test_per_device_and_per_step_breakdown():
    report = analyze_comm(two_gpu_two_steps())
    assert [d.device for d in report.devices] == [GPU0, GPU1]  # the host is not a device here
    assert report.steps == (0, 1)
    g0, g1 = report.devices

    # Each step's window on a device runs from its first work to the next step's first work there (the last
    # step's to its last end), so the idle time between two steps is the earlier step's.
    s = g0.steps[0]
    assert (s.start_us, s.end_us, s.busy_us, s.idle_us, s.work_end_us) == (0, 30, 16, 14, 22)
    assert (s.compute_us, s.communication_us, s.memcpy_us, s.overlap_us) == (10, 6, 2, 2)
    assert s.overlap_pct == pytest.approx(100 * 2 / 6)
    assert s.non_compute_us == 6
    s = g0.steps[1]
    assert (s.span_us, s.busy_us, s.communication_us, s.memset_us, s.overlap_us) == (16, 16, 5, 2, 0)
    assert s.overlap_pct == 0

    s = g1.steps[0]
    assert (s.start_us, s.end_us, s.busy_us, s.compute_us, s.idle_us, s.overlap_us) == (1, 30, 17, 11, 12, 0)
    s = g1.steps[1]
    assert (s.compute_us, s.communication_us, s.overlap_us, s.overlap_pct) == (20, 3, 3, 100.0)

    # Whole trace: the gap between steps is idle; the steps' windows partition it, so every figure adds up.
    t = g0.total
    assert (t.span_us, t.busy_us, t.idle_us) == (46, 32, 14)
    for d in (g0, g1):
        for figure in ("span_us", "busy_us", "idle_us", "compute_us"):
            assert getattr(d.total, figure) == sum(getattr(b, figure) for b in d.steps.values()), figure
    assert t.communication_us == sum(b.communication_us for b in g0.steps.values())
    assert t.overlap_us == sum(b.overlap_us for b in g0.steps.values())
    assert t.pct(t.idle_us) == pytest.approx(100 * 14 / 46)


def test_stragglers_per_step():
    report = analyze_comm(two_gpu_two_steps())
    s0, s1 = report.stragglers
    assert s0.step == 0 and s0.devices == 2
    assert s0.last_to_finish == GPU0
    assert s0.finish_lag_vs_earliest_us == 4 and s0.finish_lag_vs_median_us == 2
    assert s0.last_comm_start == GPU1 and s0.comm_start_lag_vs_earliest_us == 4
    assert s1.last_to_finish == GPU1 and s1.finish_lag_vs_earliest_us == 4
    assert s1.last_comm_start == GPU0 and s1.comm_start_lag_vs_earliest_us == 5


def test_straggler_median_with_three_devices_and_without_steps():
    ends = {GPU0: 10, GPU1: 30, GPU2: 11}
    events = [(0, end, "k", "", dev, Kind.KERNEL, -1) for dev, end in ends.items()]
    events += [(2, 1, "ncclKernel_x", "", GPU0, Kind.KERNEL, -1), (9, 1, "ncclKernel_x", "", GPU2, Kind.KERNEL, -1)]
    report = analyze_comm(build(events))
    assert report.steps == ()
    (whole,) = report.stragglers
    assert whole.step is None and whole.devices == 3
    assert whole.last_to_finish == GPU1
    assert whole.finish_lag_vs_median_us == 19 and whole.finish_lag_vs_earliest_us == 20
    # Only two devices communicate; gpu:1 never does.
    assert whole.last_comm_start == GPU2 and whole.comm_start_lag_vs_earliest_us == 7


def test_tf_cpu_devices_count_their_ops():
    table = build([
        (0, 10, "tower_0/MatMul", "MatMul", CPU0, Kind.HOST_OP, 3),
        (10, 5, "allreduce/ring/CollectiveReduceV2", "CollectiveReduceV2", CPU0, Kind.HOST_OP, 3),
        (0, 12, "tower_1/MatMul", "MatMul", CPU1, Kind.HOST_OP, 3),
        (4, 2, "edge_3/_recv", "_Recv", CPU1, Kind.HOST_OP, 3),
    ])
    report = analyze_comm(table)
    cpu0, cpu1 = report.devices
    assert (cpu0.total.compute_us, cpu0.total.communication_us, cpu0.total.overlap_us) == (10, 5, 0)
    assert (cpu1.total.compute_us, cpu1.total.communication_us, cpu1.total.overlap_pct) == (12, 2, 100.0)
    assert report.stragglers[0].last_to_finish == CPU0
    assert set(report.comm_event_names) == {"allreduce/ring/CollectiveReduceV2", "edge_3/_recv"}


def test_gpu_executor_ops_are_host_launches_unless_the_gpu_has_no_stream_records():
    launches = [
        (0, 50, "MatMul", "MatMul", GPU0, Kind.HOST_OP, -1),  # TF executor's launch of a GPU op
        (0, 50, "tower_0/_Send", "_Send", GPU0, Kind.COMMUNICATION, -1, "ops"),
    ]
    with_streams = analyze_comm(build(launches + [(10, 5, "gemm", "", GPU0, Kind.KERNEL, -1)]))
    (gpu,) = with_streams.devices
    assert gpu.basis == "streams"
    assert (gpu.total.span_us, gpu.total.busy_us, gpu.total.communication_us) == (5, 5, 0)

    without_streams = analyze_comm(build(launches))
    (gpu,) = without_streams.devices
    assert gpu.basis == "executor ops"
    assert (gpu.total.busy_us, gpu.total.communication_us, gpu.total.overlap_us) == (50, 50, 50)


def test_no_device_activity_gives_no_devices():
    table = build([(0, 5, "aten::mm", "aten::mm", HOST, Kind.HOST_OP, -1),
                   (0, 5, "cudaLaunchKernel", "", HOST, Kind.RUNTIME, -1)])
    report = analyze_comm(table)
    assert report.devices == () and report.stragglers == ()


def test_json_document_carries_the_same_figures(tmp_path, capsys, monkeypatch):
    from rnnprof.reports.comm import to_document

    report = analyze_comm(two_gpu_two_steps())
    doc = json.loads(json.dumps(to_document(report, per_step=True)))
    gpu0 = doc["devices"][0]
    assert gpu0["device"] == "gpu:0"
    assert gpu0["total"]["idle_us"] == 14 and gpu0["steps"]["0"]["overlap_us"] == 2
    assert doc["stragglers"][0]["last_to_finish"] == "gpu:0"
    assert "steps" not in to_document(report, per_step=False)["devices"][0]


# --- CLI -------------------------------------------------------------------------------------------


def run_cli(capsys, *argv):
    code = main(["comm", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_missing_file_is_a_one_line_error(tmp_path, capsys):
    code, out, err = run_cli(capsys, tmp_path / "nope.json")
    assert code == 2
    assert "nope.json" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_cli_garbage_file_is_a_one_line_error(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{ this is not json")
    code, out, err = run_cli(capsys, bad)
    assert code == 2 and "bad.json" in err and len(err.strip().splitlines()) == 1


def test_cli_trace_without_device_activity_is_an_error_not_an_empty_report(tmp_path, capsys):
    trace = {"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 5, "args": {}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1, "dur": 1,
         "args": {"correlation": 1}},
    ]}
    path = tmp_path / "host_only.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(trace, f)
    code, out, err = run_cli(capsys, path)
    assert code == 2
    assert "host_only.json.gz" in err and "no device activity" in err
    assert out == ""


def test_cli_bad_comm_pattern_is_a_usage_error(capsys):
    code, out, err = run_cli(capsys, "whatever.json", "--comm-pattern", "(unclosed")
    assert code == 2 and "--comm-pattern" in err and len(err.strip().splitlines()) == 1


def test_stragglers_compare_devices_of_one_kind_only():
    # A CPU device's few ops end long before the GPUs: it is no straggler candidate.
    events = [(0, 1, "op", "MatMul", CPU0, Kind.HOST_OP, -1),
              (0, 10, "k", "", GPU0, Kind.KERNEL, -1), (0, 13, "k", "", GPU1, Kind.KERNEL, -1)]
    (whole,) = analyze_comm(build(events)).stragglers
    assert whole.devices == 2 and whole.last_to_finish == GPU1 and whole.finish_lag_vs_earliest_us == 3
    assert analyze_comm(build(events[:2])).stragglers == ()


def test_comm_ops_are_grouped_by_name_longest_first():
    (op,) = analyze_comm(two_gpu_two_steps()).comm_ops
    assert (op.name, op.events, op.devices, op.total_us) == ("ncclKernel_AllReduce", 4, 2, 6 + 6 + 5 + 3)
    extra = build([(0, 4, "tower_0/_Send", "_Send", CPU0, Kind.HOST_OP, -1),
                   (5, 1, "tower_0/_Send", "_Send", CPU0, Kind.HOST_OP, -1),
                   (0, 9, "allreduce/AddN", "AddN", CPU1, Kind.HOST_OP, -1),
                   (0, 20, "tower_1/MatMul", "MatMul", CPU1, Kind.HOST_OP, -1)])
    ops = analyze_comm(extra).comm_ops
    assert [(op.name, op.op_type, op.events, op.total_us) for op in ops] == [
        ("allreduce/AddN", "AddN", 1, 9), ("tower_0/_Send", "_Send", 2, 5)]


@pytest.mark.parametrize("width", [80, 120])
def test_report_never_cuts_a_number(width):
    from rich.console import Console

    from rnnprof.reports.comm import render_table

    big = build([(0, 1_234_567_890, "k", "", GPU0, Kind.KERNEL, 1),
                 (5, 98_765_432.5, "ncclKernel_AllReduce_with_a_very_long_name_" + "x" * 60, "", GPU0, Kind.KERNEL, 1),
                 (0, 1_234_000_000, "k", "", GPU1, Kind.KERNEL, 1)])
    console = Console(width=width, record=True, color_system=None)
    render_table(analyze_comm(big), per_step=True, console=console)
    text = console.export_text()
    assert "…" not in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    flat = re.sub(r"\s+", "", text)
    for number in ("1,234,568", "1,234,000", "98,765"):  # spans and comm time, whole
        assert number in flat


def test_cli_host_only_trace_says_why_there_is_nothing_per_device(tmp_path, capsys):
    trace = {"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 5, "args": {}}]}
    path = tmp_path / "cpu_only.json"
    path.write_text(json.dumps(trace))
    code, out, err = run_cli(capsys, path)
    assert code == 2 and out == ""
    assert "every event is on the host" in err and len(err.strip().splitlines()) == 1


def test_a_gpus_copy_time_agrees_with_the_cuda_events_around_its_copies(capsys):
    """rnnprof's H200 capture of benchmarks/gpu_checks.py: each step copies 64 MB host to device, back, and within
    the device, inside one pair of CUDA events (h200-gpu-checks-clock.json). comm's memcpy time over the window
    also holds the few small copies DDP and the all-gather make (under 2 % here)."""
    clock = json.loads((FIXTURES / "h200-gpu-checks-clock.json").read_text())
    events_ms = sum(r["copies_ms"] for r in clock["steps"] if 3 <= r["step"] <= 6)
    assert main(["comm", str(FIXTURES / "kineto-h200-gpu-checks.json.gz"), "--json"]) == 0
    (gpu,) = [d for d in json.loads(capsys.readouterr().out)["devices"] if d["device"].endswith("gpu:0")]
    assert events_ms <= gpu["total"]["memcpy_us"] / 1e3 <= 1.05 * events_ms, (gpu["total"], events_ms)
    assert gpu["total"]["communication_us"] == 0  # one rank: NCCL runs no kernel for its all-reduce


def test_why_idle_time_has_no_cause_is_said_for_the_kind_of_device(capsys):
    """A PyTorch trace of CPU ranks launches nothing: comm says so, rather than that the trace lacks the launch
    links PyTorch traces have; a TensorFlow GPU timeline lacks them, and comm says that."""
    gloo = [str(FIXTURES / f"torch-gloo-rank{r}.json.gz") for r in (0, 1)]
    assert main(["comm", *gloo]) == 0
    out = " ".join(capsys.readouterr().out.split())
    line = out[out.index("idle time by cause:"):]
    assert "PyTorch profiler traces do" not in line and "links no launch" not in line
    assert line.startswith("idle time by cause: not for rank0/cpu:0, rank1/cpu:0: ranks without a GPU")
    assert "they launch nothing" in line
    assert main(["comm", str(FIXTURES / "tf1-timeline-gpu-matmul.json")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "idle time by cause: not for gpu:0: the trace links no launch call to this GPU work" in out
