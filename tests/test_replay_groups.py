"""The critical path and the replay across process groups: a collective joins its group's members only, a send is
waited for by its receive and waits for nothing, FSDP's all-gathers (gloo runs that unpack on their worker thread)
are in the graph, and the changes about collectives by type, by process group and FSDP's prefetch, on the real
sharded runs in tests/data."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from fixtures import FIXTURES, nccl_rank
from rnnprof.analyzers.classify import classify
from rnnprof.analyzers.critical_path import Dependencies
from rnnprof.analyzers.critical_path.graph import build_step_graph
from rnnprof.analyzers.replay import COMM, COMM_GROUP, OVERLAP, PREFETCH, Change, ChangeError, Replayer, whatif
from rnnprof.analyzers.replay.fixes import RequestedChanges
from rnnprof.analyzers.replay.graph import DONE, EDGE_ARRIVAL, EVENT, REPLAY_EDGES
from rnnprof.cli import main
from rnnprof.events.names import ALL_GATHER, FORWARD
from rnnprof.job.whatif import job_whatif
from rnnprof.traces import load_events
from rnnprof.traces.rank_folder import job_of

FSDP = [str(FIXTURES / "torch-gloo-fsdp" / "torch" / f"rank{r}.json.gz") for r in (0, 1)]
PP = [str(FIXTURES / "torch-gloo-pp" / "torch" / f"rank{r}.json.gz") for r in (0, 1)]


def _two_groups(tmp_path):
    """Four GPU ranks in two groups, A (ranks 0, 1) and B (2, 3), each with collectives of seq 1 and 2 (the same
    keys but for the group): rank 2 arrives 400 µs late at B's first, which rank 3 waits for."""
    files = []
    for rank in range(4):
        group = "A" if rank < 2 else "B"
        start, end = {2: (500, 550), 3: (100, 550)}.get(rank, (100, 150))
        files.append(str(nccl_rank(tmp_path, rank, [(group, 1, 7, start, end - start), (group, 2, 7, 600, 50)],
                                   world=4)))
    return load_events(files)


def test_a_collective_joins_the_members_of_its_own_group_only(tmp_path):
    table = _two_groups(tmp_path)
    g = build_step_graph(table, -1)
    worker = {int(r): table.devices[table.device[r]].worker for r in range(len(table))}
    joined = [(worker[u[1]], worker[v]) for u, v, kind in g.edges(data="kind") if kind == "collective"]
    assert joined and {frozenset(pair) for pair in joined if pair[0] != pair[1]} == \
        {frozenset(("rank0", "rank1")), frozenset(("rank2", "rank3"))}
    (step,) = whatif(table, [Change(COMM, "", 0.5)]).steps
    waits = {w.rank: w.measured_us for w in step.waits}
    assert waits["rank3"] == pytest.approx(400) and waits["rank0"] == waits["rank1"] == 0
    assert not step.reasons  # no member ended before its collective's last arrival


def test_a_receive_waits_for_its_send_and_a_send_waits_for_no_receive():
    """The pipeline's sends and receives (4 each way per rank and step, 1F1B), paired by (sender, receiver) and
    order: each pair's done node follows both members' arrivals and precedes the receive alone; the send follows
    its own arrival only (gloo's send does not wait for its receive to be posted)."""
    pairs = 0
    for _, sg in Replayer(load_events(PP)).graphs:
        g, t = sg.graph, sg.table
        names = np.asarray(t.strings, dtype=object)[t.name[g.rows]]
        edges = list(zip(g.src.tolist(), g.dst.tolist(), [REPLAY_EDGES[k] for k in g.kind.tolist()]))
        for done in np.flatnonzero(g.node_kind == DONE).tolist():
            arrivals = {u for u, v, k in edges if v == done and k == EDGE_ARRIVAL}
            members = {v for u, v, k in edges if u in arrivals and g.node_kind[v] == EVENT}
            waits = {v for u, v, k in edges if u == done and v in members}
            assert sorted(names[list(members)]) == ["gloo:recv", "gloo:send"] and len(arrivals) == 2
            assert [names[v] for v in waits] == ["gloo:recv"]
            (send,) = [v for v in members if names[v] == "gloo:send"]
            assert {k for u, v, k in edges if v == send} <= {EDGE_ARRIVAL, "lane", "enqueue"}
            pairs += 1
    assert pairs == 3 * 8


def test_fsdp_all_gathers_that_unpack_on_their_thread_are_in_the_graph():
    """gloo's all-gather runs enclose the copies that unpack the gathered buffer on its worker thread: the run is
    the thread's work and the collective's member, so halving communication replays every all-gather's transfer
    (none were in the graph: 'communication x0.5 (0 nodes)')."""
    table = load_events(FSDP)
    report = whatif(table, [Change(COMM, "", 0.5)])
    done = sum(int((sg.graph.node_kind == DONE).sum()) for _, sg in Replayer(table).graphs)
    assert done == 3 * (7 + 4)  # per step, 7 all-gathers and 4 reduce-scatters matched across the ranks
    assert all(s.predicted_us < s.replayed_us for s in report.steps)


def test_comm_by_collective_type_and_by_process_group_change_those_collectives_alone():
    table = load_events(FSDP)
    changed = {}
    for text in ("", ALL_GATHER, "reduce-scatter"):
        changed[text] = whatif(table, [Change(COMM, text, 0.5)]).changed
    counts = {k: next(iter(v.values())) for k, v in changed.items()}
    assert counts[ALL_GATHER] > 0 and counts["reduce-scatter"] > 0
    assert counts[ALL_GATHER] + counts["reduce-scatter"] == counts[""]  # every collective is one or the other
    for selector in ("0", "default_pg", "0,1", "1,0"):  # by name, description or ranks
        (change,) = RequestedChanges(groups=((COMM_GROUP, selector, 0.5),)).on(table)
        assert whatif(table, [change]).changed == {"process group 0 x0.5": counts[""]}
    with pytest.raises(ChangeError, match=r"no process group '2,3' .*0 \(default_pg\) ranks 0,1"):
        RequestedChanges(groups=((COMM_GROUP, "2,3", 0.5),)).on(table)
    with pytest.raises(ChangeError, match="no all-reduce in the input"):
        whatif(table, [Change(COMM, "all-reduce", 0.5)])


@pytest.mark.parametrize("argv, expected", [(["--comm", "all_gather=0.5"], "all-gather x0.5"),
                                            (["--comm", "0,1=0.5"], "process group 0 x0.5"),
                                            (["--comm", "0.5"], "communication x0.5"),
                                            (["--prefetch"], "each forward all-gather issued one block earlier")])
def test_whatifs_flags_name_the_changes(argv, expected, capsys):
    assert main(["whatif", *FSDP, *argv]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith(f"change: {expected}")


@pytest.mark.parametrize("paths, argv, said", [
    (PP, ["--comm", "mesh=0.5"], "no process group 'mesh'"), (PP, ["--comm", "=0.5"], "nothing before '='"),
    (PP, ["--comm", "all_gather=x"], "'x' is not a number"), (PP, ["--prefetch"], "no all-gather in the input's"),
    (FSDP, ["--comm", "send/recv=0.5"], "no send/recv in the input")])
def test_a_comm_change_the_input_cannot_take_is_one_line(paths, argv, said, capsys):
    assert main(["whatif", *paths, *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err, err


def test_prefetch_issues_each_forward_all_gather_from_the_third_where_the_one_before_it_was_issued():
    table = load_events(FSDP)
    records = table.collectives
    kinds = np.asarray(table.strings, dtype=object)
    forward = (kinds[records.collective] == ALL_GATHER) & (kinds[records.phase] == FORWARD)
    per_rank_step = forward.sum() // (2 * 3)
    assert per_rank_step == 4  # the root's and the 3 blocks'
    report = whatif(table, [Change(PREFETCH)])
    assert report.changed == {Change(PREFETCH).describe(): 2 * 3 * (per_rank_step - 2)}
    assert all(s.predicted_us <= s.replayed_us + 1e-6 for s in report.steps)
    assert min(s.replayed_us - s.predicted_us for s in report.steps) >= 0
    with pytest.raises(ChangeError, match="no all-gather in the input's forward phase"):
        whatif(load_events(PP), [Change(PREFETCH)])


def _prefetched_rank(folder, rank: int, blocks: tuple[str, ...]) -> str:
    """The FSDP run's rank file with an ``FSDP::forward_prefetch`` range inside each named block's pre-forward, as
    FSDP2 records a prefetch it issued: those all-gathers the trace issued early already."""
    with gzip.open(FSDP[rank]) as f:
        trace = json.load(f)
    added = [{**e, "name": f"FSDP::forward_prefetch for {e['name']}", "ts": e["ts"] + 1.0, "dur": 1.0}
             for e in trace["traceEvents"] if e.get("name") in [f"FSDP::pre_forward ({b})" for b in blocks]]
    trace["traceEvents"] += added
    path = folder / f"rank{rank}.json"
    path.write_text(json.dumps(trace))
    return str(path)


@pytest.mark.parametrize("blocks", [("layers.0",), ("layers.0", "layers.1")])
def test_prefetch_leaves_the_all_gathers_the_traces_own_prefetch_issued(tmp_path, blocks):
    paths = [_prefetched_rank(tmp_path, r, blocks) for r in (0, 1)]
    # 4 forward all-gathers a rank and step, the last 2 prefetchable; those the trace prefetched stay
    expected = 2 * 3 * (4 - 2 - len(blocks))
    assert whatif(load_events(paths), [Change(PREFETCH)]).changed.get(Change(PREFETCH).describe(), 0) == expected
    job, _, _ = job_whatif(job_of(paths), RequestedChanges((Change(PREFETCH),)), jobs=1)  # its ranks' parts alike
    assert job.changed.get(Change(PREFETCH).describe(), 0) == expected


def _two_kinds_rank(folder, rank: int) -> str:
    """A GPU rank of a 2-rank job whose step all-reduces (800 µs) early, idles until 4 ms, then all-gathers
    (400 µs) last; every kernel its own launch."""
    events, kernels = [], [("AllReduce_Sum_f32", "allreduce", 100, 800.0), ("AllGather", "allgather", 4100, 400.0)]
    for step in range(4):
        start = step * 10_000.0
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                       "ts": start, "dur": 9000})
        for k, (kernel, name, at, dur) in enumerate(kernels):
            correlation = 1000 + 2 * step + k
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": start + at, "dur": 10, "args": {"correlation": correlation}})
            events.append({"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "ts": start + at + 20, "dur": dur,
                           "name": f"ncclDevKernel_{kernel}_RING_LL(ncclDevKernelArgs)",
                           "args": {"device": rank, "stream": 7, "correlation": correlation,
                                    "Process Group Name": "0", "Process Group Ranks": "[0, 1]", "Group size": 2,
                                    "In msg nelems": 1 << 20, "Out msg nelems": 1 << 20, "dtype": "Float",
                                    "Collective name": name, "Seq": 2 * step + k}})
    path = folder / f"rank{rank}.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events,
                                "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2}}))
    return str(path)


@pytest.mark.parametrize("kind, saved_us", [(ALL_GATHER, 200.0), ("all-reduce", 0.0), ("", 200.0)])
def test_comm_by_type_shortens_the_step_by_what_that_types_transfers_hold_it(tmp_path, kind, saved_us):
    """Halving the all-gather, the step's last work, saves half its 400 µs; halving the all-reduce, followed by
    idle time until the all-gather is launched, saves nothing."""
    report = whatif(load_events([_two_kinds_rank(tmp_path, r) for r in (0, 1)]), [Change(COMM, kind, 0.5)])
    assert len(report.steps) >= 3
    for s in report.steps:
        assert s.replayed_us - s.predicted_us == pytest.approx(saved_us, abs=1.0)


def _one_stream_rank(folder, rank: int) -> str:
    """A GPU rank of a 2-rank job whose stream runs, back to back, a product (300 µs), an all-reduce (800), a
    product, an all-gather (400) and a product, all launched at the step's start."""
    plan = [("gemm", None, 300.0), ("AllReduce_Sum_f32", "allreduce", 800.0), ("gemm", None, 300.0),
            ("AllGather", "allgather", 400.0), ("gemm", None, 300.0)]
    events = []
    for step in range(4):
        start = step * 10_000.0
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                       "ts": start, "dur": 9000})
        at = start + 100.0
        for k, (kernel, collective, dur) in enumerate(plan):
            correlation = 1000 + 10 * step + k
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": start + 10 * k, "dur": 5, "args": {"correlation": correlation}})
            args = {"device": rank, "stream": 7, "correlation": correlation}
            name = "volta_sgemm_128x64_nn"
            if collective:
                name = f"ncclDevKernel_{kernel}_RING_LL(ncclDevKernelArgs)"
                args.update({"Process Group Name": "0", "Process Group Ranks": "[0, 1]", "Group size": 2,
                             "In msg nelems": 1 << 20, "Out msg nelems": 1 << 20, "dtype": "Float",
                             "Collective name": collective, "Seq": 2 * step + (k > 2)})
            events.append({"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "ts": at, "dur": dur, "name": name,
                           "args": args})
            at += dur
    path = folder / f"rank{rank}.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events,
                                "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2}}))
    return str(path)


@pytest.mark.parametrize("what, saved_us", [("all-gather", 300.0), ("all-reduce", 800.0), ("", 1000.0)])
def test_overlapping_one_collective_type_frees_the_compute_after_it_alone(tmp_path, what, saved_us):
    """Overlapped, the all-gather lets the last product follow the one before it (it ends 300 µs sooner, the
    all-gather still running beside it to the step's end); the all-reduce lets the second product follow the
    first, and the all-gather and the last product follow it: 800 µs sooner. Both: the step ends with the
    all-reduce, 1,100 µs after its start instead of 2,100."""
    report = whatif(load_events([_one_stream_rank(tmp_path, r) for r in (0, 1)]), [Change(OVERLAP, what)])
    assert len(report.steps) >= 3
    for s in report.steps:
        assert s.replayed_us - s.predicted_us == pytest.approx(saved_us, abs=1.0)
