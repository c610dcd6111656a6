"""A gloo rank's process groups from its flight recorder: the window's entries beside each rank's trace, joined to
its ``c10d::*`` calls, against oracles nobody here wrote.

The stored job is HSDP over a 2 x 2 mesh on 4 gloo ranks (``torch-gloo-hsdp-fr-collectives-rank<r>.json.gz``,
recorded by ``tests/data/make_torch_sharded_traces.py hsdp-fr`` with the flight recorder on, each rank's
``.flight-recorder`` file written by rnnprof's own ``recorder_window``). Its replicate and shard groups both have 2
members, so without the recorder nothing tells them apart. The oracles: torch's ``CommDebugMode`` counts of a
step (7 all-gathers, 4 reduce-scatters, 4 all-reduces) and the mesh as torch made it (each dimension's group name,
description and members, ``dist.get_process_group_ranks``), both written by the script beside each trace. FSDP2
gathers and reduce-scatters parameters over the shard dimension and all-reduces the shards' gradients over the
replicate one (HSDP's definition), so the counts fall on the groups so.
"""

from __future__ import annotations

import collections
import gzip
import json
import shutil

import pytest

from rnnprof import rundir
from rnnprof.analyzers.comm import analyze_comm
from rnnprof.cli import main
from rnnprof.events.collectives import GROUP_BY_THREAD, GROUP_FROM_RECORDER
from rnnprof.traces import load_events
from rnnprof.traces.recorded_groups import CallSpan, RecordedEntry, RecorderWindow, join_calls, operation_key
from rnnprof.events import ProcessGroup

from fixtures import FIXTURES

RANKS = 4
OPS = {"c10d._allgather_base_": "all-gather", "c10d._reduce_scatter_base_": "reduce-scatter",
       "c10d.allreduce_": "all-reduce"}
ON = {"all-gather": "shard", "reduce-scatter": "shard", "all-reduce": "replicate"}  # HSDP: the mesh dimension


def trace(rank: int, job: str = "hsdp-fr"):
    return FIXTURES / f"torch-gloo-{job}-collectives-rank{rank}.json.gz"


def oracle(rank: int, job: str = "hsdp-fr") -> dict:
    return json.loads((FIXTURES / f"collectives-oracle-{job}-rank{rank}.json").read_text())


@pytest.fixture(scope="module")
def tables():
    return [load_events(str(trace(rank))) for rank in range(RANKS)]


def _records(table):
    """(step, collective, group, inferred) of each collective record."""
    r, text = table.collectives, table.strings
    return [(int(table.step[r.row[k]]), text[r.collective[k]], text[r.group[k]], int(r.inferred[k]))
            for k in range(len(r))]


def test_the_oracles_mesh_is_the_2x2_mesh_the_script_built():
    """The shard groups are the mesh's rows, the replicate groups its columns; the job is the stored HSDP one's."""
    for rank in range(RANKS):
        mesh = oracle(rank)["mesh"]
        assert mesh["layout"] == [[0, 1], [2, 3]]
        assert mesh["shard"]["ranks"] == [r for row in mesh["layout"] for r in row if rank in row]
        assert mesh["replicate"]["ranks"] == [row[rank % 2] for row in mesh["layout"]]
        assert (mesh["shard"]["description"], mesh["replicate"]["description"]) == ("mesh_shard", "mesh_replicate")
        assert oracle(rank)["comm_debug_mode"] == oracle(rank, "hsdp")["comm_debug_mode"]


def test_every_collective_of_every_rank_is_on_the_group_torch_made_for_its_mesh_dimension(tables):
    """Per rank and traced step, CommDebugMode's counts by collective, each on its dimension's group (by torch's name
    for it), the group's members those torch lists; every group from the flight recorder, none unknown."""
    for rank, table in enumerate(tables):
        mesh = oracle(rank)["mesh"]
        expected = collections.Counter({(OPS[op], mesh[ON[OPS[op]]]["name"]): n
                                        for op, n in oracle(rank)["comm_debug_mode"]["total"].items()})
        assert sum(expected.values()) == 15
        per_step: dict[int, collections.Counter] = {}
        for step, kind, group, inferred in _records(table):
            assert inferred & GROUP_FROM_RECORDER, (rank, step, kind)
            per_step.setdefault(step, collections.Counter())[(kind, group)] += 1
        assert sorted(per_step) == oracle(rank)["profiled_steps"]
        for step, counts in per_step.items():
            assert counts == expected, (rank, step)
        groups = {g.name: g for g in table.metadata.process_groups}
        for dim in ("shard", "replicate"):
            named = groups[mesh[dim]["name"]]
            assert (named.description, list(named.ranks)) == (mesh[dim]["description"], mesh[dim]["ranks"])
        assert "group" not in analyze_comm(table).groups.unknown


def test_comm_names_each_group_and_says_every_entry_was_joined(capsys):
    """The 4 ranks together: the traffic per group is the oracle's counts times 2 steps on each of its 2 members;
    the last line says what the recorder gave; nothing left unjoined."""
    assert main(["comm", *(str(trace(r)) for r in range(RANKS)), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)["process_groups"]
    calls = collections.Counter()
    for row in document["traffic"]:
        calls[(row["group"], row["collective"])] += row["calls"]
    expected = collections.Counter()
    for rank in range(RANKS):
        mesh = oracle(rank)["mesh"]
        for op, n in oracle(rank)["comm_debug_mode"]["total"].items():
            expected[(mesh[ON[OPS[op]]]["name"], OPS[op])] += n * len(oracle(rank)["profiled_steps"])
    assert calls == expected and len({g for g, _ in expected}) == 4
    assert document["inferred"]["group: the flight recorder"] == sum(expected.values()) == 120
    assert document["flight_recorder"] == {"entries": 120, "entries_unreadable": 0, "joined": 120,
                                           "calls_without_entry": 0, "entries_without_call": 0, "not_made_in_call": 0}
    assert main(["comm", *(str(trace(r)) for r in range(RANKS))]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "group: the flight recorder (120); flight recorder: 120 of 120 entries joined to calls, 0 calls without one" in text


def _copy(tmp_path, rank: int = 0, entries=None):
    """Rank ``rank``'s trace in ``tmp_path`` with its flight-recorder file (``entries``: a function of the file's
    entries that returns those to write; None: no file)."""
    copied = shutil.copy(trace(rank), tmp_path / trace(rank).name)
    if entries is not None:
        document = json.loads(rundir.flight_recorder_beside(trace(rank)).read_text())
        document["entries"] = entries(document["entries"])
        rundir.flight_recorder_beside(copied).write_text(json.dumps(document))
    return copied


def _json(path, capsys) -> dict:
    assert main(["comm", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_without_the_file_a_rank_reads_as_before_its_groups_not_known(tmp_path, capsys):
    """The same trace alone: its 2-member groups are alike again, so its groups are not known, and --json has no
    flight-recorder counts."""
    groups = _json(_copy(tmp_path), capsys)["process_groups"]
    assert groups["unknown"]["group"] == groups["collectives"] == 30
    assert "flight_recorder" not in groups and "group: the flight recorder" not in groups["inferred"]


def test_a_call_whose_entry_is_missing_is_counted_and_takes_its_group_by_another_rule(tmp_path):
    """The 9th entry (a backward all-gather) taken out: the 29 others are joined, that call is counted; its group
    is then inferred as without the recorder: the sizes cannot tell, its worker thread's other collectives, joined,
    can (the shard group's, as the oracle's mesh says)."""
    table = load_events(str(_copy(tmp_path, entries=lambda e: e[:8] + e[9:])))
    assert table.metadata.flight_recorder == {"entries": 29, "entries_unreadable": 0, "joined": 29,
                                              "calls_without_entry": 1, "entries_without_call": 0,
                                              "not_made_in_call": 0}
    found = _records(table)
    (other,) = [r for r in found if not r[3] & GROUP_FROM_RECORDER]
    assert other[1:3] == ("all-gather", oracle(0)["mesh"]["shard"]["name"]) and other[3] & GROUP_BY_THREAD


def test_an_entry_made_outside_its_call_is_not_joined_to_it(tmp_path):
    """The first entry's creation moved a second later: in order it would pair with the first call, but it was not
    made within it, so both are left unjoined and counted."""
    def later(entries):
        entries[0]["time_created_ns"] += 10**9
        return entries

    table = load_events(str(_copy(tmp_path, entries=later)))
    counts = table.metadata.flight_recorder
    assert (counts["joined"], counts["calls_without_entry"], counts["entries_without_call"]) == (29, 1, 1)
    assert counts["not_made_in_call"] == 1


def test_entries_of_another_size_are_never_joined(tmp_path):
    """Every entry's input doubled: no call's message agrees with any, so nothing is joined."""
    def doubled(entries):
        for e in entries:
            e["input_sizes"] = [[2 * d for d in shape] for shape in e["input_sizes"]]
        return entries

    counts = load_events(str(_copy(tmp_path, entries=doubled))).metadata.flight_recorder
    assert (counts["joined"], counts["calls_without_entry"], counts["entries_without_call"]) == (0, 30, 30)


def test_a_file_that_is_not_a_flight_recorder_window_is_one_line_and_exit_2(tmp_path, capsys):
    copied = _copy(tmp_path)
    rundir.flight_recorder_beside(copied).write_text('{"entries": "no"}')
    assert main(["comm", str(copied)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a flight-recorder window" in err and ".flight-recorder" in err


def _entry(group: str, operation: str, elements: int, created: int) -> RecordedEntry:
    return RecordedEntry(ProcessGroup(group), operation, elements, created)


def test_the_join_pairs_in_order_around_a_call_the_recorder_missed():
    """Calls AG, AR, RS, AR (a reduce-scatter is gloo's all-reduce of its whole input); the recorder lost the
    second call's entry: the rest pair in order, the missing one is counted; without a clock, times are not asked."""
    calls = [CallSpan(operation_key("c10d::_allgather_base_", 8)), CallSpan(operation_key("c10d::allreduce_", 4)),
             CallSpan(operation_key("c10d::_reduce_scatter_base_", 16)), CallSpan(operation_key("c10d::allreduce_", 4))]
    window = RecorderWindow((_entry("s", "gloo:all_gather", 8, 1), _entry("s", "gloo:all_reduce", 16, 3),
                             _entry("r", "gloo:all_reduce", 4, 4)))
    joined, counts = join_calls(calls, window)
    assert {i: (e.group.name, e.created_ns) for i, e in joined.items()} == {0: ("s", 1), 2: ("s", 3), 3: ("r", 4)}
    assert (counts["calls_without_entry"], counts["entries_without_call"]) == (1, 0)


def _raw_calls(path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e["name"].startswith("c10d::")]


def test_a_script_traced_by_rnnprof_writes_each_ranks_window_entries_beside_its_trace(diagnosis_control):
    """conftest's shared capture of a 2-rank DDP script under ``rnnprof trace``: the manifest lists each rank's
    ``.flight-recorder`` file, and each rank's entry names its own; its entries were made in the window, one per ``c10d::`` call of the rank's trace (the
    raw JSON), each of the default group; every call is joined to its entry."""
    run = diagnosis_control / "run"
    manifest = json.loads((run / rundir.MANIFEST).read_text())
    ranks = manifest["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert manifest["captured"]["flight_recorder"] == [f"torch/rank{r}.flight-recorder" for r in (0, 1)]
    for rank in ranks:
        assert rank["flight_recorder"] == f"torch/rank{rank['rank']}.flight-recorder"
        window = json.loads((run / rank["flight_recorder"]).read_text())
        first, last = window["window_ns"]
        calls = _raw_calls(run / rank["trace"])
        assert len(window["entries"]) == len(calls) > 0
        assert all(first <= e["time_created_ns"] <= last and e["process_group"] == ["0", "default_pg"]
                   for e in window["entries"])
        table = load_events(str(run / rank["trace"]))
        assert table.metadata.flight_recorder["joined"] == len(calls)
        assert table.metadata.flight_recorder["calls_without_entry"] == 0
        assert all(r[2] == "0" and r[3] & GROUP_FROM_RECORDER for r in _records(table))
