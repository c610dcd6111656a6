"""Idle time by cause on small hand-made tables (figures computed by hand in the comments)."""

import numpy as np
import pytest

from rnnprof.analyzers.classify import classify
from rnnprof.analyzers.comm import analyze_comm
from rnnprof.analyzers.device_work import device_work_mask
from rnnprof.analyzers.idle import idle_by_cause
from rnnprof.events import Device, EventTableBuilder, Kind

GPU, HOST = Device("gpu", 0), Device("host")


def table(kernels):
    """``kernels``: (start, end, launch call start or None, stream, step)."""
    b = EventTableBuilder("test")
    for k, (start, end, call, stream, step) in enumerate(kernels):
        if call is not None:
            b.add(call, 1.0, "cudaLaunchKernel", "cudaLaunchKernel", HOST, "1", Kind.RUNTIME, step=step,
                  correlation=k)
        b.add(start, end - start, f"k{k}", f"k{k}", GPU, f"stream:{stream}", Kind.KERNEL, step=step, correlation=k)
    return b.build()


def causes(t, threshold=30.0):
    work, _ = device_work_mask(t, classify(t))
    return idle_by_cause(t, work, threshold)[GPU]


def test_each_cause_on_one_stream():
    t = table([(0, 10, -5, 7, 1),
               (12, 20, 1, 7, 1),     # gap 2, launched before it began (1 < 10), under 30: kernel wait 2
               (100, 110, 50, 7, 1),  # gap 80, launched at 50 after the gap began at 20: host wait 80
               (200, 210, 30, 7, 1)])  # gap 90, launched at 30 before 110, not under 30: other 90
    idle = causes(t)
    assert (idle.total.host_wait_us, idle.total.kernel_wait_us, idle.total.other_us) == (80, 2, 90)
    assert idle.total.idle_us == pytest.approx(analyze_comm(t).devices[0].total.idle_us)
    (stream,) = idle.streams
    assert stream.stream == "stream:7" and stream.total == idle.total
    assert causes(t, threshold=1.0).total.kernel_wait_us == 0 and causes(t, threshold=1.0).total.other_us == 92


def test_a_device_counts_only_gaps_in_the_union_of_its_streams():
    t = table([(0, 50, 0, 7, 1),
               (60, 70, 55, 7, 1),    # stream 7: gap 10 (50..60), launched at 55 > 50: host wait 10
               (20, 65, 10, 8, 1),    # stream 8 covers 20..65: the device is busy 0..70 without a gap
               (100, 120, 90, 8, 1)])  # stream 8: gap 35 (65..100) host wait; device: gap 30 (70..100) host wait
    idle = causes(t)
    assert idle.total.host_wait_us == 30 and idle.total.idle_us == 30
    by_stream = {s.stream: s.total for s in idle.streams}
    assert by_stream["stream:7"].host_wait_us == 10 and by_stream["stream:8"].host_wait_us == 35


def test_per_step_gaps_are_cut_at_the_step_windows():
    t = table([(0, 10, 0, 7, 1), (15, 20, 12, 7, 1),  # step 1: gap 5, launched at 12 > 10: host wait 5
               (50, 60, 5, 7, 2), (61, 70, 6, 7, 2)])  # step 2: gap 1 kernel wait
    idle = causes(t)
    # Step 1's window runs until step 2's first work: the 30 µs between the steps (launched at 5, in time) is
    # step 1's "other"; every gap is in exactly one step.
    assert idle.steps[1].host_wait_us == 5 and idle.steps[1].other_us == 30 and idle.steps[1].idle_us == 35
    assert idle.steps[2].kernel_wait_us == 1 and idle.steps[2].idle_us == 1
    assert idle.total.idle_us == 5 + 30 + 1 == idle.steps[1].idle_us + idle.steps[2].idle_us


def test_a_gap_across_a_step_boundary_is_split_at_the_window():
    # Step 1's second kernel starts after step 2's first (CPU ran ahead on two streams): step 2's window starts
    # at 40, so the stream-7 gap 20..60 (host wait: launched at 45 > 20) is 20 µs in step 1 and 20 in step 2.
    t = table([(0, 20, 0, 7, 1), (60, 70, 45, 7, 1), (40, 80, 1, 8, 2)])
    idle = causes(t)
    stream = {s.stream: s for s in idle.streams}["stream:7"]
    assert stream.total.host_wait_us == 40
    assert stream.steps[1].host_wait_us == 20 and stream.steps[2].host_wait_us == 20


def test_without_launches_there_are_no_causes():
    t = table([(0, 10, None, 7, 1), (20, 30, None, 7, 1)])
    work, _ = device_work_mask(t, classify(t))
    assert idle_by_cause(t, work) == {}
    assert analyze_comm(t).devices[0].idle is None


def test_comm_on_a_tf_trace_says_why_there_are_no_causes(capsys):
    import json

    from fixtures import FIXTURES
    from rnnprof.cli import main

    trace = str(FIXTURES / "tf1-timeline-gpu-loop-step0.json")
    assert main(["comm", trace, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["idle_by_cause"] for d in doc["devices"]] == [None, None]
    assert main(["comm", trace]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "idle time by cause: not for gpu:0: the trace links no launch call" in out
