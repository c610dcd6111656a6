"""Synchronizing calls and the GPU idle time they leave (rnnprof.analyzers.syncs, PF004's sync finding), and the
pageable copies of PF004: on a hand-built trace and on real ones, against figures read from the raw JSON."""

from __future__ import annotations

import gzip
import json

import pytest

from fixtures import FIXTURES
from rnnprof.analyzers.audit import audit
from rnnprof.analyzers.classify import classify
from rnnprof.analyzers.copies import exposed_copies
from rnnprof.analyzers.syncs import sync_stalls
from rnnprof.events import Device, EventTableBuilder, Kind
from rnnprof.traces import load_events


def _table():
    """rank0's GPU runs A [0, 100], B [150, 200], C [400, 450]; its host calls:

    * cudaStreamSynchronize [50, 101]: returns in the gap 100-150, the GPU went idle at 100: costs 50;
    * cudaDeviceSynchronize [120, 125]: returns in the same gap, counted once (on the earliest call): 0;
    * cudaStreamSynchronize [160, 170]: returns while B runs: 0;
    * cudaEventSynchronize [250, 260]: returns in the gap 200-400, but the GPU was idle before it started: 150;
    * cudaMemcpyAsync and cudaLaunchKernel: not synchronizing.
    rank1's GPU (idle 100-300) and its own call show that calls count only on their process's GPUs."""
    builder = EventTableBuilder("test")
    gpu, host = Device("gpu", 0, "rank0"), Device("host", 0, "rank0")
    for name, ts, dur in (("A", 0, 100), ("B", 150, 50), ("C", 400, 50)):
        builder.add(ts=ts, dur=dur, name=name, op_type=name, device=gpu, lane="stream 7", kind=Kind.KERNEL, step=0)
    for name, ts, dur in (("cudaStreamSynchronize", 50, 51), ("cudaDeviceSynchronize", 120, 5),
                          ("cudaStreamSynchronize", 160, 10), ("cudaEventSynchronize", 250, 10),
                          ("cudaMemcpyAsync", 300, 5), ("cudaLaunchKernel", 310, 5)):
        builder.add(ts=ts, dur=dur, name=name, op_type=name, device=host, lane="thread 1", kind=Kind.RUNTIME,
                    step=0)
    other = Device("gpu", 1, "rank1")
    for name, ts, dur in (("D", 0, 100), ("E", 300, 50)):
        builder.add(ts=ts, dur=dur, name=name, op_type=name, device=other, lane="stream 7", kind=Kind.KERNEL, step=0)
    builder.add(ts=200, dur=10, name="cudaStreamSynchronize", op_type="cudaStreamSynchronize",
                device=Device("host", 0, "rank1"), lane="thread 1", kind=Kind.RUNTIME, step=0)
    return builder.build()


def test_a_synchronizing_call_costs_the_gpu_idle_time_from_its_return_to_the_next_work():
    table = _table()
    stalls = sync_stalls(table, classify(table))
    assert set(stalls) == {("rank0/gpu:0", 0), ("rank1/gpu:1", 0)}
    mine = stalls[("rank0/gpu:0", 0)]
    assert mine.calls == 4 and mine.host_us == pytest.approx(51 + 5 + 10 + 10)
    assert mine.idle_after_us == pytest.approx(50 + 150)
    theirs = stalls[("rank1/gpu:1", 0)]  # rank1's call [200, 210] returns in its GPU's gap 100-300
    assert theirs.calls == 1 and theirs.idle_after_us == pytest.approx(300 - 200)


def _raw(path):
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def _raw_idle_after_syncs(events):
    """From the raw JSON, with no step selection: GPU busy intervals (kernel, gpu_memcpy, gpu_memset), merged; for
    every gap, the earliest synchronizing call returning in it; its cost as the module defines it."""
    busy = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                  if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    merged = []
    for s, e in busy:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    calls = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X" and e.get("cat") == "cuda_runtime"
             and e["name"] in ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize")]
    booked = {}
    for start, end in calls:
        for k in range(len(merged) - 1):
            if merged[k][1] <= end < merged[k + 1][0]:
                if k not in booked or start < booked[k][0]:
                    booked[k] = (start, max(merged[k + 1][0] - max(merged[k][1], start), 0.0))
    return len(calls), sum(cost for _, cost in booked.values())


def test_sync_stalls_of_a_real_trace_match_the_raw_json():
    # kineto-simple-add has no step markers: one step (-1), every call counted
    path = FIXTURES / "kineto-simple-add.json.gz"
    calls, idle = _raw_idle_after_syncs(_raw(path))
    table = load_events(str(path))
    (stall,) = sync_stalls(table, classify(table)).values()
    assert stall.calls == calls == 21
    assert stall.idle_after_us == pytest.approx(idle, abs=1.0)


def test_pageable_copies_are_told_from_pinned_ones_by_their_names():
    path = FIXTURES / "kineto-simple-add.json.gz"
    raw = [e for e in _raw(path) if e.get("cat") == "gpu_memcpy"]
    table = load_events(str(path))
    (copies,) = [c for (kind, _, _), c in exposed_copies(table).items() if kind == "HtoD"]
    assert copies.pageable == sum("Pageable" in e["name"] for e in raw) == 16
    assert copies.pageable_us == pytest.approx(sum(e["dur"] for e in raw if "Pageable" in e["name"]), abs=0.01)
    (churn,) = [f for f in audit(table).findings if f.rule == "PF004" and f.evidence["kind"] == "HtoD"]
    assert churn.evidence["pageable_per_step"] == 16 and "pin_memory" in churn.fix
    # a rank whose host-to-device copies all come from pinned memory is not told to pin it
    pinned = load_events(str(FIXTURES / "kineto-8rank-rank3-a100.json.gz"))
    (churn,) = [f for f in audit(pinned).findings if f.rule == "PF004" and f.evidence["kind"] == "HtoD"]
    assert churn.evidence["pageable_per_step"] == 0 and "pin_memory" not in churn.fix


def test_calls_outside_every_step_are_in_no_step():
    # kineto-1gpu-v100: its one cudaDeviceSynchronize lies outside the ProfilerStep ranges
    table = load_events(str(FIXTURES / "kineto-1gpu-v100.json.gz"))
    assert set(sync_stalls(table, classify(table))) == {("rank0/gpu:0", -1)}
    assert not [f for f in audit(table).findings if f.rule == "PF004" and f.evidence["kind"] == "sync"]
