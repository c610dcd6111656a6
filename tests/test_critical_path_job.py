"""A whole job's critical path computed rank by rank (``job.critical_path.job_critical_path``: each rank read in a
worker, each step's path from the ranks' rows in its window) against ``analyze_critical_path`` of the ranks merged
into one table, on the real rank pairs in tests/data; and ``reports.json_text`` against ``json.dumps``."""

from __future__ import annotations

import json
import math
import random

import networkx as nx
import numpy as np
import pytest

from fixtures import FIXTURES
from rnnprof.analyzers.critical_path import Dependencies, analyze_critical_path
from rnnprof.analyzers.critical_path.graph import topological_order
from rnnprof.cli import main
from rnnprof.reports.critical_path import to_document
from rnnprof.reports.json_text import Lazy, dumps, pieces
from rnnprof.traces import load_events
from rnnprof.traces.rank_folder import job_of
from rnnprof.job.critical_path import job_critical_path

GLOO = ("torch-gloo-rank0.json.gz", "torch-gloo-rank1.json.gz")
SAMPLED = ("kineto-sampled-rank0.json.gz", "kineto-sampled-rank1.json.gz")
# sharded, pipelined and hybrid jobs: FSDP's all-gathers unpacking on gloo's threads, a pipeline's sends and
# receives, 4 ranks in 2 x 2 process groups
FSDP = tuple(f"torch-gloo-fsdp/torch/rank{r}.json.gz" for r in (0, 1))
PP = tuple(f"torch-gloo-pp/torch/rank{r}.json.gz" for r in (0, 1))
HSDP = tuple(f"torch-gloo-hsdp-collectives-rank{r}.json.gz" for r in range(4))


def _both(names, jobs, steps=None):
    paths = [str(FIXTURES / n) for n in names]
    merged = analyze_critical_path(load_events(paths), Dependencies(), steps=steps)
    job, _, _ = job_critical_path(job_of(paths), jobs=jobs, choose=(lambda known: steps) if steps else None)
    return merged, job


@pytest.mark.parametrize("names, jobs", [(GLOO, 2), (SAMPLED, 1), (FSDP, 1), (PP, 1), (HSDP, 1)],
                         ids=["gloo-2-workers", "sampled-in-process", "fsdp", "pipeline", "hsdp-4-ranks"])
def test_a_jobs_paths_are_those_of_its_ranks_merged(names, jobs):
    merged, job = _both(names, jobs)
    if names in (FSDP, PP):  # their collectives joined across the ranks, sends and receives paired
        assert all(s.edges.get("collective", 0) > 0 for s in job.steps)
    assert len(job.steps) == len(merged.steps) >= 2
    # every figure, link by link (the document leaves out the rows), and the rows of the merged table
    assert dumps(to_document(job)) == dumps(to_document(merged))
    assert [[link.event for link in s.links] for s in job.steps] == [[link.event for link in s.links]
                                                                    for s in merged.steps]
    assert job.workers == merged.workers == tuple(f"rank{r}" for r in range(len(names)))


def test_the_gloo_jobs_steps_join_its_ranks_through_their_collectives():
    _, job = _both(GLOO, 1)
    # each step's all-reduce, matched across the two ranks' files: 2 members, each entry to each member
    assert all(s.edges.get("collective", 0) >= 4 for s in job.steps)


def test_a_step_selection_picks_the_same_steps_and_paths():
    merged, job = _both(SAMPLED, 1, steps=None)
    last = [merged.steps[-1].step]
    merged_one, job_one = _both(SAMPLED, 1, steps=last)
    assert [s.step for s in job_one.steps] == last
    assert dumps(to_document(job_one)) == dumps(to_document(merged_one))


def test_jobs_and_scheduler_are_refused_for_one_trace(capsys):
    assert main(["critical-path", str(FIXTURES / "kineto-event-sync.json.gz"), "--jobs", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--jobs" in err[0]


DOCUMENTS = [
    {"a": [1, 2.5, {"b": [], "c": {}, "d": "x\u2026\"\\\n"}], "e": None, "f": True, "g": False, "h": (1, 2.0)},
    {"nan": math.nan, "inf": [math.inf, -math.inf], "tiny": 5e-324, "big": 1e16, "neg": -0.0, "deep": [[[[]]]]},
    {1: "int key", 2.5: "float key", True: "bool key", None: "none key"},
    [], {}, "text", 3, 1e-7, [{"x": {"y": [1, {"z": []}]}}],
]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_json_text_writes_what_json_dumps_writes(document):
    expected = json.dumps(document, indent=2)
    assert dumps(document) == expected
    assert "".join(pieces(document)) == expected
    assert "".join(pieces(document, depth=5)) == expected


def test_json_text_builds_a_lazy_lists_items_as_it_writes_them():
    built = []

    def build(k):
        built.append(k)
        return {"k": k}

    text = pieces({"steps": Lazy(range(3), build), "after": 1})
    assert built == []
    first = next(text) + next(text) + next(text)
    assert built == [0] and first == "{\n  \"steps\": [\n    {\n      \"k\": 0\n    }"
    rest = "".join(text)
    assert json.loads(first + rest) == {"steps": [{"k": 0}, {"k": 1}, {"k": 2}], "after": 1}
    with pytest.raises(TypeError):
        dumps({"x": object()})


@pytest.mark.parametrize("probe, width", [(10**9, 0), (1, 10**9), (3, 4)],
                         ids=["in arrays", "node by node after the first", "in arrays, then node by node"])
def test_topological_order_is_networkxs_without_the_graph(probe, width, monkeypatch):
    """A DAG whose clocks disagree with its edges (a collective member keyed at its group's last start) is ordered
    as ``networkx.topological_sort`` orders it, generation by generation, whether the generations are taken in
    arrays or node by node; a cycle gives None."""
    from rnnprof.analyzers.critical_path import graph

    monkeypatch.setattr(graph, "_PROBE_LEVELS", probe)
    monkeypatch.setattr(graph, "_MIN_WIDTH", width)
    rng = random.Random(7)
    cycles = 0
    for trial in range(200):
        n = rng.randint(1, 40)
        rank = list(range(n))
        rng.shuffle(rank)
        edges = {(a, b) if rank[a] < rank[b] else (b, a) for a, b in
                 ((rng.randrange(n), rng.randrange(n)) for _ in range(rng.randint(0, 3 * n))) if a != b}
        if trial % 4 == 0 and edges:
            a, b = next(iter(edges))
            edges.add((b, a))  # a cycle
        edges = sorted(edges, key=lambda e: rng.random())
        g = nx.DiGraph()
        g.add_nodes_from(range(n))
        g.add_edges_from(edges)
        src = np.array([a for a, _ in edges], dtype=np.int64)
        dst = np.array([b for _, b in edges], dtype=np.int64)
        order = topological_order(n, src, dst)
        if nx.is_directed_acyclic_graph(g):
            assert order is not None and order.tolist() == list(nx.topological_sort(g))
        else:
            cycles += 1
            assert order is None
    assert cycles > 10
