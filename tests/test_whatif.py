"""rnnprof whatif: the replay of a step's graph across ranks (``rnnprof.analyzers.replay``).

Hand-built steps whose replay is worked out by hand (a collective waiting for a late rank, kernels in stream
order, a call that synchronizes with the GPU); the unchanged replay against the measured step on every real
trace of tests/data; changes a replay cannot express, refused in one line with exit 2.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import statistics
from pathlib import Path

import pytest

from fixtures import FIXTURES as DATA, GLOO_PAIRS
from step_time_oracle import step_times
from rnnprof.analyzers.replay import (COMM, DELAY, FAMILY, GRAPH_LAUNCH, NO_SYNCS, OVERLAP, SCALE, TOLERANCE_PCT, Change,
                                     whatif)
from rnnprof.cli import main
from rnnprof.events import Device, EventTableBuilder, Kind
from rnnprof.traces import load_events

GLOO = [str(DATA / "torch-gloo-rank0.json.gz"), str(DATA / "torch-gloo-rank1.json.gz")]


def _gloo_pair(rank1_a_us: float = 30.0, ranged: tuple | None = None):
    """Two CPU ranks: A on the main thread, then c10d::allreduce_ hands the gradient to gloo's thread, whose
    gloo:all_reduce waits for the other rank's; B follows once the all-reduce is done. Rank 1's A is longer: rank
    0's all-reduce waits for it.
        rank0 main: A [0, 10]  call [10, 12]                       B [52, 60]
        rank0 gloo:                     run [12, 50]
        rank1 main: A [0, 30]  call [30, 32]                       B [52, 60]
        rank1 gloo:                                  run [32, 50]
    ``ranged``: (rank, name, start, duration) of an annotation on that rank's host annotations thread."""
    builder = EventTableBuilder("test")
    if ranged is not None:
        builder.add(ts=ranged[2], dur=ranged[3], name=ranged[1], op_type="user_annotation",
                    device=Device("host", 0, worker=ranged[0]), lane="main", kind=Kind.ANNOTATION, step=0)
    devices = []
    for r, a in ((0, 10.0), (1, rank1_a_us)):
        cpu = Device("cpu", 0, worker=f"rank{r}")
        devices.append(cpu)
        for name, lane, ts, dur, kind in (("A", "main", 0, a, Kind.HOST_OP),
                                          ("c10d::allreduce_", "main", a, 2, Kind.HOST_OP),
                                          ("gloo:all_reduce", "gloo", a + 2, 48 - a, Kind.COMMUNICATION),
                                          ("B", "main", 52, 8, Kind.HOST_OP)):
            builder.add(ts=ts, dur=dur, name=name, op_type=name, device=cpu, lane=lane, kind=kind, step=0)
    builder.metadata = dataclasses.replace(builder.metadata, host_operator_devices=tuple(devices))
    return builder.build()


def test_a_collective_waits_for_its_late_rank_and_finishes_its_transfer_after_it_arrives():
    table = _gloo_pair()
    (step,) = whatif(table, [Change(SCALE, "A", 0.5)]).steps
    assert step.measured_us == step.replayed_us == 60
    # A halves: rank 1 arrives at 15 + 2 = 17, the transfer (50 - 32 = 18) ends at 35, B follows 2 µs later
    assert step.predicted_us == pytest.approx(45)
    waits = {w.rank: (w.measured_us, w.predicted_us) for w in step.waits}
    assert waits["rank0"] == pytest.approx((20, 10)) and waits["rank1"] == (0, 0)
    (comm,) = whatif(table, [Change(COMM, "", 0.5)]).steps  # the transfer halves, the wait stays
    assert comm.predicted_us == pytest.approx(60 - 9)
    # overlapped: B no longer waits for the all-reduce (on rank 1: its call ends at 32, then 2 µs of its own
    # host time before B: [34, 42]); the step still ends with the all-reduce, at 50
    (overlap,) = whatif(table, [Change(OVERLAP)]).steps
    assert overlap.predicted_us == pytest.approx(50)


def test_host_time_added_to_a_rank_delays_its_thread_and_the_ranks_that_wait_for_it():
    """``_gloo_pair``'s step with 30 µs of host time on one rank."""
    table = _gloo_pair()
    # rank 0, at its step's start: A [30, 40], call [40, 42]: it now arrives after rank 1 (32); the transfer (18)
    # ends at 60, and B, 2 µs after the all-reduce as measured, runs [62, 70]; rank 1 now waits 10 µs, rank 0 none
    (start,) = whatif(table, [Change(DELAY, "rank0", delay_ms=0.03)]).steps
    assert start.measured_us == start.replayed_us == 60
    assert start.predicted_us == pytest.approx(70)
    assert {w.rank: w.predicted_us for w in start.waits} == pytest.approx({"rank0": 0, "rank1": 10})
    # before rank 0's call (regex): A [0, 10], 30 µs, the call [40, 42]: the same
    (call,) = whatif(table, [Change(DELAY, "rank0", delay_ms=0.03, before="^c10d::")]).steps
    assert call.predicted_us == pytest.approx(70)
    # before rank 1's B: nothing waits for it; B [82, 90]
    (last,) = whatif(table, [Change(DELAY, "rank1", delay_ms=0.03, before="^B$")]).steps
    assert last.predicted_us == pytest.approx(90)
    # before a range on rank 1's host annotations thread that closed before the step's first operator (the
    # window's start, as a data loader's range does): before A, A [30, 60], its call [60, 62], the transfer ends
    # at 80, B [82, 90]
    ranged = _gloo_pair(ranged=("rank1", "load", -5.0, 4.0))
    (opened,) = whatif(ranged, [Change(DELAY, "rank1", delay_ms=0.03, before="^load$")]).steps
    assert opened.measured_us == opened.replayed_us == 60
    assert opened.predicted_us == pytest.approx(90)
    # with A halved too: rank 0's A [30, 35], its call [35, 37]; rank 1 arrives at 17; the transfer ends at 55,
    # B [57, 65]
    (both,) = whatif(table, [Change(DELAY, "rank0", delay_ms=0.03), Change(SCALE, "A", 0.5)]).steps
    assert both.predicted_us == pytest.approx(5 + 30 + 2 + 18 + 2 + 8)


def test_the_late_rank_set_to_the_others_gap_removes_the_wait_on_every_rank():
    """Rank 1's 20 extra µs are an untraced gap before its call (its A as long as rank 0's): evened out, both
    ranks arrive at 12 and the step ends 20 µs earlier."""
    builder = EventTableBuilder("test")
    devices = []
    for r, gap in ((0, 0.0), (1, 20.0)):
        cpu = Device("cpu", 0, worker=f"rank{r}")
        devices.append(cpu)
        call = 10 + gap
        for name, lane, ts, dur, kind in (("A", "main", 0, 10, Kind.HOST_OP),
                                          ("c10d::allreduce_", "main", call, 2, Kind.HOST_OP),
                                          ("gloo:all_reduce", "gloo", call + 2, 48 - call, Kind.COMMUNICATION),
                                          ("B", "main", 52, 8, Kind.HOST_OP)):
            builder.add(ts=ts, dur=dur, name=name, op_type=name, device=cpu, lane=lane, kind=kind, step=0)
    builder.metadata = dataclasses.replace(builder.metadata, host_operator_devices=tuple(devices))
    report = whatif(builder.build(), [Change("even-host", "")])
    assert report.notes == ("the latest rank at the collectives: rank1",)
    (step,) = report.steps
    assert step.predicted_us == pytest.approx(40)
    assert {w.rank: w.predicted_us for w in step.waits} == {"rank0": 0, "rank1": 0}


def test_the_operators_only_the_late_rank_runs_are_taken_out_and_its_own_ranges_kept():
    """Rank 1 runs X [10, 30], which rank 0 does not, before its call; its B sits in a range only it records:
        rank 0 main: A [0, 10]  call [10, 12]            B [52, 55]
        rank 1 main: A [0, 10]  X [10, 30]  call [30, 32]  log[ B [52, 60] ]
        gloo:        the all-reduce ends at 50 on both (an 18 µs transfer after the last arrival)
    X gone, both ranks arrive at 12, the transfer ends at 30, and rank 1's B, 2 µs later, ends at 40; its range
    "log" stays (were it taken out with B, the step would end at rank 0's B, 35)."""
    builder = EventTableBuilder("test")
    devices = []
    for r, extra in ((0, 0.0), (1, 20.0)):
        cpu, host = Device("cpu", 0, worker=f"rank{r}"), Device("host", 0, worker=f"rank{r}")
        devices.append(cpu)
        call = 10 + extra
        rows = [("A", "main", 0, 10, Kind.HOST_OP), ("c10d::allreduce_", "main", call, 2, Kind.HOST_OP),
                ("gloo:all_reduce", "gloo", call + 2, 48 - call, Kind.COMMUNICATION),
                ("B", "main", 52, 8 if r else 3, Kind.HOST_OP)]
        if r:
            rows.append(("X", "main", 10, 20, Kind.HOST_OP))
            builder.add(ts=52, dur=8, name="log", op_type="user_annotation", device=host, lane="main",
                        kind=Kind.ANNOTATION, step=0)
        for name, lane, ts, dur, kind in rows:
            builder.add(ts=ts, dur=dur, name=name, op_type=name, device=cpu, lane=lane, kind=kind, step=0)
    builder.metadata = dataclasses.replace(builder.metadata, host_operator_devices=tuple(devices))
    table = builder.build()
    (step,) = whatif(table, [Change("even-work", "rank1")]).steps
    assert step.measured_us == step.replayed_us == 60
    assert step.predicted_us == pytest.approx(40)
    assert {w.rank: w.predicted_us for w in step.waits} == {"rank0": 0, "rank1": 0}
    report = whatif(table, [Change("even-work", "")])  # the latest rank, as --fix PF001 without a subject
    assert report.notes == ("the latest rank at the collectives: rank1",)
    assert report.steps[0].predicted_us == pytest.approx(40)
    (unchanged,) = whatif(table, [Change("even-work", "rank0")]).steps  # rank 0 runs nothing rank 1 does not
    assert unchanged.predicted_us == pytest.approx(60)


def test_even_work_on_a_real_rank_takes_out_the_operator_only_it_runs(capsys):
    """tests/data/torch-extra-op-within-jitter: from the raw traces, rank 1 runs one operator rank 0 does not,
    aten::bmm; ``--even-work rank1`` replays each step as removing it by name does."""
    run = DATA / "torch-extra-op-within-jitter" / "run"
    names = []
    for rank in (0, 1):
        with gzip.open(run / "torch" / f"rank{rank}.json.gz", "rt") as f:
            events = json.load(f)["traceEvents"]
        names.append({e["name"] for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"})
    assert names[1] - names[0] == {"aten::bmm"}
    predicted = []
    for change in (["--even-work", "rank1"], ["--scale", "aten::bmm=0"]):
        assert main(["whatif", str(run), *change, "--json"]) == 0
        predicted.append([s["predicted_us"] for s in json.loads(capsys.readouterr().out)["steps"]])
    assert predicted[0] == predicted[1] and len(predicted[0]) == 6


def test_a_ranks_data_loading_on_its_host_annotations_thread_is_evened_out():
    """As a CPU rank's trace has it: the DataLoader's range is an annotation on ``rankN/host`` and the operators
    it encloses are on ``rankN/cpu:0``, the same thread (lane). Rank 1 loads for 22 µs, rank 0 for 2:
        rank r main: stack [0, L]  A [L, L+10]  call [L+10, L+12]          B [52, 60]
        rank r gloo:                             run [L+12, 50]
    Rank 1's loading at rank 0's, it calls at 12 like rank 0, the transfer (50 - 34 = 16) ends at 30, and B,
    2 µs after it as measured, ends at 40."""
    builder = EventTableBuilder("test")
    devices = []
    for r, load in ((0, 2.0), (1, 22.0)):
        cpu, host = Device("cpu", 0, worker=f"rank{r}"), Device("host", 0, worker=f"rank{r}")
        devices.append(cpu)
        builder.add(ts=0, dur=load, name="enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                    op_type="user_annotation", device=host, lane="main", kind=Kind.ANNOTATION, step=0)
        for name, lane, ts, dur, kind in (("aten::stack", "main", 0, load, Kind.HOST_OP),
                                          ("A", "main", load, 10, Kind.HOST_OP),
                                          ("c10d::allreduce_", "main", load + 10, 2, Kind.HOST_OP),
                                          ("gloo:all_reduce", "gloo", load + 12, 38 - load, Kind.COMMUNICATION),
                                          ("B", "main", 52, 8, Kind.HOST_OP)):
            builder.add(ts=ts, dur=dur, name=name, op_type=name, device=cpu, lane=lane, kind=kind, step=0)
    builder.metadata = dataclasses.replace(builder.metadata, host_operator_devices=tuple(devices))
    report = whatif(builder.build(), [Change("even-input", "rank1")])
    (step,) = report.steps
    assert step.measured_us == step.replayed_us == 60
    assert step.predicted_us == pytest.approx(40)


def _gpu_step(sync: bool):
    """One rank: cudaLaunchKernel calls on the host thread at 0 and 5 launch k1 [6, 26] and k2, which queues
    behind k1 on the stream ([26, 36]); with ``sync``, cudaDeviceSynchronize [10, 40] waits for the GPU, and X
    [41, 45] follows it (measured: the step ends at 45)."""
    builder = EventTableBuilder("test")
    host, gpu = Device("host", 0, worker="rank0"), Device("gpu", 0, worker="rank0")
    events = [("cudaLaunchKernel", host, "thread 1", 0, 5, Kind.RUNTIME, 1),
              ("cudaLaunchKernel", host, "thread 1", 5, 5, Kind.RUNTIME, 2),
              ("k1", gpu, "stream 7", 6, 20, Kind.KERNEL, 1), ("k2", gpu, "stream 7", 26, 10, Kind.KERNEL, 2)]
    if sync:
        events += [("cudaDeviceSynchronize", host, "thread 1", 10, 30, Kind.RUNTIME, -1),
                   ("X", host, "thread 1", 41, 4, Kind.HOST_OP, -1)]
    for name, device, lane, ts, dur, kind, corr in events:
        builder.add(ts=ts, dur=dur, name=name, op_type=name, device=device, lane=lane, kind=kind, step=0,
                    correlation=corr)
    return builder.build()


def test_kernels_keep_their_stream_order():
    (step,) = whatif(_gpu_step(sync=False), [Change(SCALE, "k1", 0.5)]).steps
    assert step.measured_us == step.replayed_us == 36
    assert step.predicted_us == pytest.approx(26)  # k1 [6, 16], k2 right behind it [16, 26]
    (slower,) = whatif(_gpu_step(sync=False), [Change(SCALE, "k1", 2.0)]).steps
    assert slower.predicted_us == pytest.approx(6 + 40 + 10)


def test_a_synchronizing_call_waits_for_the_gpu_and_no_longer_when_removed():
    table = _gpu_step(sync=True)
    (step,) = whatif(table, [Change(SCALE, "k1", 0.5)]).steps
    assert step.measured_us == step.replayed_us == 45
    # the call waited for k2 (ended at 36) and then took 4 µs of its own: k2 now ends at 26, the call returns at
    # 30, X follows 1 µs later: [31, 35]
    assert step.predicted_us == pytest.approx(35)
    (removed,) = whatif(table, [Change(NO_SYNCS)]).steps
    assert removed.predicted_us == pytest.approx(36)  # X no longer waits; the GPU's work still ends at 36
    assert {w.rank: (w.measured_us, w.predicted_us) for w in step.waits} == {"rank0": (26, 16)}


REAL = sorted(p.name for p in DATA.glob("*.json*") if p.name.startswith(("kineto-", "tf1-", "torch-")))


PAIRS = {f"{first.removesuffix('-rank0.json.gz')} pair": [str(DATA / first), str(DATA / second)]
         for first, second in GLOO_PAIRS}  # "torch-gloo pair", ...
# the sharded, sliced, pipelined and hybrid jobs, their ranks together
PAIRS.update({f"torch-gloo-{job}-collectives job": [str(DATA / f"torch-gloo-{job}-collectives-rank{r}.json.gz")
                                                    for r in range(4 if job == "hsdp" else 2)]
              for job in ("fsdp2", "tp", "pp", "hsdp")})
# the same jobs on one H200 over nccl (every rank on the one GPU)
PAIRS.update({f"torch-nccl-{job}-collectives job": [str(DATA / f"torch-nccl-{job}-collectives-rank{r}.json.gz")
                                                    for r in range(4 if job == "hsdp" else 2)]
              for job in ("fsdp2", "tp", "pp", "hsdp")})
PAIRS.update({f"torch-gloo-{job} run": [str(DATA / f"torch-gloo-{job}" / "torch" / f"rank{r}.json.gz") for r in (0, 1)]
              for job in ("fsdp", "pp", "tp")})  # the tp run's first operator encloses 1.7 ms before its first leaf
CPU_US = 5.0  # a CPU rank's step: the replay's window from its first operator, an enclosing one too


@pytest.mark.parametrize("name", [*REAL, *PAIRS])
def test_the_unchanged_replay_reproduces_each_step_the_raw_trace_measures(name):
    """Each step's time from the trace's raw JSON alone (``step_time_oracle``: its events' first start to last
    end, GPU work by its launch), not from the replay's graph that ``calibrate`` fits to: the unchanged replay is
    within TOLERANCE_PCT of it, with no reason to give, in every step of every real trace."""
    paths = PAIRS[name] if name in PAIRS else [str(DATA / name)]
    table = load_events(paths if len(paths) > 1 else paths[0])
    report = whatif(table, [Change(SCALE, table.strings[int(table.name[0])], 1.0)])
    raw = step_times([Path(p) for p in paths])
    assert [s.step for s in report.steps] == sorted(raw)
    for step in report.steps:
        off = abs(step.replayed_us - raw[step.step]) / raw[step.step] * 100
        assert off <= TOLERANCE_PCT and not step.reasons, (step.step, raw[step.step], step.replayed_us, step.reasons)
        assert step.predicted_us == pytest.approx(step.replayed_us, rel=1e-9)  # a factor of 1 changes nothing
        if "gloo" in name:  # host threads only: each step to a few µs, an operator preempted before its first inner
            # operator included
            assert abs(step.replayed_us - raw[step.step]) <= CPU_US, (step.step, raw[step.step], step.replayed_us)


def test_a_step_that_first_waits_for_the_previous_steps_gpu_work_is_timed_from_that_works_end():
    """rnnprof's capture of benchmarks/gpu_checks.py on an H200: each step starts with torch.cuda.synchronize(),
    which waits for the previous step's kernels, so the steps' windows overlap by about 4 ms. The oracle is the
    script's own clock: CUDA events around each step (h200-gpu-checks-clock.json). Timed from its window's
    start, a step counted that wait twice (14.7 and 15.4 ms for steps of 10.1)."""
    rows = {r["step"]: r for r in json.loads((DATA / "h200-gpu-checks-clock.json").read_text())["steps"]}
    table = load_events(str(DATA / "kineto-h200-gpu-checks.json.gz"))
    report = whatif(table, [Change(FAMILY, "GEMM", 0.5)])
    measured = {s.step: s.measured_us / 1e3 for s in report.steps}
    assert sorted(measured) == [3, 4, 5, 6]
    for step in (4, 5):  # after the window's first step; step 6 closes the window, its events include the writing
        assert measured[step] == pytest.approx(rows[step]["step_ms"], rel=0.10), (step, measured[step], rows[step])
    matmul_ms = statistics.median(rows[s]["matmul_ms"] for s in (4, 5))
    for step in report.steps:  # half the products' time off each step, give or take the other GEMMs (< 0.3 ms)
        saved = step.measured_us / 1e3 - step.predicted_us / 1e3
        assert matmul_ms / 2 <= saved <= matmul_ms / 2 + 0.3, (step.step, saved, matmul_ms)


@pytest.mark.parametrize("name", ["kineto-1gpu-v100.json.gz", "kineto-16rank-rank0-a100-cudagraph.json.gz"])
def test_a_gpu_bound_steps_replayed_time_is_its_profilersteps_length(name):
    """Two real GPU-bound traces (HTA's): the host runs ahead of the GPU, so each step's window opens while the
    GPU still runs the step before. The oracle is the trace's own ProfilerStep#N ranges, read from its JSON:
    once the GPU's queue is full, each lasts the loop's period. Timed from the window's start, the V100's steps
    were 184 ms, the A100's 376."""
    with gzip.open(DATA / name, "rt") as f:
        events = json.load(f)["traceEvents"]
    marks = {int(e["name"].split("#")[1]): e["dur"] for e in events
             if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")}
    report = whatif(load_events(str(DATA / name)), [Change(FAMILY, "GEMM", 1.0)])
    steps = {s.step: s.measured_us for s in report.steps}
    assert sorted(steps) == sorted(marks)
    full = [s for s in sorted(marks)[1:] if marks[s] >= 0.98 * max(marks.values())]  # the queue full
    assert len(full) >= 3
    for step in full:
        assert steps[step] == pytest.approx(marks[step], rel=0.02), (step, steps[step], marks[step])


@pytest.mark.parametrize("name", ["kineto-16rank-rank0-a100-cudagraph.json.gz", "kineto-mi300x-8rank-ddp-rank0.json.gz",
                                  "kineto-2rank-rank1-v100-cudagraph.json.gz", "kineto-h200-whatif-host-sleep.json.gz"])
def test_a_traces_first_step_is_timed_from_the_end_of_the_untraced_steps_gpu_work(name):
    """The trace's first step opens while the GPU still runs work of the step before it, which the trace holds
    but whose launches it does not: that work is no step's. Timed from the window's start, the first step of
    the A100 trace took 370 ms against 216 for the others, the MI300X's 48 against 19."""
    steps = [s.measured_us for s in whatif(load_events(str(DATA / name)), [Change(FAMILY, "GEMM", 1.0)]).steps]
    assert len(steps) >= 3
    assert steps[0] == pytest.approx(statistics.median(steps[1:]), rel=0.05), steps


def test_copies_removed_save_what_the_scripts_events_timed_and_a_kind_saves_its_share(capsys):
    """The H200 script copies 64 MB host to device, back, and within the device once a step; its CUDA events
    around the three copies are the oracle. Removing every copy saves that much a step; removing one kind
    (as audit replays a PF004 finding about HtoD copies) saves about its half of the two equal PCIe copies."""
    rows = json.loads((DATA / "h200-gpu-checks-clock.json").read_text())["steps"]
    copies_ms = statistics.median(r["copies_ms"] for r in rows if r["step"] in (4, 5))
    trace = str(DATA / "kineto-h200-gpu-checks.json.gz")
    saved = {}
    for kind in ("", "HtoD", "DtoH"):
        assert main(["whatif", trace, "--no-copies", *([kind] if kind else []), "--json"]) == 0
        median = json.loads(capsys.readouterr().out)["median"]
        saved[kind] = (median["replayed_us"] - median["predicted_us"]) / 1e3
    assert saved[""] == pytest.approx(copies_ms, rel=0.10), (saved, copies_ms)
    for kind in ("HtoD", "DtoH"):
        assert 0.4 * copies_ms <= saved[kind] <= 0.55 * copies_ms, (saved, copies_ms)


def _median_step_ms(clock: dict) -> float:
    """The script's median step (CUDA events) after the warm-up (steps 0-2), the capture's closing step (6) left out."""
    return statistics.median(r["step_ms"] for r in clock["steps"] if r["step"] >= 3 and r["step"] != 6)


@pytest.mark.parametrize("run, change", [
    ("fewer-matmuls", ["--scale", "aten::matmul=0.4"]),  # 2 of the 5 products
    ("no-copies", ["--no-copies"]),
    ("no-htod", ["--no-copies", "HtoD"]),
    ("host-sleep", ["--delay", "rank0=3@^aten::matmul$"]),  # time.sleep(0.003) before the products
])
def test_a_replay_of_the_h200_base_run_predicts_the_run_really_changed(run, change, capsys):
    """benchmarks/gpu_checks.py on an H200: the base run and each run really changed, all captured by rnnprof;
    the oracle is each script's own clock (CUDA events around the step). The replay of the base trace with the
    change predicts the change of the step within 5 % of the step (the H200 gave 0.0-0.1 ms of 10 ms)."""
    clocks = json.loads((DATA / "h200-whatif-clocks.json").read_text())
    base, changed = _median_step_ms(clocks["base"]), _median_step_ms(clocks[run])
    assert main(["whatif", str(DATA / "kineto-h200-whatif-base.json.gz"), *change, "--json"]) == 0
    median = json.loads(capsys.readouterr().out)["median"]
    predicted = (median["predicted_us"] - median["replayed_us"]) / 1e3
    assert abs(predicted - (changed - base)) <= 0.05 * base, (run, predicted, changed - base)


def test_a_graph_launch_replayed_on_a_launch_bound_step_saves_about_what_a_cuda_graph_really_saved():
    """benchmarks/gpu_checks.py's launch-bound step on an H200: 400 elementwise kernels of about 1 us, each issued
    by the host (eager, ~10 us apart), or all replayed from one CUDA graph, each run under rnnprof trace; the
    oracle is each script's clock over its untraced steps (7-9: a traced step carries the profiler's cost, more
    so in a graph, whose kernels it traces one by one). A graph does away with the launch calls and with the
    dispatch that issues each kernel; the share of the step left is compared, as the traced and untraced steps'
    lengths differ. Keeping the host's dispatch, the replay left 58 % of the step where the graph left 15 %."""
    clocks = json.loads((DATA / "h200-launch-clocks.json").read_text())
    untraced = {mode: statistics.median(r["step_ms"] for r in clocks[mode]["steps"] if r["step"] >= 7)
                for mode in ("eager", "graph")}
    left = untraced["graph"] / untraced["eager"]
    report = whatif(load_events(str(DATA / "kineto-h200-launch-eager.json.gz")), [Change(GRAPH_LAUNCH)])
    predicted = statistics.median(s.predicted_us / s.replayed_us for s in report.steps)
    assert abs(predicted - left) <= 0.10, (predicted, left, untraced)


def test_gemms_scaled_shorten_a_gpu_step_by_at_most_their_share():
    table = load_events(str(DATA / "kineto-h100-bert-small-shapes.json.gz"))
    half = whatif(table, [Change(FAMILY, "GEMM", 0.5)])
    none = whatif(table, [Change(FAMILY, "GEMM", 0.0)])
    for h, z in zip(half.steps, none.steps):
        assert z.predicted_us <= h.predicted_us <= h.measured_us
        assert h.measured_us - h.predicted_us <= (h.measured_us - z.predicted_us) + 1e-6


def test_json_says_which_step_time_is_measured_and_which_predicted(capsys):
    assert main(["whatif", *GLOO, "--fix", "PF001:rank1", "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["schema_version"] == 1
    # two rank files are a job, read rank by rank: each keeps its host operators for the fix's third change
    assert [c["kind"] for c in doc["changes"]] == ["even-host", "even-input", "even-work"]
    assert "not replayed" not in err
    for step in doc["steps"]:
        assert step["measured_us"] > 0 and step["predicted_us"] > 0
        assert step["change_us"] == pytest.approx(step["predicted_us"] - step["measured_us"])
    # a balanced run: evening out a rank that is no straggler changes its median step by little
    assert abs(doc["median"]["predicted_us"] / doc["median"]["measured_us"] - 1) < 0.05


@pytest.mark.parametrize("argv, words", [
    (["--fuse", "aten::add,aten::mul"], "cannot express fusing"),
    (["--threads", "4"], "cannot express a different thread count"),
    (["--devices", "8"], "cannot express more or fewer devices"),
    (["--fix", "PA004"], "placement fix"),
    (["--fix", "PF003"], "several causes"),
    (["--fix", "PF999"], "no audit rule"),
    ([], "no change given"),
    (["--no-copies", "HtoX"], "no copy kind 'HtoX'"),
    (["--fix", "PF004:HtoX"], "no copy kind 'HtoX'"),
    (["--scale", "aten::mm"], "expected OP=F"),
    (["--scale", "no::such_op=0.5"], "no event or operator named"),
    (["--even-host", "rank7"], "no rank 'rank7'"),
    (["--even-work", "rank7"], "no rank 'rank7'"),
    (["--delay", "rank7=40"], "no rank 'rank7'"),
    (["--delay", "rank1"], "expected RANK=MS"),
    (["--delay", "rank1=soon"], "is not a number of ms"),
    (["--delay", "rank1=-5"], "0 ms or more"),
    (["--delay", "rank1=40@"], "nothing after '@'"),
    (["--delay", "rank1=40@(unclosed"], "no regular expression"),
    (["--delay", "rank1=40@^no::such_op$"], "no event or operator matching"),
])
def test_a_change_that_cannot_be_replayed_is_one_line_and_exit_2(argv, words, capsys):
    assert main(["whatif", *GLOO, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1, err


def test_a_straggler_fix_needs_two_ranks(capsys):
    assert main(["whatif", GLOO[0], "--fix", "PF001"]) == 2
    assert "needs two or more ranks" in capsys.readouterr().err


def test_audit_takes_a_findings_saving_from_a_replay_of_its_fix_and_says_which_keep_their_bound(capsys):
    assert main(["audit", *GLOO, "--json", "--fail-on", "never"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_rule = {f["rule"]: f for f in doc["findings"]}
    replayed = by_rule["PF002"]  # exposed communication: its fix, communication overlapped, is a replay
    assert replayed["saving_basis"].startswith("replay of its fix (communication overlapped with compute)")
    assert replayed["evidence"]["bound_ms"] > 0 and replayed["evidence"]["bound_basis"]
    overlap = whatif(load_events(GLOO), [Change(OVERLAP)])
    expected = statistics.median(s.replayed_us - s.predicted_us for s in overlap.steps) / 1000
    assert replayed["saving_ms"] == pytest.approx(expected, abs=1e-3)
    kept = by_rule["PA004"]  # a placement fix: no replay, its bound kept and a note says why
    assert not kept["saving_basis"].startswith("replay")
    assert any(n.startswith("PA004 keeps its bound: PA004: a placement fix") for n in doc["notes"])
    assert any(n.startswith("replay: fixing PF002 rank0 together saves") for n in doc["notes"])


MONOTONE = ["kineto-event-sync.json.gz", "kineto-1gpu-v100.json.gz", "kineto-2rank-nccl-rank0.json.gz",
            "kineto-mi250-rocm.json.gz"]


@pytest.mark.parametrize("name", MONOTONE)
def test_less_work_or_fewer_dependencies_never_lengthen_a_step(name):
    """Every replayed time is a maximum of sums: removing copies, syncs or launch waits, or shortening
    communication, can only move each node earlier."""
    from rnnprof.analyzers.replay import GRAPH_LAUNCH, NO_COPIES, Replayer

    replayer = Replayer(load_events(str(DATA / name)))
    for changes in ([Change(NO_COPIES)], [Change(NO_SYNCS)], [Change(GRAPH_LAUNCH)], [Change(COMM, "", 0.5)],
                    [Change(NO_COPIES), Change(NO_SYNCS), Change(GRAPH_LAUNCH)]):
        for step in replayer.run(changes).steps:
            assert step.predicted_us <= step.replayed_us + 1e-6, (changes, step.step)


@pytest.mark.parametrize("fix, flag", [("PF007", "--graph-launch"), ("PF004", "--no-copies"),
                                       ("PF004:syncs", "--no-syncs"), ("PF002", "--overlap-comm")])
def test_an_audit_rules_fix_is_the_change_it_names(fix, flag, capsys):
    trace = str(DATA / "kineto-event-sync.json.gz")
    docs = []
    for argv in (["--fix", fix], [flag]):
        assert main(["whatif", trace, *argv, "--json"]) == 0
        docs.append(json.loads(capsys.readouterr().out))
    assert [s["predicted_us"] for s in docs[0]["steps"]] == [s["predicted_us"] for s in docs[1]["steps"]]
    assert docs[0]["changes"] == docs[1]["changes"]


@pytest.mark.parametrize("name", ["kineto-2rank-nccl-rank0.json.gz", "kineto-event-sync.json.gz", "torch-gloo pair"])
def test_the_replay_by_levels_gives_the_node_by_node_schedule_exactly(name, monkeypatch):
    """A wide graph (a job's ranks side by side) is replayed a level at a time in arrays, a narrow one node by
    node in ``order``; forced each way on the same graphs, unchanged, with durations changed, and in an order
    that puts sources after their targets (their times read as zero), the two schedules are equal bit for bit."""
    import numpy as np

    from rnnprof.analyzers.replay import Replayer, engine

    graphs = Replayer(load_events(GLOO if name == "torch-gloo pair" else str(DATA / name))).graphs
    assert graphs
    for _, sg in graphs:
        g = sg.graph
        order, keep = engine.replay_order(g)
        base = engine.calibrate(g, keep)
        shuffled = np.random.default_rng(0).permutation(g.size)
        for run_order, dur in ((order, g.dur), (order, g.dur * 0.37), (shuffled, g.dur)):
            schedules = []
            for width in (0, g.size + 1):
                monkeypatch.setattr(engine, "_MIN_WIDTH", width)
                monkeypatch.setattr(engine, "_PROBE_LEVELS", 1)
                schedules.append(engine.replay(g, run_order, keep, dur, g.pre, g.lag, base))
            by_levels, in_order = schedules
            for field in ("start", "end", "ready", "bind"):
                assert np.array_equal(getattr(by_levels, field), getattr(in_order, field)), field


@pytest.mark.parametrize("name", ["kineto-2rank-nccl-rank0.json.gz", "kineto-event-sync.json.gz", "torch-gloo pair"])
def test_a_replayer_that_shares_each_steps_unchanged_replay_gives_each_change_sets_own_replay(name, monkeypatch):
    """``Replayer.run`` makes each step's unchanged replay once and replays a change set from it (its order, and
    its levels where the change only drops edges). Each step's predicted time is the one a replay made from
    scratch gives: order, calibration, the changes applied, the levels of the changed graph's own edges (forced
    by levels, where a reused layering would show)."""
    from rnnprof.analyzers.replay import NO_COPIES, Replayer, engine
    from rnnprof.analyzers.replay.analysis import replayed_step_time
    from rnnprof.analyzers.replay.changes import Knobs, apply

    monkeypatch.setattr(engine, "_MIN_WIDTH", 0)
    replayer = Replayer(load_events(GLOO if name == "torch-gloo pair" else str(DATA / name)))
    for changes in ([Change(OVERLAP)], [Change(NO_SYNCS), Change(GRAPH_LAUNCH)], [Change(NO_COPIES)],
                    [Change(COMM, "", 0.5)], [Change(OVERLAP), Change(NO_SYNCS)]):
        shared = replayer.run(changes).steps
        for (step, sg), replayed in zip(replayer.graphs, shared):
            g = sg.graph
            order, keep = engine.replay_order(g)
            base = engine.calibrate(g, keep)
            knobs = Knobs(g, g.dur.copy(), g.pre.copy(), g.lag.copy(), keep.copy(), base.copy())
            for change in changes:
                apply(change, sg, knobs, change.subject)
            after = engine.replay(knobs.graph, engine.replay_order(knobs.graph)[0], knobs.keep, knobs.dur, knobs.pre,
                                  knobs.lag, knobs.base)
            assert replayed.predicted_us == replayed_step_time(g, after.end), (changes, step)
