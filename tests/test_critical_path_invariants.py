"""Invariants of the critical path on every real trace in tests/data (Kineto ranks, the gloo pair joined, TF1
timelines), with figures the tests compute themselves from the events and the raw JSON.

* The wait a path books on a device is at most that device's idle time in the path's window (the window's
  length less the union of the device's events, of any step, in it).
* On the GPU-bound kineto-1gpu-v100 trace (its host runs ahead, the GPU ~98% busy): the path's wait share is
  below the GPU's idle share, and each step's path is about the step's period (ProfilerStep#N in the raw JSON),
  not twice it.
"""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from fixtures import FILES, FIXTURES, GLOO_PAIRS, KINETO
from rnnprof.analyzers.classify import EventClass, classify
from rnnprof.analyzers.critical_path import Dependencies, analyze_critical_path
from rnnprof.traces import load_events

GLOO = GLOO_PAIRS[0]
INPUTS = [(name,) for name in KINETO if not any(name in pair for pair in GLOO_PAIRS)] + list(GLOO_PAIRS) + \
    [(name,) for name in FILES if name.startswith("tf1-timeline-")] + \
    [tuple(f"torch-gloo-{job}/torch/rank{r}.json.gz" for r in (0, 1)) for job in ("fsdp", "tp", "pp")] + \
    [tuple(f"torch-gloo-hsdp-collectives-rank{r}.json.gz" for r in range(4))] + \
    [tuple(f"torch-nccl-{job}-collectives-rank{r}.json.gz" for r in range(n)) for job, n in (("pp", 2), ("hsdp", 4))]
# sharded, sliced, pipelined, hybrid; the last two on one H200 over nccl (a pipeline's fused send/receive kernels)
V100 = "kineto-1gpu-v100.json.gz"


def _union_in(starts, ends, a, b) -> float:
    """Length of the union of ``[starts, ends)`` within ``[a, b]``."""
    s, e = np.clip(starts, a, b), np.clip(ends, a, b)
    keep = e > s
    total, reach = 0.0, a
    for x, y in sorted(zip(s[keep].tolist(), e[keep].tolist())):
        if y > reach:
            total += y - max(x, reach)
            reach = y
    return total


def _idle(table, classes, label, a, b) -> float:
    code = [d.label for d in table.devices].index(label)
    rows = np.flatnonzero((table.device == code) & (classes != EventClass.ANNOTATION) & (table.dur > 0))
    return (b - a) - _union_in(table.ts[rows], table.ts[rows] + table.dur[rows], a, b)


@pytest.fixture(scope="module", params=INPUTS, ids=lambda names: "+".join(names))
def analysed(request):
    paths = [str(FIXTURES / name) for name in request.param]
    table = load_events(paths[0] if len(paths) == 1 else paths)
    return request.param, table, analyze_critical_path(table, what_if_ops=0)


def test_a_paths_wait_on_a_device_is_at_most_its_idle_time_in_the_window(analysed):
    names, table, report = analysed
    classes = classify(table)
    assert report.steps
    for step in report.steps:
        a = step.window_us[0]
        b = a + step.length_us
        for label, wait in step.wait_by_device.items():
            # wall-clock times near 1.7e15 µs keep 0.25 µs: each wait and each idle gap may round by that much
            waits = sum(1 for link in step.links if link.device == label and link.wait_us > 0)
            assert wait <= _idle(table, classes, label, a, b) + 1.0 + 0.5 * waits, (names, step.step, label)
        # what the path books adds up to its length, from the window's start to its end
        assert sum(step.by_class.values()) == pytest.approx(step.length_us, rel=1e-6, abs=1.0)
        assert step.length_us <= step.span_us + 1.0
        assert sum(step.wait_by_device.values()) == pytest.approx(step.by_class.get("wait", 0.0), abs=1.0)


@pytest.fixture(scope="module")
def v100():
    with gzip.open(FIXTURES / V100, "rt") as f:
        raw = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    periods = {int(e["name"].split("#")[1]): float(e["dur"]) for e in raw
               if str(e.get("name", "")).startswith("ProfilerStep#")}
    gpu = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in raw
           if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    table = load_events(str(FIXTURES / V100))
    return periods, np.array(gpu), analyze_critical_path(table, what_if_ops=0)


def test_gpu_bound_path_waits_less_than_the_gpu_idles(v100):
    periods, gpu, report = v100
    assert len(report.steps) == len(periods) == 5
    path = sum(s.length_us for s in report.steps)
    wait = sum(s.by_class.get("wait", 0.0) for s in report.steps)
    # the GPU's idle share over the same windows, from the raw kernels and copies
    span = sum(s.length_us for s in report.steps)
    busy = sum(_union_in(gpu[:, 0], gpu[:, 1], s.window_us[0], s.window_us[0] + s.length_us) for s in report.steps)
    idle_share = 1 - busy / span
    assert wait / path < idle_share, (wait / path, idle_share)


def test_gpu_bound_paths_last_about_a_step_period(v100):
    """The job's period is the median ProfilerStep (95.5 ms; the first two are shorter as the host runs ahead
    until the GPU's queue holds it back): every step's path is about that long, not twice it."""
    periods, _, report = v100
    period = float(np.median(list(periods.values())))
    for step in report.steps:
        assert step.length_us == pytest.approx(period, rel=0.05), (step.step, step.length_us, period)


@pytest.mark.parametrize("names", [("kineto-sampled-rank0.json.gz", "kineto-sampled-rank1.json.gz"), GLOO, (V100,)],
                         ids=lambda names: "+".join(names))
def test_each_what_if_is_the_longest_path_passed_again_with_that_op_weighing_nothing(names):
    """The what-if's shortcut (through the op, before it, after it, over an edge across it) against a whole new
    pass over the DAG with the op's duration set to zero."""
    import copy

    from rnnprof.analyzers.critical_path.graph import StepDAG
    from rnnprof.analyzers.critical_path.path import LongestPath
    from rnnprof.analyzers.critical_path.table_index import TableIndex, dag_windows

    table = load_events([str(FIXTURES / n) for n in names] if len(names) > 1 else str(FIXTURES / names[0]))
    deps = Dependencies()
    tt = TableIndex(table, classify(table), deps)
    steps = [int(s) for s in table.steps()]
    windows = dag_windows(tt, steps)
    checked = 0
    for step in steps[:2]:
        dag = StepDAG(tt, step, windows[step], deps)
        longest = LongestPath(dag)
        for node in sorted((x for x in longest.nodes if x < dag.n), key=lambda x: -dag.n_dur[x])[:6]:
            again = copy.copy(dag)
            again.n_dur = dag.n_dur.copy()
            again.n_dur[node] = 0.0
            assert longest.without(node) == pytest.approx(LongestPath(again).length, abs=1e-6)
            checked += 1
    assert checked >= 6


@pytest.mark.parametrize("names", [("kineto-sampled-rank0.json.gz", "kineto-sampled-rank1.json.gz"), GLOO, (V100,),
                                   ("kineto-event-sync-multistream.json.gz",)], ids=lambda names: "+".join(names))
def test_the_paths_length_is_networkx_dag_longest_path_length(names):
    """The step's DAG as networkx: a source (the window's start) before every node, weighing the node's duration
    plus, for a node with no predecessor, its start (it is reached from the window's start); each edge weighing its
    wait plus its target's duration; a sink after each of the step's own events. networkx's longest path is the
    path's length."""
    import networkx as nx

    from rnnprof.analyzers.critical_path import build_step_graph

    table = load_events([str(FIXTURES / n) for n in names] if len(names) > 1 else str(FIXTURES / names[0]))
    report = analyze_critical_path(table, what_if_ops=0)
    for step in report.steps[:3]:
        graph = build_step_graph(table, step.step)
        weighted = nx.DiGraph()
        for node, data in graph.nodes(data=True):
            lead = data["start"] if graph.in_degree(node) == 0 else 0.0
            weighted.add_edge("source", node, weight=lead + data["dur"])
            row = node[1] if isinstance(node, tuple) else node
            if not isinstance(node, tuple) and table.step[row] == step.step:
                weighted.add_edge(node, "sink", weight=0.0)
        for u, v, data in graph.edges(data=True):
            weighted.add_edge(u, v, weight=data["wait"] + graph.nodes[v]["dur"])
        assert nx.dag_longest_path_length(weighted) == pytest.approx(step.length_us, abs=1e-3), (names, step.step)


@pytest.mark.parametrize("names", [("kineto-sampled-rank0.json.gz", "kineto-sampled-rank1.json.gz"), GLOO, (V100,),
                                   ("kineto-2rank-nccl-rank0.json.gz",)], ids=lambda names: "+".join(names))
def test_the_longest_path_by_levels_is_the_node_by_node_one_exactly(names, monkeypatch):
    """A wide DAG (a job's ranks side by side) is passed a level at a time in arrays, a narrow one node by node;
    forced each way on the same DAGs, the lengths, the chains (with the loop's tie rule), the passes back and the
    what-ifs are equal bit for bit."""
    from rnnprof.analyzers.critical_path import path
    from rnnprof.analyzers.critical_path.graph import StepDAG
    from rnnprof.analyzers.critical_path.table_index import TableIndex, dag_windows

    table = load_events([str(FIXTURES / n) for n in names] if len(names) > 1 else str(FIXTURES / names[0]))
    deps = Dependencies()
    tt = TableIndex(table, classify(table), deps)
    windows = dag_windows(tt, [int(s) for s in table.steps()])
    for step, window in windows.items():
        dag = StepDAG(tt, step, window, deps)
        found = []
        for width, probe in ((0, 1), (dag.n + len(dag.entry_of) + 1, 1)):
            monkeypatch.setattr(path, "_MIN_WIDTH", width)
            monkeypatch.setattr(path, "_PROBE_LEVELS", probe)
            found.append(path.LongestPath(dag))
        by_levels, in_order = found
        assert (by_levels._level is not None) and (in_order._level is None)
        assert by_levels.nodes == in_order.nodes and by_levels.length == in_order.length, step
        assert np.array_equal(by_levels._dist, in_order._dist) and np.array_equal(by_levels._tail, in_order._tail)
        for node in in_order.nodes[:: max(1, len(in_order.nodes) // 20)]:
            assert by_levels.without(node) == in_order.without(node)


@pytest.mark.parametrize("width", [0, 10**9], ids=["by levels", "node by node"])
def test_the_longest_path_takes_the_first_of_equal_predecessors_and_one_within_a_tie_of_starting_alone(
        width, monkeypatch):
    """Nodes 0 and 1 (1 µs each) both lead to 2 (1 µs), then 3 (1 µs) whose own lead from the window's start
    (2 µs + 0.5 ns, 3 µs with its own) is as long as the chain to it within ``_TIE_US``: the chain goes through the first of the two
    equal predecessors, and through 2 into 3 rather than 3 starting alone (what it waited for is said)."""
    from types import SimpleNamespace

    from rnnprof.analyzers.critical_path import path

    monkeypatch.setattr(path, "_MIN_WIDTH", width)
    monkeypatch.setattr(path, "_PROBE_LEVELS", 1)
    dag = SimpleNamespace(n=4, n_start=np.zeros(4), n_dur=np.ones(4), wait_in=np.zeros(4),
                          lead=np.array([0.0, 0.0, 0.0, 2.0 + 5e-7]), order=np.arange(4), pos=np.arange(4),
                          src=np.array([0, 1, 2]), dst=np.array([2, 2, 3]), own=np.array([False, False, False, True]))
    longest = path.LongestPath(dag)
    assert (longest._level is None) == (width > 0)
    assert longest.nodes == [0, 2, 3] and longest.length == 3.0
