"""Step invariants on every real trace in tests/data, against counts made here from the raw JSON.

* Every GPU event (kernel, copy, memset) is in exactly one step, or counted as outside every step with its
  reason: a GPU event's step is the ``ProfilerStep#N`` range (a host range; ROCm also writes a GPU copy of it,
  which marks nothing) that its launching runtime call (``cudaLaunchKernel``, ``cudaGraphLaunch``,
  ``hipLaunchKernel``... with its correlation id) starts in; without its launch in the trace, or with the launch
  outside every range, it is in no step. ``comm --json``, ``count-ops --json`` and the loader say how many.
* Per-step windows on one device never overlap, and their spans add up to at most the device's span.
* Per-step busy time adds up to the busy time of the selected steps' work (within 1 µs): the union of the raw
  intervals of the GPU events launched in those steps; on a CPU rank (gloo), ``comm``'s own figure for a
  selection of the same steps.
* The two traces whose steps overlap on the GPU (the CPU runs ahead): per-step spans no longer add up to more
  than the trace.

The TF1 timelines in tests/data hold no step markers (one ``session.run`` each), so only the first check applies
to them: nothing is in a step and nothing is counted outside.
"""

import gzip
import json
import re
from collections import Counter
from functools import lru_cache

import numpy as np
import pytest
from rich.console import Console

from fixtures import FILES, FIXTURES, GLOO_PAIRS, KINETO
from rnnprof.cli import main
from rnnprof.events import Kind, outside_steps
from rnnprof.traces import load_events

TF1 = tuple(name for name in FILES if name.startswith("tf1-timeline"))
RUNTIME = ("cuda_runtime", "cuda_driver")
GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
STEP = re.compile(r"ProfilerStep#(\d+)")
NO_LAUNCH, LAUNCHED_OUTSIDE = "no_launch_in_trace", "launched_outside_steps"
OVERLAPPING = ("kineto-2rank-rank1-v100-cudagraph.json.gz", "kineto-16rank-rank0-a100-cudagraph.json.gz")


@lru_cache(maxsize=None)  # every file once: several tests read each
def raw(name: str) -> dict:
    """From the raw JSON: the step ranges, and every GPU event as ``(device, ts, end, step)``, step None when it
    is in no step, with the reason counted."""
    with gzip.open(FIXTURES / name, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    marks = sorted((e["ts"], e["ts"] + e["dur"], int(m.group(1))) for e in events
                   if e.get("cat") != "gpu_user_annotation" and (m := STEP.fullmatch(e.get("name", ""))))

    def step_at(ts):
        inside = [n for start, end, n in marks if start <= ts < end]
        return inside[-1] if inside else None

    def correlation(e):
        args = e.get("args") or {}
        return args.get("correlation", args.get("External id"))

    launch = {correlation(e): e["ts"] for e in events if e.get("cat") in RUNTIME and correlation(e) is not None}
    outside = Counter({NO_LAUNCH: 0, LAUNCHED_OUTSIDE: 0}) if marks else Counter()
    work = []
    for e in events:
        if e.get("cat") not in GPU_WORK:
            continue
        args = e.get("args") or {}
        step = None
        if marks:
            if correlation(e) not in launch:
                outside[NO_LAUNCH] += 1
            else:
                step = step_at(launch[correlation(e)])
                outside[LAUNCHED_OUTSIDE] += step is None
        work.append((args.get("device", e.get("pid")), e["ts"], e["ts"] + e.get("dur", 0), step, e["cat"]))
    return {"steps": sorted({n for _, _, n in marks}), "work": work, "outside": dict(outside)}


def cli_json(*argv) -> dict:
    console = Console(record=True, width=10_000)
    with console.capture() as capture:
        assert main([*argv, "--json"], console=console) == 0
    return json.loads(capture.get())


def union_length(intervals) -> float:
    """Length of the union of ``(start, end)`` intervals (empty ones cover nothing)."""
    total, reach = 0.0, -np.inf
    for start, end in sorted((s, e) for s, e in intervals if e > s):
        if start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def _gpu_work(table):
    on_gpu = np.array([d.kind == "gpu" for d in table.devices] or [False])[table.device]
    return on_gpu & np.isin(table.kind, [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.COMMUNICATION])


@pytest.mark.parametrize("name", KINETO)
def test_every_gpu_event_is_in_one_step_or_counted_outside(name):
    expected = raw(name)
    table = load_events(str(FIXTURES / name))
    work = _gpu_work(table)
    assert work.sum() == len(expected["work"])
    in_steps = Counter(step for *_, step, _ in expected["work"] if step is not None)
    got = Counter(table.step[work].tolist())
    assert outside_steps(table) == expected["outside"]
    if not expected["steps"]:  # no step markers: no step, and nothing counted outside one
        assert set(got) <= {-1} and expected["outside"] == {}
        return
    assert got.pop(-1, 0) == sum(expected["outside"].values()) == len(expected["work"]) - sum(in_steps.values())
    assert got == in_steps
    comm = cli_json("comm", str(FIXTURES / name))
    assert comm["outside_steps"] == {"gpu_events": sum(expected["outside"].values()), "by_reason": expected["outside"]}
    counts = cli_json("count-ops", str(FIXTURES / name))["kernels"]
    assert counts["gpu_outside_steps"] == expected["outside"]
    # count-ops' GPU kernels are those launched in a step (not the kernels that merely start in one)
    kernels = sum(1 for *_, step, cat in expected["work"] if cat == "kernel" and step is not None)
    assert sum(d["gpu_kernels"] for d in counts["devices"]) == kernels


@pytest.mark.parametrize("name", TF1)
def test_tf1_timelines_have_no_steps_so_nothing_is_outside_one(name):
    table = load_events(str(FIXTURES / name))
    assert len(table.steps()) == 0 and outside_steps(table) == {}


MARKED = re.compile(rb'"ProfilerStep#(\d+)"')


@lru_cache(maxsize=None)
def marked_steps(name: str) -> list[int]:
    """The step numbers the file's ProfilerStep markers name, by a search of its text: what choosing the cases
    needs, without parsing every trace at collection on every xdist worker (checked against ``raw`` below)."""
    return sorted({int(n) for n in MARKED.findall(gzip.decompress((FIXTURES / name).read_bytes()))})


@pytest.mark.parametrize("name", KINETO)
def test_the_cases_are_chosen_by_the_steps_the_raw_json_marks(name):
    assert marked_steps(name) == raw(name)["steps"]


WITH_STEPS = [name for name in KINETO if len(marked_steps(name)) >= 1]
CASES = ([((name,), flags) for name in WITH_STEPS for flags in ([], ["--drop-last"])
          if flags == [] or len(marked_steps(name)) >= 2]
         + [(("kineto-sampled-rank0.json.gz", "kineto-sampled-rank1.json.gz"), []),
            *((pair, ["--drop-last"]) for pair in GLOO_PAIRS)])


@pytest.mark.parametrize("names,flags", CASES, ids=lambda v: "+".join(v) if isinstance(v, tuple) else " ".join(v))
def test_step_windows_partition_each_device_and_add_up(names, flags):
    paths = [str(FIXTURES / n) for n in names]
    doc = cli_json("comm", *paths, "--per-step", *flags)
    steps = doc["steps"]
    assert steps
    # The same steps selected as one range: comm's whole-selection figures.
    whole = {d["device"]: d for d in cli_json("comm", *paths, "--steps", f"{steps[0]}:{steps[-1]}")["devices"]}
    for device in doc["devices"]:
        windows = [device["steps"][str(s)] for s in steps if str(s) in device["steps"]]
        assert windows, device["device"]
        for before, after in zip(windows, windows[1:]):
            assert after["start_us"] >= before["end_us"] - 1e-6  # never overlap
        for w in windows:
            assert w["end_us"] >= w["start_us"]
        spans = sum(w["span_us"] for w in windows)
        assert spans <= device["total"]["span_us"] + 1e-6
        busy = sum(w["busy_us"] for w in windows)
        selected = whole[device["device"]]["total"]
        assert busy == pytest.approx(selected["busy_us"], abs=1.0)
        assert spans == pytest.approx(selected["span_us"], abs=1.0)  # windows cover the selected steps' time
        assert sum(w["idle_us"] for w in windows) == pytest.approx(selected["idle_us"], abs=1.0)
        if device["device"].split("/")[-1].startswith("gpu"):  # against the raw JSON
            index = int(device["device"].rsplit(":", 1)[1])
            intervals = [(ts, end) for name in names for dev, ts, end, step, _ in raw(name)["work"]
                         if step in steps and int(dev) == index]
            assert busy == pytest.approx(union_length(intervals), abs=1.0)
        idle = device["idle_by_cause"]
        if idle is not None:
            by_step = sum(idle["steps"][str(s)]["idle_us"] for s in steps if str(s) in idle["steps"])
            assert by_step == pytest.approx(sum(w["idle_us"] for w in windows), abs=1.0)


@pytest.mark.parametrize("name", OVERLAPPING)
def test_steps_that_overlap_on_the_gpu_no_longer_add_up_to_more_than_the_trace(name):
    expected = raw(name)
    kept = expected["steps"][:-1]  # --drop-last
    work = [(ts, end, step) for _, ts, end, step, _ in expected["work"] if step in kept]
    trace_span = max(end for _, end, _ in work) - min(ts for ts, _, _ in work)
    # Spanned by their own events, the steps overlap: their spans add up to more than the trace (the old figure).
    own = sum(max(e for _, e, s in work if s == k) - min(t for t, _, s in work if s == k) for k in kept)
    assert own > 1.1 * trace_span
    doc = cli_json("comm", str(FIXTURES / name), "--per-step", "--drop-last")
    (device,) = doc["devices"]
    assert device["total"]["span_us"] == pytest.approx(trace_span)
    spans = sum(device["steps"][str(k)]["span_us"] for k in kept)
    assert spans <= trace_span + 1e-6
    assert sum(device["steps"][str(k)]["busy_us"] for k in kept) == pytest.approx(device["total"]["busy_us"], abs=1)


def raw_windows(name: str) -> dict[int, tuple[float, float]]:
    """Per step, its window on a trace's one GPU from the raw JSON: from the step's first GPU event (or the previous
    window's start, if later) to the next step's window start; the last to its last event's end."""
    work = [(ts, end, step) for _, ts, end, step, _ in raw(name)["work"] if step is not None]
    steps = sorted({step for _, _, step in work})
    first = {k: min(ts for ts, _, s in work if s == k) for k in steps}
    starts, start = [], -np.inf
    for k in steps:
        start = max(start, first[k])
        starts.append(start)
    starts[0] = min(first.values())
    ends = starts[1:] + [max(end for _, end, _ in work)]
    return {k: (s, e) for k, s, e in zip(steps, starts, ends)}


@pytest.mark.parametrize("name", OVERLAPPING)
def test_per_step_windows_are_those_of_the_raw_json(name):
    doc = cli_json("comm", str(FIXTURES / name), "--per-step")
    (device,) = doc["devices"]
    for step, (start, end) in raw_windows(name).items():
        got = device["steps"][str(step)]
        assert (got["start_us"], got["end_us"]) == pytest.approx((start, end), abs=1e-3, rel=0)


def test_the_reports_median_step_is_measured_by_its_windows():
    from rnnprof.analyzers.classify import classify
    from rnnprof.analyzers.device_work import device_work_mask
    from rnnprof.analyzers.timeline import step_timeline

    name = OVERLAPPING[0]
    table = load_events(str(FIXTURES / name))
    classes = classify(table)
    timeline = step_timeline(table, classes, device_work_mask(table, classes)[0])
    windows = raw_windows(name)
    spans = sorted((end - start, step) for step, (start, end) in windows.items())
    span, step = spans[(len(spans) - 1) // 2]
    assert (timeline.step, timeline.span_us) == (step, pytest.approx(span))
    # its bars are the device's work inside the window, cut at its bounds
    assert min(bar.start_us for bar in timeline.bars) >= -1e-6
    assert max(bar.end_us for bar in timeline.bars) <= span + 1e-6
