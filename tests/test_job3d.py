"""A job of 3-D process groups (tensor x pipeline x data parallel), built from the stored gloo traces by
``benchmarks/_job3d.py`` as ``whole_job.py --3d`` builds its 64 ranks, here 12 (TP 2 x PP 3 x DP 2: a middle stage
too; one step of each source): each rank's collectives are read in the group the job put them in, and matched across exactly that
group's members. The expected groups are the mesh's, written here from Megatron's rank order, not the builder's;
the expected counts are the source traces' own c10d calls."""

from __future__ import annotations

import collections
import functools
import gzip
import json

import pytest

from fixtures import FIXTURES, importable_benchmarks
from rnnprof.analyzers.collectives import instances, matched_groups
from rnnprof.events.collectives import GROUP_BY_SIZE, GROUP_BY_THREAD, GROUP_ONLY_ONE, SHAPES
from rnnprof.traces import load_events, merge_tables

importable_benchmarks()
from _job3d import build_job3d  # noqa: E402

TP, PP, DP = 2, 3, 2
WORLD = TP * PP * DP
KIND_OF = {"all-reduce": "mesh_tp", "all-gather": "mesh_dp", "reduce-scatter": "mesh_dp", "send/recv": "mesh_pp"}


def mesh_groups(rank: int) -> dict[str, tuple[int, ...]]:
    """The rank's TP, DP and PP groups of a ``r = p * DP * TP + d * TP + t`` mesh."""
    p, d, t = rank // (DP * TP), rank // TP % DP, rank % TP
    return {"mesh_tp": tuple(p * DP * TP + d * TP + i for i in range(TP)),
            "mesh_dp": tuple(p * DP * TP + i * TP + t for i in range(DP)),
            "mesh_pp": tuple(i * DP * TP + d * TP + t for i in range(PP))}


@functools.lru_cache(maxsize=None)
def source_calls(kind: str, rank: int) -> collections.Counter:
    """The c10d calls of a stored source rank's first profiled step, counted from its raw JSON."""
    with gzip.open(FIXTURES / f"torch-gloo-{kind}" / "torch" / f"rank{rank}.json.gz", "rt") as f:
        events = json.load(f)["traceEvents"]
    first = min((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    end = first["ts"] + first["dur"]
    return collections.Counter(e["name"] for e in events if e.get("ph") == "X" and e["ts"] < end
                               and e["name"] in ("c10d::allreduce_", "c10d::_allgather_base_",
                                                 "c10d::_reduce_scatter_base_", "c10d::send", "c10d::recv_"))


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    folder = tmp_path_factory.mktemp("job3d")
    build_job3d(folder, TP, PP, DP, steps=1)
    tables = [load_events(str(folder / f"rank{r}.json")) for r in range(WORLD)]
    return tables, merge_tables(tables)


def test_each_rank_lists_its_three_mesh_groups(job):
    tables, _ = job
    for r, table in enumerate(tables):
        listed = {g.description: g.ranks for g in table.metadata.process_groups if g.description.startswith("mesh_")}
        assert listed == mesh_groups(r), f"rank{r}"


def test_each_collective_is_read_in_its_kinds_group(job):
    tables, _ = job
    for r, table in enumerate(tables):
        records, text = table.collectives, table.strings
        by_name = {g.name: g for g in table.metadata.process_groups}
        stage = r // (DP * TP)
        seen = collections.Counter()
        for k in range(len(records)):
            kind = text[records.collective[k]]
            group = by_name.get(text[records.group[k]])
            assert group is not None, (r, kind, text[records.group[k]])
            assert group.description == KIND_OF[kind], (r, kind, group)
            assert group.ranks == mesh_groups(r)[group.description]
            assert records.group_size[k] == len(group.ranks)
            assert not records.inferred[k] & (GROUP_ONLY_ONE | GROUP_BY_SIZE | GROUP_BY_THREAD | SHAPES), \
                (r, kind, records.inferred[k])  # recorded, not inferred
            if kind == "send/recv":  # a neighbouring stage of its own pipeline
                peer = int(records.peer[k])
                assert peer in group.ranks and abs(group.ranks.index(peer) - stage) == 1, (r, peer)
            seen[kind] += 1
        tp, fsdp = source_calls("tp", r % TP % 2), source_calls("fsdp", r // TP % DP % 2)
        # a stage runs the real last stage's work with the previous stage, the real first stage's with the next
        pp = (source_calls("pp", 1) if stage > 0 else collections.Counter()) \
            + (source_calls("pp", 0) if stage < PP - 1 else collections.Counter())
        assert seen == {"all-reduce": tp["c10d::allreduce_"],
                        "all-gather": fsdp["c10d::_allgather_base_"],
                        "reduce-scatter": fsdp["c10d::_reduce_scatter_base_"],
                        "send/recv": pp["c10d::send"] + pp["c10d::recv_"]}, f"rank{r}"


def test_collectives_match_across_exactly_their_groups_members(job):
    _, merged = job
    matched, unmatched = matched_groups(instances(merged))
    assert unmatched == 0
    per_group = collections.Counter()
    for members in matched:
        workers = sorted(int(w.removeprefix("rank")) for w, _ in members)
        kinds = {inst.collective for _, inst in members}
        assert len(kinds) == 1
        groups = [mesh_groups(w) for w in workers]
        if kinds == {"send/recv"}:  # a send and its receive: two neighbouring stages of one pipeline
            assert len(workers) == 2 and groups[0]["mesh_pp"] == groups[1]["mesh_pp"]
            assert abs(workers[0] - workers[1]) == DP * TP
            assert sum(inst.sends for _, inst in members) == 1
        else:
            assert tuple(workers) == groups[0][KIND_OF[kinds.pop()]], workers
        per_group[(members[0][1].group, members[0][1].collective)] += 1
    # every group of a kind matched the same collectives, as many as one member ran
    counts = collections.defaultdict(set)
    for (group, kind), n in per_group.items():
        counts[kind].add(n)
    tp, fsdp, pp = source_calls("tp", 0), source_calls("fsdp", 0), source_calls("pp", 0)
    assert counts == {"all-reduce": {tp["c10d::allreduce_"]}, "all-gather": {fsdp["c10d::_allgather_base_"]},
                      "reduce-scatter": {fsdp["c10d::_reduce_scatter_base_"]},
                      "send/recv": {(PP - 1) * (pp["c10d::send"] + pp["c10d::recv_"])}}
    assert len(per_group) == (WORLD // TP) + 2 * (WORLD // DP) + WORLD // PP
