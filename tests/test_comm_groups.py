"""What a collective is, and comm per process group x collective x phase, against oracles nobody here wrote.

The traces are real 2- and 4-rank gloo trainings recorded by ``tests/data/make_torch_sharded_traces.py`` (FSDP2,
tensor parallel, a 2-stage 1F1B pipeline, HSDP), each rank's oracle written beside it by the same script: torch's
``CommDebugMode`` counts of a step per collective op, forward and backward (the pipeline's: the sends and receives
its schedule issued), and the tensors the script made. The same script ran the same jobs on one H200 over nccl
(``torch-nccl-*``: each rank on the one GPU, NCCL told they are on hosts of their own), where the trace records
each collective's group and torch fuses a pipeline's send and receive into one kernel. Bytes and bandwidths are checked against a hand computation
from the raw JSON, and nccl-tests' definitions against TraceLens's NCCL summary of a Llama-70B FSDP run on MI300X.
"""

from __future__ import annotations

import collections
import csv
import gzip
import json

import numpy as np
import pytest

from rnnprof.analyzers.classify import EventClass, classify
from rnnprof.analyzers.collectives import instances, matched_groups
from rnnprof.analyzers.comm import analyze_comm
from rnnprof.analyzers.groups import call_bytes
from rnnprof.analyzers.roofline import bus_factor
from rnnprof.cli import main
from rnnprof.events.collectives import (GROUP_BY_SIZE, GROUP_BY_THREAD, GROUP_ONLY_ONE, OPERATION_FROM_CALL,
                                        PHASE_LIBRARY, PHASE_NEIGHBOURS, SHAPES)
from rnnprof.events.names import collective_type
from rnnprof.traces import load_events

from fixtures import FIXTURES, nccl_rank

JOBS = {"fsdp2": 2, "tp": 2, "pp": 2, "hsdp": 4}
# CommDebugMode's op -> the collective rnnprof names
OPS = {"c10d._allgather_base_": "all-gather", "c10d._reduce_scatter_base_": "reduce-scatter",
       "c10d.allreduce_": "all-reduce", "c10d_functional.all_reduce": "all-reduce"}


def trace(job: str, rank: int, backend: str = "gloo"):
    return FIXTURES / f"torch-{backend}-{job}-collectives-rank{rank}.json.gz"


def oracle(job: str, rank: int, backend: str = "gloo") -> dict:
    prefix = "nccl-" if backend == "nccl" else ""
    return json.loads((FIXTURES / f"collectives-oracle-{prefix}{job}-rank{rank}.json").read_text())


def records(table):
    """Per record: (step, collective, phase, group, in, out, dtype, members, peer, inferred, row)."""
    r, text = table.collectives, table.strings
    return [(int(table.step[r.row[k]]), text[r.collective[k]], text[r.phase[k]], text[r.group[k]],
             int(r.in_nelems[k]), int(r.out_nelems[k]), text[r.dtype[k]], int(r.group_size[k]), int(r.peer[k]),
             int(r.inferred[k]), int(r.row[k])) for k in range(len(r))]


@pytest.fixture(scope="module")
def tables():
    return {(job, rank): load_events(str(trace(job, rank))) for job, n in JOBS.items() for rank in range(n)}


@pytest.fixture(scope="module")
def nccl_tables():
    return {(job, rank): load_events(str(trace(job, rank, "nccl"))) for job, n in JOBS.items() for rank in range(n)}


def _per_step_and_phase(found) -> dict[int, collections.Counter]:
    per_step: dict[int, collections.Counter] = {}
    for step, kind, phase, *_ in found:
        per_step.setdefault(step, collections.Counter())[(kind, phase)] += 1
    return per_step


@pytest.mark.parametrize("job", ["fsdp2", "tp", "hsdp"])
def test_over_nccl_on_a_gpu_counts_per_collective_and_phase_are_commdebugmodes_each_in_its_recorded_group(
        nccl_tables, job):
    """The same jobs on one H200 over nccl: each NCCL kernel is one of CommDebugMode's collectives in its phase, in
    every traced step; its group, message and dtype are the trace's own (nothing inferred but the phase), and its
    elements are the tensors the script made (FSDP2: a unit's shards; TP: a block's activations)."""
    for rank in range(JOBS[job]):
        told = oracle(job, rank, "nccl")
        modes = told["comm_debug_mode"]
        expected = collections.Counter({(OPS[op], phase): n for phase in ("forward", "backward")
                                        for op, n in modes[phase].items()})
        assert sum(expected.values()) == sum(modes["total"].values())
        found = records(nccl_tables[job, rank])
        per_step = _per_step_and_phase(found)
        assert sorted(per_step) == told["profiled_steps"]
        assert all(counts == expected for counts in per_step.values()), (rank, per_step)
        groups = {g.name: g.ranks for g in nccl_tables[job, rank].metadata.process_groups}
        for step, kind, phase, group, n_in, n_out, dtype, members, peer, inferred, row in found:
            assert group in groups and members == len(groups[group]) and dtype == "Float"
            assert inferred & ~(PHASE_LIBRARY | PHASE_NEIGHBOURS) == 0
            if job == "tp":
                assert n_in == n_out == told["tp_all_reduce_elements"]
            elif kind != "all-reduce":  # HSDP's all-reduces are the shards' gradients over the replicate group
                shard, full = (n_in, n_out) if kind == "all-gather" else (n_out, n_in)
                assert full == members * shard
                assert shard in {u["local_shard_elements"] for u in told["fsdp_units"].values()}


def test_over_nccl_hsdps_collectives_are_in_the_mesh_groups_torch_made(nccl_tables):
    """HSDP on 2 x 2 over nccl: each rank's all-gathers and reduce-scatters run in its shard group and its
    all-reduces in its replicate group, by the names, descriptions and members torch gave them."""
    for rank in range(4):
        mesh = oracle("hsdp", rank, "nccl")["mesh"]
        table = nccl_tables["hsdp", rank]
        groups = {g.name: (g.description, g.ranks) for g in table.metadata.process_groups}
        for dim in ("shard", "replicate"):
            assert groups[mesh[dim]["name"]] == (mesh[dim]["description"], tuple(mesh[dim]["ranks"]))
        ran = {(kind, group) for _, kind, _, group, *_ in records(table)}
        assert ran == {("all-gather", mesh["shard"]["name"]), ("reduce-scatter", mesh["shard"]["name"]),
                       ("all-reduce", mesh["replicate"]["name"])}


def test_over_nccl_a_send_and_a_receive_fused_into_one_kernel_are_both_in_its_record(nccl_tables):
    """1F1B on 2 stages over nccl: torch's schedule issues each step's 4 sends and 4 receives in batches
    (``batch_isend_irecv``), its steady state a send and a receive together, each batch one SendRecv kernel launched
    in ``nccl:coalesced``. A step's kernels carry every operation the schedule issued, by direction and elements,
    each with the other stage as peer; each rank's kernels meet the other's one for one."""
    for rank in range(2):
        issued = oracle("pp", rank, "nccl")["p2p_ops"]
        activation = oracle("pp", rank, "nccl")["pipeline"]["activation_elements"]
        table = nccl_tables["pp", rank]
        per_step: dict[int, collections.Counter] = {}
        for step, kind, _, group, n_in, _, dtype, members, peer, _, k in records_with_calls(table):
            assert (kind, group, dtype, members, peer) == ("send/recv", "0", "Float", 2, 1 - rank)
            calls = k.split("+")
            assert n_in == activation * len(calls)
            for call in calls:
                per_step.setdefault(step, collections.Counter())[f"{call} peer {1 - rank}"] += 1
        assert sorted(per_step) == [2, 3]
        for counts in per_step.values():
            assert counts == {key: entry["ops"] for key, entry in issued.items()}
            assert sum(e["elements"] for e in issued.values()) == activation * sum(counts.values())
    matched, unmatched = matched_groups(instances(load_events([str(trace("pp", r, "nccl")) for r in (0, 1)])))
    assert unmatched == 0 and len(matched) == len(records(nccl_tables["pp", 0])) == 10


def records_with_calls(table):
    """``records`` with each record's call (Kineto's ``Collective name``, fused ones joined by ``+``) last."""
    return [(*r[:-1], table.strings[table.collectives.call[k]]) for k, r in enumerate(records(table))]


@pytest.mark.parametrize("job", ["fsdp2", "tp", "hsdp"])
def test_counts_per_collective_and_phase_are_commdebugmodes_in_every_step_on_every_rank(tables, job):
    """FSDP2 with 3 sharded blocks and the root: 4 all-gathers forward, 3 backward (the root is not resharded),
    4 reduce-scatters backward; TP: 3 all-reduces forward, 3 backward; HSDP adds 4 all-reduces backward."""
    for rank in range(JOBS[job]):
        modes = oracle(job, rank)["comm_debug_mode"]
        expected = collections.Counter({(OPS[op], phase): n for phase in ("forward", "backward")
                                        for op, n in modes[phase].items()})
        assert sum(expected.values()) == sum(modes["total"].values())
        per_step: dict[int, collections.Counter] = {}
        for step, kind, phase, *_ in records(tables[job, rank]):
            per_step.setdefault(step, collections.Counter())[(kind, phase)] += 1
        assert sorted(per_step) == oracle(job, rank)["profiled_steps"]
        for step, counts in per_step.items():
            assert counts == expected, (rank, step)


def test_the_pipelines_sends_and_receives_are_the_schedules_by_peer_size_and_phase(tables):
    """1F1B on 2 stages, 4 micro-batches: the first stage sends each micro-batch's activations forward and
    receives its gradient in backward; the second receives in forward and sends in backward."""
    for rank in range(2):
        issued = oracle("pp", rank)["p2p_ops"]
        pipeline = oracle("pp", rank)["pipeline"]
        per_step: dict[int, collections.Counter] = {}
        for step, kind, phase, group, n_in, _, dtype, _, peer, inferred, row in records(tables["pp", rank]):
            assert kind == "send/recv" and group == "0" and dtype == "float"
            assert n_in == pipeline["activation_elements"]
            call = "send" if "send" in tables["pp", rank].strings[tables["pp", rank].name[row]] else "recv"
            per_step.setdefault(step, collections.Counter())[(call, peer, phase)] += 1
        forward, backward = ("send", "recv") if rank == 0 else ("recv", "send")
        for step, counts in per_step.items():
            expected = collections.Counter()
            for key, entry in issued.items():
                call, peer = key.split(" peer ")
                expected[(call, int(peer), "forward" if call == forward else "backward")] += entry["ops"]
                assert entry["elements"] == entry["ops"] * pipeline["activation_elements"]
            assert counts == expected, (rank, step)


def _raw_events(path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def _raw_calls(path, name: str) -> list[dict]:
    return sorted((e for e in _raw_events(path) if e["name"] == name), key=lambda e: e["ts"])


def test_bytes_are_the_recorded_elements_times_the_dtype_and_the_tensors_the_script_sharded(tables):
    """Every FSDP2 all-gather moves one unit's shards: out = local shard elements x 2 ranks (as the script's
    DTensors hold them), in = its shard; a reduce-scatter the reverse. nccl-tests' S (bytes) is the unsharded
    buffer x 4 bytes. The calls' recorded Input Dims in the raw JSON say the same, call by call."""
    for rank in range(2):
        units = oracle("fsdp2", rank)["fsdp_units"]
        shards = sorted(u["local_shard_elements"] for u in units.values())
        table = tables["fsdp2", rank]
        found = [r for r in records(table) if r[0] == 2]
        gathers = sorted(r[4] for r in found if r[1] == "all-gather" and r[2] == "forward")
        assert gathers == shards
        for step, kind, phase, group, n_in, n_out, dtype, members, *_ in found:
            assert (dtype, members, group) == ("float", 2, "0")
            shard, full = (n_in, n_out) if kind == "all-gather" else (n_out, n_in)
            assert full == 2 * shard and shard in shards
        r = table.collectives
        sizes = call_bytes(r.in_nelems, r.out_nelems, [table.strings[c] for c in r.collective],
                           [table.strings[c] for c in r.dtype])
        assert set(sizes.tolist()) == {4 * 2 * s for s in shards}
        for call, kind in (("c10d::_allgather_base_", "all-gather"), ("c10d::_reduce_scatter_base_", "reduce-scatter")):
            raw = [(e["args"]["Input Dims"][0][0], e["args"]["Input Dims"][1][0]) for e in _raw_calls(trace("fsdp2", rank), call)]
            ours = [(r[5], r[4]) for r in sorted(records(table), key=lambda r: r[-1]) if r[1] == kind]
            assert sorted(ours) == sorted(raw) and len(raw) == (14 if kind == "all-gather" else 8)


def test_a_gloo_all_reduce_that_carries_out_a_reduce_scatter_is_that_reduce_scatter(tables, capsys):
    assert main(["comm", str(trace("fsdp2", 0)), str(trace("fsdp2", 1)), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    ops = {op["name"]: op["collective_types"] for op in document["communication_ops"]}
    assert ops["gloo:all_reduce"] == {"reduce-scatter": 16}
    assert ops["gloo:all_gather"] == {"all-gather": 28}
    # HSDP's gloo:all_reduce runs are both: the shard group's reduce-scatters and the replicate group's all-reduces
    hsdp = collections.Counter(r[1] for r in records(tables["hsdp", 0])
                               if tables["hsdp", 0].strings[tables["hsdp", 0].name[r[-1]]] == "gloo:all_reduce")
    assert hsdp == {"reduce-scatter": 8, "all-reduce": 8}
    relabelled = [r for r in records(tables["fsdp2", 0]) if r[1] == "reduce-scatter"]
    assert relabelled and all(r[9] & OPERATION_FROM_CALL and r[9] & SHAPES and r[9] & GROUP_ONLY_ONE for r in relabelled)


def test_the_buffers_packing_copies_are_copies_not_communication(tables):
    table = tables["fsdp2", 0]
    classes = classify(table)
    for name in ("fsdp::all_gather_copy_in", "fsdp::split_with_sizes_copy", "fsdp::chunk_cat"):
        rows = np.flatnonzero(table.name == table.code_of(name))
        assert len(rows) and (classes[rows] == EventClass.COMPUTE).all(), name
    report = analyze_comm(table)
    assert not any(name.startswith("fsdp::") for name in report.comm_event_names)


def _merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        elif e > s:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _minus(intervals, cuts):
    """Each interval minus the cuts, the pieces."""
    pieces = []
    for s, e in intervals:
        for cs, ce in _merged(cuts):
            if ce <= s or cs >= e:
                continue
            if cs > s:
                pieces.append((s, cs))
            s = max(s, ce)
        if e > s:
            pieces.append((s, e))
    return pieces


def _overlap(a, union) -> float:
    return sum(max(0.0, min(a[1], e) - max(a[0], s)) for s, e in union)


@pytest.mark.parametrize("job", ["fsdp2", "tp"])
def test_hidden_time_is_the_overlap_with_compute_by_hand_from_the_raw_json(tables, job):
    """Compute on a CPU rank: its cpu_ops but collective calls, each cut where its own thread runs a collective
    (a c10d call, DTensor's functional all-reduce around one, or a gloo run); hidden = each gloo run's time under
    that union, summed."""
    calls = ("c10d::", "_c10d_functional::all_reduce")
    for rank in range(2):
        events = _raw_events(trace(job, rank))
        collective = [e for e in events if e["name"].startswith((*calls, "gloo:"))]
        compute = []
        for tid in {e["tid"] for e in events if e.get("cat") == "cpu_op"}:
            ops = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "cpu_op" and e["tid"] == tid
                   and not e["name"].startswith(calls)]
            compute += _minus(ops, [(e["ts"], e["ts"] + e["dur"]) for e in collective if e["tid"] == tid])
        union = _merged(compute)
        runs = [e for e in events if e["name"].startswith("gloo:")]
        expected = sum(_overlap((e["ts"], e["ts"] + e["dur"]), union) for e in runs)
        traffic = analyze_comm(tables[job, rank]).groups.traffic
        assert sum(t.hidden_us for t in traffic) == pytest.approx(expected, rel=1e-6, abs=0.01)
        assert sum(t.time_us for t in traffic) == pytest.approx(sum(e["dur"] for e in runs), rel=1e-9)
        assert 0 < expected < sum(e["dur"] for e in runs)


def test_bandwidths_are_nccl_tests_by_hand_from_the_raw_json(capsys):
    """algbw = S / t summed over the calls (S: the unsharded buffer in bytes, t: the gloo run's duration), in
    10^9 B/s; busbw = algbw x (n-1)/n for 2 members."""
    assert main(["comm", str(trace("fsdp2", 0)), str(trace("fsdp2", 1)), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["process_groups"]["traffic"]
    for kind, call, run in (("all-gather", "c10d::_allgather_base_", "gloo:all_gather"),
                            ("reduce-scatter", "c10d::_reduce_scatter_base_", "gloo:all_reduce")):
        size = time = 0.0
        for rank in range(2):
            full = [max(e["args"]["Input Dims"][0][0], e["args"]["Input Dims"][1][0]) * 4
                    for e in _raw_calls(trace("fsdp2", rank), call)]
            size += sum(full)
            time += sum(e["dur"] for e in _raw_calls(trace("fsdp2", rank), run))
        mine = [r for r in rows if r["collective"] == kind]
        assert sum(r["bytes"] for r in mine) == size
        assert sum(r["time_us"] for r in mine) == pytest.approx(time, rel=1e-9)
        for r in mine:
            per_rank = r["per_rank"].values()
            assert r["algbw_gbps"] == pytest.approx(r["bytes"] / sum(p["time_us"] for p in per_rank) / 1e3, rel=1e-9)
            assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 0.5, rel=1e-12)


def test_nccl_tests_definitions_reproduce_tracelens_figures_of_a_llama70b_fsdp_run():
    """TraceLens's NCCL summary (implicit sync) of 8 MI300X ranks: its message sizes (MiB) are S, its fastest
    call's algorithmic bandwidth (GiB/s) S / its shortest latency, and bus / algorithmic its factor."""
    with open(FIXTURES / "tracelens" / "llama70b-fsdp-nccl-summary-implicit-sync.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 5
    for row in rows:
        kind, n = collective_type(row["Collective name"]), int(row["Group size"])
        n_in = int(row["In msg nelems"])
        n_out = n_in * n if kind == "all-gather" else n_in // n if kind == "reduce-scatter" else n_in
        (size,) = call_bytes(np.array([n_in]), np.array([n_out]), [kind], [row["dtype"]]).tolist()
        assert size / 2**20 == pytest.approx(float(row["Full msg size (MB)"]), rel=1e-12)
        fastest = size / float(row["comm_latency_min"]) / 1e3  # GB/s
        assert fastest * 1e9 / 2**30 == pytest.approx(float(row["algo bw (GB/s)_max"]), rel=1e-9)
        ratio = float(row["bus bw (GB/s)_mean"]) / float(row["algo bw (GB/s)_mean"])
        assert bus_factor(kind, n) == pytest.approx(ratio, rel=1e-9)


def test_a_rank_in_several_groups_names_a_collective_by_its_size_only_where_one_group_has_it(tables):
    """HSDP on 2 x 2: each rank is in the default group (4), its replicate group and its shard group (2 each).
    gloo records no group, and the 2-member groups are alike: without the flight recorder's file beside the trace
    (tests/test_comm_flight_recorder.py has it) their collectives' group stays unknown, said so."""
    table = tables["hsdp", 0]
    assert {g.name: g.ranks for g in table.metadata.process_groups} == {"0": (0, 1, 2, 3), "1": (0, 2), "3": (0, 1)}
    assert {r[3] for r in records(table)} == {""}
    assert not any(r[9] & (GROUP_ONLY_ONE | GROUP_BY_SIZE) for r in records(table))
    report = analyze_comm(table).groups
    assert report.unknown["group"] == len(records(table)) == 30


def _job(tmp_path, late: dict[str, int]):
    """4 NCCL ranks: group "a" = ranks 0, 1; "b" = 2, 3; "w" = all four. ``late``: group -> the rank that starts
    that group's collectives 50 µs after the others."""
    members = {"a": (0, 1), "b": (2, 3), "w": (0, 1, 2, 3)}
    paths = []
    for rank in range(4):
        kernels = []
        for k in range(6):
            for g, (ranks, stream) in {g: (m, 7 + i) for i, (g, m) in enumerate(members.items())}.items():
                if rank in ranks:
                    start = 1000.0 * k + 100 * stream + (50 if late.get(g) == rank else 0)
                    kernels.append((g, k, stream, start, 20.0))
        path = nccl_rank(tmp_path, rank, kernels)
        document = json.loads(path.read_text())
        document["distributedInfo"]["world_size"] = 4
        path.write_text(json.dumps(document))
        paths.append(path)
    return paths


def test_the_straggler_is_per_group_not_per_world(tmp_path, capsys):
    paths = _job(tmp_path, {"a": 1, "b": 2, "w": 3})
    assert main(["comm", *map(str, paths), "--json"]) == 0
    groups = json.loads(capsys.readouterr().out)["process_groups"]["stragglers"]
    assert {g["group"]: (g["last_rank"], g["arrived_last"], g["collectives"], g["ranks"]) for g in groups} == {
        "a": ("rank1", 6, 6, 2), "b": ("rank2", 6, 6, 2), "w": ("rank3", 6, 6, 4)}
    for g in groups:
        assert g["caused_wait_us"] == pytest.approx(6 * 50.0 * (g["ranks"] - 1))


def test_ddp_all_reduces_are_one_a_step_in_backward_of_the_gradients_bytes():
    """The DDP gloo job of torch-gloo-rank*.json.gz: one bucket of 9,536 float gradients all-reduced per step."""
    for path in (FIXTURES / "torch-gloo-rank0.json.gz", FIXTURES / "torch-gloo-rank1.json.gz"):
        found = records(load_events(str(path)))
        assert [(r[0], r[1], r[2], r[3], r[4], r[6]) for r in found] == [
            (2, "all-reduce", "backward", "0", 9536, "float"), (3, "all-reduce", "backward", "0", 9536, "float")]


def test_gpu_phases_agree_with_the_users_own_phase_ranges_in_the_raw_json():
    """HTA's 2-GPU DDP trace: its author wrapped each step's phases in ``## forward ##``/``## backward ##``/
    ``## optimizer ##`` on the main thread; DDP's all-reduces are launched on autograd's own thread (inside backward
    functions, not inside those ranges), its buffer broadcasts in forward. Each NCCL kernel's phase is the range
    its launch happened during, whatever the thread, by hand from the raw JSON."""
    path = FIXTURES / "kineto-2rank-nccl-rank0.json.gz"
    events = _raw_events(path)
    ranges = [(e["name"].strip("# "), e["ts"], e["ts"] + e["dur"]) for e in events
              if e.get("cat") == "user_annotation" and e["name"].startswith("## ")]
    launch = {e["args"]["correlation"]: e["ts"] for e in events if e.get("cat") == "cuda_runtime"}
    expected = collections.Counter()
    for e in events:
        if e.get("cat") == "kernel" and e["name"].startswith("nccl") and e["args"]["correlation"] in launch:
            t = launch[e["args"]["correlation"]]
            (phase,) = [name for name, start, end in ranges if start <= t < end]
            expected[(collective_type(e["name"]), phase)] += 1
    table = load_events(str(path))
    found = collections.Counter((r[1], r[2]) for r in records(table))
    assert found == expected and expected == {("all-reduce", "backward"): 15, ("broadcast", "forward"): 6}
    launched_in_backward_functions = [r for r in records(table) if r[1] == "all-reduce"]
    assert all(r[9] & PHASE_LIBRARY for r in launched_in_backward_functions)


def _kineto_cpu_rank(path, events, groups=(("0", "default_pg", [0, 1]),)):
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events, "distributedInfo": {
        "backend": "gloo", "rank": 0, "world_size": max(max(r) for _, _, r in groups) + 1,
        "pg_config": [{"pg_name": n, "pg_desc": d, "pg_size": len(r), "ranks": r} for n, d, r in groups]}}))
    return path


def _op(name, tid, ts, dur, cat="cpu_op", **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_a_worker_threads_group_is_that_of_the_collectives_it_ran_whose_group_is_known(tmp_path):
    """A rank of a 2-D mesh in three groups (8, 2 and 4 members): an all-gather of 4 members' shards is the 4-member
    group's, and so is the all-reduce gloo's same worker thread ran; another thread's all-reduce stays unknown."""
    gather = {"Input Dims": [[1024], [256], [], [], []], "Input type": ["float", "float", "", "Scalar", "Scalar"]}
    reduce = {"Input Dims": [[[64]], [], [], [], [], []], "Input type": ["TensorList", "", "", "", "Scalar", "Scalar"]}
    path = _kineto_cpu_rank(tmp_path / "rank0.json", [
        _op("ProfilerStep#1", 1, 0, 200, cat="user_annotation"),
        _op("c10d::_allgather_base_", 1, 10, 2, **gather), _op("c10d::allreduce_", 1, 20, 2, **reduce),
        _op("c10d::allreduce_", 1, 30, 2, **reduce),
        _op("gloo:all_gather", 7, 40, 5, cat="user_annotation", **{"Input Dims": [[256]], "Input type": ["float"]}),
        _op("gloo:all_reduce", 7, 50, 5, cat="user_annotation", **{"Input Dims": [[64]], "Input type": ["float"]}),
        _op("gloo:all_reduce", 9, 60, 5, cat="user_annotation", **{"Input Dims": [[64]], "Input type": ["float"]}),
    ], groups=(("0", "default_pg", list(range(8))), ("1", "mesh_tp", [0, 1]), ("2", "mesh_dp", [0, 2, 4, 6])))
    found = sorted(records(load_events(str(path))), key=lambda r: r[-1])
    assert [(r[1], r[3], r[7], r[9] & (GROUP_BY_SIZE | GROUP_BY_THREAD)) for r in found] == [
        ("all-gather", "2", 4, GROUP_BY_SIZE), ("all-reduce", "2", -1, GROUP_BY_THREAD), ("all-reduce", "", -1, 0)]


def test_a_worker_threads_runs_carry_out_the_calls_in_the_order_they_were_made(tmp_path):
    """Two all-reduces of the same size called before gloo's worker thread starts the first: the first run is the
    first call's (in forward), the second the second's (in backward)."""
    op = _op
    shapes = {"Input Dims": [[[256]], [], [], [], [], []], "Input type": ["TensorList", "", "", "", "Scalar", "Scalar"]}
    path = _kineto_cpu_rank(tmp_path / "rank0.json", [
        op("ProfilerStep#1", 1, 0, 100, cat="user_annotation"),
        op("forward", 1, 1, 20, cat="user_annotation"), op("aten::mm", 1, 2, 5), op("c10d::allreduce_", 1, 8, 2, **shapes),
        op("backward", 1, 25, 60, cat="user_annotation"), op("c10d::allreduce_", 1, 26, 2, **shapes),
        op("aten::mm", 1, 30, 5),
        op("gloo:all_reduce", 9, 40, 5, cat="user_annotation", **{"Input Dims": [[256]], "Input type": ["float"]}),
        op("gloo:all_reduce", 9, 50, 5, cat="user_annotation", **{"Input Dims": [[256]], "Input type": ["float"]}),
    ])
    found = sorted(records(load_events(str(path))), key=lambda r: r[-1])
    assert [(r[1], r[2], r[4], r[6]) for r in found] == [("all-reduce", "forward", 256, "float"),
                                                         ("all-reduce", "backward", 256, "float")]


def test_a_send_is_matched_with_its_receive_by_group_peer_and_order():
    """The pipeline's 2 steps: each stage's 4 sends a step meet the other stage's 4 receives, k-th with k-th."""
    per_worker = instances(load_events([str(trace("pp", 0)), str(trace("pp", 1))]))
    matched, unmatched = matched_groups(per_worker)
    assert unmatched == 0 and len(matched) == 2 * sum(e["ops"] for e in oracle("pp", 0)["p2p_ops"].values())
    for members in matched:
        ends = {worker: inst.name for worker, inst in members}
        assert sorted(ends.values()) == ["gloo:recv", "gloo:send"], ends


def test_only_a_send_or_a_receive_takes_a_peer_from_its_recorded_rank(tmp_path):
    """Kineto's ``Dst Rank``/``Src Rank`` are a rank of the group, mapped through its members: a send's peer; a
    broadcast's root recorded alike is no peer."""
    path = nccl_rank(tmp_path, 0, [("5", 1, 7, 10.0, 5.0), ("5", 2, 7, 30.0, 5.0)], world=4)
    document = json.loads(path.read_text())
    members = {"Process Group Ranks": "[0, 3]", "In msg nelems": 8, "Out msg nelems": 8, "dtype": "Float"}
    document["traceEvents"][0]["args"].update(members, **{"Collective name": "send", "Dst Rank": 1})
    document["traceEvents"][1]["args"].update(members, **{"Collective name": "broadcast", "Src Rank": 1})
    path.write_text(json.dumps(document))
    found = sorted(records(load_events(str(path))), key=lambda r: r[-1])
    assert [(r[1], r[8]) for r in found] == [("send/recv", 3), ("broadcast", -1)]


def test_over_nccl_a_pipelines_transfers_are_in_the_phase_of_the_data_they_carry(nccl_tables):
    """On a GPU, autograd runs the backward on a thread of its own, not the schedule's: a send after a backward is
    backward all the same. Per step, the first stage sends the first micro-batch's activations (forward) and
    receives the last one's gradient (backward), the second stage the reverse; an exchange is in the phase of what
    it receives (the work that waits for it): gradients on the first stage, activations on the second."""
    expected = {0: ["forward", *["backward"] * 4], 1: [*["forward"] * 4, "backward"]}
    for rank in range(2):
        per_step: dict[int, list[str]] = {}
        for step, _, phase, *_ in records_with_calls(nccl_tables["pp", rank]):
            per_step.setdefault(step, []).append(phase)
        assert per_step == {2: expected[rank], 3: expected[rank]}, rank
