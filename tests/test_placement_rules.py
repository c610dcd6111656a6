"""Each placement rule on small built graphs and event tables: positive and negative."""

from __future__ import annotations

import networkx as nx
import pytest

from rnnprof.analyzers.placement import (AuditInput, KernelList, NotChecked, PlacementFinding, Severity,
                                         audit_placement)
from rnnprof.analyzers.placement import (imbalance, inter_op_threads, missing_kernels, replica_pinning,
                                         soft_placement, transfers, update_placement)
from rnnprof.events import Device, EventTableBuilder, Kind, Manifest

CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
CPU1 = "/job:localhost/replica:0/task:0/device:CPU:1"


def graph(*nodes):
    """nodes: (name, op, requested, assigned, [inputs])"""
    g = nx.DiGraph()
    for name, op, requested, assigned, *rest in nodes:
        g.add_node(name, op=op, requested_device=requested, assigned_device=assigned)
    for name, _, _, _, *rest in nodes:
        for src in (rest[0] if rest else []):
            g.add_edge(src, name, control=False)
    return g


def events(*rows, steps=1, step_len=1000.0):
    """rows: (name, op, device_index, start, dur[, kind[, nbytes]]) repeated for each step."""
    b = EventTableBuilder("test")
    for step in range(steps):
        base = step * step_len
        for name, op, dev, start, dur, *rest in rows:
            kind = rest[0] if rest else Kind.HOST_OP
            nbytes = rest[1] if len(rest) > 1 else -1
            device = Device("cpu", dev) if isinstance(dev, int) else dev
            b.add(base + start, dur, name, op, device, "ops", kind, step=step, nbytes=nbytes)
    return b.build()


def findings(outcome) -> list[PlacementFinding]:
    assert not isinstance(outcome, NotChecked), outcome
    return outcome


# Two towers: tower_0 on CPU:0, tower_1 on CPU:1, each with an LSTM-ish matmul and a softmax.
def towers(pin_softmax: bool):
    sm_dev = CPU0 if pin_softmax else CPU1
    return graph(
        ("tower_0/x", "Placeholder", "/device:CPU:0", CPU0),
        ("tower_0/lstm/MatMul", "MatMul", "/device:CPU:0", CPU0, ["tower_0/x"]),
        ("tower_0/lstm/Tanh", "Tanh", "/device:CPU:0", CPU0, ["tower_0/lstm/MatMul"]),
        ("tower_0/projection", "MatMul", "/device:CPU:0", CPU0, ["tower_0/lstm/Tanh"]),
        ("tower_0/softmax", "Softmax", "/device:CPU:0", CPU0, ["tower_0/projection"]),
        ("tower_1/x", "Placeholder", "/device:CPU:1", CPU1),
        ("tower_1/lstm/MatMul", "MatMul", "/device:CPU:1", CPU1, ["tower_1/x"]),
        ("tower_1/lstm/Tanh", "Tanh", "/device:CPU:1", CPU1, ["tower_1/lstm/MatMul"]),
        ("tower_1/lstm/Sigmoid", "Sigmoid", "/device:CPU:1", CPU1, ["tower_1/lstm/MatMul"]),
        ("tower_1/projection", "MatMul", "/device:CPU:0" if pin_softmax else "/device:CPU:1", sm_dev,
         ["tower_1/lstm/Tanh"]),
        ("tower_1/softmax", "Softmax", "/device:CPU:0" if pin_softmax else "/device:CPU:1", sm_dev,
         ["tower_1/projection"]),
        ("loss_1", "Mean", "", sm_dev, ["tower_1/softmax"]),  # outside any tower scope
    )


def tower_events(pin_softmax: bool, steps=2):
    sm = 0 if pin_softmax else 1
    return events(
        ("tower_0/lstm/MatMul", "MatMul", 0, 0, 100), ("tower_0/lstm/Tanh", "Tanh", 0, 100, 20),
        ("tower_0/projection", "MatMul", 0, 120, 50), ("tower_0/softmax", "Softmax", 0, 170, 30),
        ("tower_1/lstm/MatMul", "MatMul", 1, 0, 100), ("tower_1/lstm/Tanh", "Tanh", 1, 100, 20),
        ("tower_1/lstm/Sigmoid", "Sigmoid", 1, 100, 10),
        # pinned: device 0 runs them after its own work, device 1 idles from 120 to 280
        ("tower_1/projection", "MatMul", sm, 200 if pin_softmax else 120, 50),
        ("tower_1/softmax", "Softmax", sm, 250 if pin_softmax else 170, 30),
        steps=steps,
    )


def test_soft_placement_fallback_names_ops_groups_and_time():
    g = graph(
        ("tower_0/rnn/MatMul", "MatMul", "/device:GPU:0", CPU0),
        ("tower_0/rnn/MatMul_1", "MatMul", "/device:GPU:0", CPU0),
        ("tower_0/rnn/Const", "Const", "/device:GPU:0", CPU0),
        ("tower_0/ok", "Add", "/device:CPU:0", CPU0),
        ("free", "Add", "", CPU0),
    )
    ev = events(("tower_0/rnn/MatMul", "MatMul", 0, 0, 40), ("tower_0/rnn/MatMul_1", "MatMul", 0, 50, 60), steps=2)
    (f,) = findings(soft_placement.check(AuditInput(graph=g, events=ev)))
    assert f.severity == Severity.ERROR
    assert set(f.ops) == {"tower_0/rnn/MatMul", "tower_0/rnn/MatMul_1", "tower_0/rnn/Const"}
    assert f.devices == ("gpu:0", "cpu:0")
    assert f.cost_us_per_step == pytest.approx(100.0)
    matmuls = next(gr for gr in f.evidence["groups"] if gr["op"] == "MatMul")
    assert matmuls["count"] == 2 and matmuls["scope"] == "tower_0/rnn" and matmuls["us_per_step"] == 100.0


def test_soft_placement_negative_and_not_checked():
    assert findings(soft_placement.check(AuditInput(graph=towers(pin_softmax=True)))) == []
    assert isinstance(soft_placement.check(AuditInput(events=tower_events(True))), NotChecked)
    unassigned = graph(("a", "MatMul", "/device:GPU:0", ""))
    outcome = soft_placement.check(AuditInput(graph=unassigned))
    assert isinstance(outcome, NotChecked) and "assigned" in outcome.reason


def test_soft_placement_only_plumbing_is_info():
    g = graph(("v", "VarHandleOp", "/device:GPU:0", CPU0), ("c", "Const", "/device:GPU:0", CPU0))
    (f,) = findings(soft_placement.check(AuditInput(graph=g)))
    assert f.severity == Severity.INFO and f.cost_us_per_step is None


def test_replica_pinning_names_pinned_ops_and_estimates_the_wait():
    inp = AuditInput(graph=towers(pin_softmax=True), events=tower_events(True))
    (f,) = findings(replica_pinning.check(inp))
    assert f.severity == Severity.ERROR
    assert set(f.ops) == {"tower_1/projection", "tower_1/softmax", "loss_1"}
    assert f.evidence["ops_attributed_by_consumption"] == 1
    assert f.devices == ("cpu:0", "cpu:1")
    # device 0 runs tower 1's ops 200..280 while device 1 has been idle since 120
    assert f.cost_us_per_step == pytest.approx(80.0)
    assert f.evidence["us_per_step_on_wrong_device"] == pytest.approx(80.0)


def _manifest(data: dict | None) -> Manifest | None:
    """A run manifest of these fields (None stays None)."""
    return None if data is None else Manifest.from_dict(data)


def _logical_cpus(cores: int) -> dict:
    return {"devices": [{"name": CPU0, "kind": "logical-cpu"}, {"name": CPU1, "kind": "logical-cpu"}],
            "machine": {"cpu_count": cores}}


def test_replica_pinning_on_logical_cpus_costs_only_the_time_their_shared_cores_idle():
    # The pinned ops run 200..280 on device 0 while device 1 waits; a second op of device 0 (another thread
    # of the shared pool) runs 200..240 beside them. On 2 cores the wait idles no core until 240.
    busy = tower_events(True, steps=1)
    extra = events(("tower_0/loss", "Mean", 0, 200, 40))
    from rnnprof.events import concat

    both = concat([busy, extra])
    for manifest, cost in ((_logical_cpus(2), 40.0), (_logical_cpus(8), 80.0), (None, 80.0),
                           ({**_logical_cpus(2), "devices": [{"name": CPU0, "kind": "gpu"}]}, 80.0)):
        inp = AuditInput(graph=towers(True), events=both, manifest=_manifest(manifest))
        (f,) = findings(replica_pinning.check(inp))
        assert f.severity == Severity.ERROR and f.cost_us_per_step == pytest.approx(cost), manifest
        assert f.evidence["us_per_step_tower_device_idle_meanwhile"] == pytest.approx(80.0)


def test_replica_pinning_without_pin_finds_nothing():
    inp = AuditInput(graph=towers(pin_softmax=False), events=tower_events(False))
    assert findings(replica_pinning.check(inp)) == []


def test_replica_pinning_from_trace_alone():
    (f,) = findings(replica_pinning.check(AuditInput(events=tower_events(True))))
    assert set(f.ops) == {"tower_1/projection", "tower_1/softmax"}
    assert f.cost_us_per_step == pytest.approx(80.0)


def _chain(g, first_input, prefix, length, device):
    """``length`` ops, each consuming the previous one, listed deepest first (a GraphDef need not list a
    node's inputs before it, and a graph edited after it was built does not)."""
    names = [f"{prefix}/op_{i}" for i in range(length)]
    for i in reversed(range(length)):
        g.add_node(names[i], op="Mul", requested_device=device, assigned_device=device)
        g.add_edge(names[i - 1] if i else first_input, names[i], control=False)
    return names


def test_replica_pinning_follows_a_consumer_chain_of_any_depth():
    g = towers(pin_softmax=True)
    deep = _chain(g, "tower_1/softmax", "head", 12, CPU0)
    attribution = replica_pinning.tower_attribution(AuditInput(graph=g))
    assert {name: attribution.get(name) for name in deep} == {name: (1, "consumes") for name in deep}
    (f,) = findings(replica_pinning.check(AuditInput(graph=g)))
    assert set(deep) <= set(f.ops) and f.evidence["ops_attributed_by_consumption"] == 1 + len(deep)


def test_a_node_is_attributed_only_after_all_its_inputs_are():
    """The end of a deep tower-1 chain and of a short tower-0 chain meet: the node has inputs of two towers,
    even though the short chain is attributed long before the deep one."""
    g = towers(pin_softmax=False)
    deep = _chain(g, "tower_1/softmax", "deep", 12, CPU1)
    short = _chain(g, "tower_0/softmax", "short", 1, CPU0)
    g.add_node("both", op="AddV2", requested_device=CPU0, assigned_device=CPU0)
    g.add_edge(deep[-1], "both", control=False)
    g.add_edge(short[-1], "both", control=False)
    attribution = replica_pinning.tower_attribution(AuditInput(graph=g))
    assert "both" not in attribution and attribution[deep[-1]] == (1, "consumes")


def test_a_loop_outside_the_tower_scopes_takes_the_tower_that_feeds_it():
    """A while loop's body is a cycle through its back edge: decided as a whole, however long."""
    g = towers(pin_softmax=True)
    body = _chain(g, "tower_1/softmax", "while", 12, CPU0)
    g.add_node("while/Merge", op="Merge", requested_device=CPU0, assigned_device=CPU0)
    g.add_edge("tower_1/softmax", "while/Merge", control=False)
    g.remove_edge("tower_1/softmax", body[0])
    g.add_edge("while/Merge", body[0], control=False)
    g.add_edge(body[-1], "while/Merge", control=False)  # the back edge
    g.add_edge("tower_0/softmax", body[5], control=True)  # control inputs carry no tensor
    attribution = replica_pinning.tower_attribution(AuditInput(graph=g))
    assert {name: attribution.get(name) for name in ["while/Merge", *body]} == {
        name: (1, "consumes") for name in ["while/Merge", *body]}


def test_replica_pinning_needs_towers():
    outcome = replica_pinning.check(AuditInput(graph=graph(("a", "MatMul", "", CPU0))))
    assert isinstance(outcome, NotChecked) and "tower" in outcome.reason


def _updates(devices, mode=None):
    nodes = list(towers(False).nodes(data=True))
    g = towers(False)
    for k, dev in enumerate(devices):
        g.add_node(f"update/tower_{k}/w/ApplyGradientDescent", op="ApplyGradientDescent",
                   requested_device="", assigned_device=dev)
    assert nodes
    return AuditInput(graph=g, manifest=_manifest({"config": {"variable_update": mode}} if mode else None))


def test_updates_of_all_replicas_on_one_device_is_an_error_in_replicated_mode():
    (f,) = findings(update_placement.check(_updates([CPU0, CPU0])))
    assert f.severity == Severity.ERROR and f.devices == ("cpu:0",)
    assert f.evidence["mode"] == "replicated" and f.evidence["mode_from"].startswith("graph")
    assert len(f.ops) == 2


def test_updates_spread_or_parameter_server_are_fine():
    assert findings(update_placement.check(_updates([CPU0, CPU1]))) == []
    # One parameter device applying every update is parameter-server mode's design: information only, explained.
    (info,) = findings(update_placement.check(_updates([CPU0, CPU0], mode="parameter_server")))
    assert info.severity == Severity.INFO and info.evidence["mode"] == "parameter_server"
    assert "Expected in parameter_server mode" in info.fix and "intends" in info.title


@pytest.mark.parametrize("all_reduce, devices, central", [("pscpu", 4, True), ("hierarchical", 2, True),
                                                          ("hierarchical", 4, False), ("ring", 2, False)])
def test_which_all_reduces_aggregate_on_one_device_by_design(all_reduce, devices, central):
    assert update_placement.aggregates_centrally(all_reduce, devices) is central


def test_ops_colocated_with_a_shared_variable_follow_it_as_information():
    """Parameter-server mode on logical devices: tower 1's embedding lookup (and its gradient) run next to
    the shared table on tower 0's device because TF colocates them; a softmax pinned there is still an error."""
    g = towers(pin_softmax=True)
    g.add_node("shared/table", op="VarHandleOp", requested_device=CPU0, assigned_device=CPU0)
    g.add_node("tower_1/embedding_lookup", op="ResourceGather", requested_device=CPU0, assigned_device=CPU0,
               colocation=("shared/table",))
    g.add_edge("tower_1/x", "tower_1/embedding_lookup", control=False)
    ev = events(("tower_1/embedding_lookup", "ResourceGather", 0, 0, 10), ("tower_1/lstm/MatMul", "MatMul", 1, 20, 80))
    found = findings(replica_pinning.check(AuditInput(graph=g, events=ev)))
    (info,) = [f for f in found if f.severity == Severity.INFO]
    assert info.ops == ("tower_1/embedding_lookup",) and info.evidence["colocated_with"] == {"shared/table": 1}
    (error,) = [f for f in found if f.severity == Severity.ERROR]
    assert "tower_1/embedding_lookup" not in error.ops and "tower_1/softmax" in error.ops
    assert "tower_1/embedding_lookup" not in replica_pinning.misplaced_names(AuditInput(graph=g))
    # colocated with a tower's own variable copy on another tower's device is still pinning
    g.add_node("tower_0/table", op="VarHandleOp", requested_device=CPU0, assigned_device=CPU0)
    g.nodes["tower_1/embedding_lookup"]["colocation"] = ("tower_0/table",)
    found = findings(replica_pinning.check(AuditInput(graph=g)))
    assert not [f for f in found if f.severity == Severity.INFO]


def test_update_rule_not_checked_without_training_ops():
    outcome = update_placement.check(AuditInput(graph=towers(False)))
    assert isinstance(outcome, NotChecked)


def test_imbalance_warns_above_threshold_only():
    busy = events(("a", "MatMul", 0, 0, 100), ("b", "MatMul", 1, 0, 50), steps=3)
    (f,) = findings(imbalance.check(AuditInput(events=busy)))
    assert f.severity == Severity.WARNING
    assert f.evidence["median_spread"] == pytest.approx(0.5)
    assert f.evidence["work_us_per_step"] == {"cpu:0": 100.0, "cpu:1": 50.0}
    assert f.cost_us_per_step == pytest.approx(25.0)
    even = events(("a", "MatMul", 0, 0, 100), ("b", "MatMul", 1, 0, 90), steps=3)
    assert findings(imbalance.check(AuditInput(events=even))) == []


def test_imbalance_ignores_receives_and_needs_two_devices():
    waiting = events(("a", "MatMul", 0, 0, 100), ("b", "MatMul", 1, 0, 95), ("r", "_Recv", 1, 100, 400))
    assert findings(imbalance.check(AuditInput(events=waiting))) == []
    outcome = imbalance.check(AuditInput(events=events(("a", "MatMul", 0, 0, 10))))
    assert isinstance(outcome, NotChecked)


GPU0 = Device("gpu", 0)


def test_host_round_trip_is_avoidable_but_feeds_are_not():
    trip = events(
        ("edge_1__recv_x_0", "MEMCPYHtoD", GPU0, 0, 5, Kind.MEMCPY, 4096),
        ("edge_2_grad/Prod", "MEMCPYDtoH", GPU0, 10, 2, Kind.MEMCPY, 4),
        ("edge_3_grad/floordiv", "MEMCPYHtoD", GPU0, 20, 2, Kind.MEMCPY, 4),
        ("k", "MatMul", GPU0, 0, 30, Kind.KERNEL),
        steps=2,
    )
    found = findings(transfers.check(AuditInput(events=trip)))
    avoidable = [f for f in found if f.severity == Severity.WARNING]
    assert len(avoidable) == 1
    assert set(avoidable[0].ops) == {"grad/Prod", "grad/floordiv"}
    assert avoidable[0].evidence["bytes_per_step"] == 8 and avoidable[0].cost_us_per_step == pytest.approx(4.0)
    feed_only = events(("edge_1__recv_x_0", "MEMCPYHtoD", GPU0, 0, 5, Kind.MEMCPY, 4096))
    assert all(f.severity == Severity.INFO for f in findings(transfers.check(AuditInput(events=feed_only))))


def test_copies_that_do_not_name_their_tensor_are_never_called_round_trips():
    """Kineto names a copy only by its kind: a DtoH then an HtoD may be a loss read and the next batch."""
    kineto = events(("Memcpy DtoH (Device -> Pageable)", "Memcpy DtoH (Device -> Pageable)", GPU0, 0, 2, Kind.MEMCPY, 4),
                    ("Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pageable -> Device)", GPU0, 5, 3, Kind.MEMCPY, 64),
                    ("k", "MatMul", GPU0, 0, 30, Kind.KERNEL), steps=2)
    (inventory,) = findings(transfers.check(AuditInput(events=kineto)))
    assert inventory.severity == Severity.INFO and inventory.evidence["per_step"] == 2
    assert "DtoH 1" in inventory.title and "HtoD 1" in inventory.title


def test_receives_only_in_the_graph_say_why_they_have_no_cost():
    g = towers(pin_softmax=True)
    g.add_node("tower_1/lstm/Tanh/_3", op="_Recv", requested_device="", assigned_device=CPU0,
               tensor_name="edge_9_tower_1/lstm/Tanh")
    g.add_edge("tower_1/lstm/Tanh/_3", "tower_1/projection", control=False)
    (warn, _) = findings(transfers.check(AuditInput(graph=g, events=tower_events(True))))
    assert warn.cost_us_per_step is None and "records no time for these receives" in warn.cost_basis
    (warn, _) = findings(transfers.check(AuditInput(graph=g)))
    assert warn.cost_basis.startswith("no trace given")


def test_receives_of_pinned_tensors_are_avoidable():
    g = towers(pin_softmax=True)
    g.add_node("tower_1/lstm/Tanh/_3", op="_Recv", requested_device="", assigned_device=CPU0,
               tensor_name="edge_9_tower_1/lstm/Tanh")
    g.add_edge("tower_1/lstm/Tanh/_3", "tower_1/projection", control=False)
    ev = events(("tower_0/lstm/MatMul", "MatMul", 0, 0, 100), ("tower_1/lstm/MatMul", "MatMul", 1, 0, 100),
                ("tower_1/projection", "MatMul", 0, 200, 50),
                ("tower_1/lstm/Tanh/_3", "_Recv", 0, 100, 30, Kind.COMMUNICATION))
    found = findings(transfers.check(AuditInput(graph=g, events=ev)))
    (warn,) = [f for f in found if f.severity == Severity.WARNING]
    assert warn.ops == ("tower_1/lstm/Tanh",)
    clean = findings(transfers.check(AuditInput(graph=towers(False), events=tower_events(False))))
    assert not [f for f in clean if f.severity > Severity.INFO]


def _threads_manifest(threads, cores=2, devices=2):
    return {"config": {"devices": devices}, "session_config": {"inter_op_threads": threads},
            "machine": {"cpu_count": cores}}


# Two towers' ops per step: side by side (both devices busy 0-100 µs, then 100-180 on device 0) or taking turns
# (device 0 busy 0-100, device 1 100-180): one inter-op thread runs one op at a time.
SIDE_BY_SIDE = (("tower_0/a", "MatMul", 0, 0, 60), ("tower_0/b", "Tanh", 0, 60, 120),
                ("tower_1/a", "MatMul", 1, 0, 50), ("tower_1/b", "Tanh", 1, 50, 30))
TURNS = (("tower_0/a", "MatMul", 0, 0, 60), ("tower_0/b", "Tanh", 0, 60, 40),
         ("tower_1/a", "MatMul", 1, 100, 50), ("tower_1/b", "Tanh", 1, 150, 30))


@pytest.mark.parametrize("threads, expected", [(1, Severity.WARNING), (2, Severity.INFO), (3, None)])
def test_inter_op_threads_without_a_trace_judge_the_setting_alone(threads, expected):
    found = findings(inter_op_threads.check(AuditInput(manifest=_manifest(_threads_manifest(threads)))))
    assert [f.severity for f in found] == ([] if expected is None else [expected])
    assert all(f.cost_us_per_step is None for f in found)


def test_tfs_default_pool_is_not_judged_without_a_trace():
    # 0: TF sizes the pool itself (not recorded), whatever the cores; the core count alone proves nothing
    for cores in (2, 16, None):
        manifest = _threads_manifest(0, cores)
        outcome = inter_op_threads.check(AuditInput(manifest=_manifest(manifest)))
        assert isinstance(outcome, NotChecked) and "trace" in outcome.reason
    assert isinstance(inter_op_threads.check(AuditInput()), NotChecked)
    outcome = inter_op_threads.check(AuditInput(manifest=_manifest({"session_config": {"inter_op_threads": 0}})))
    assert isinstance(outcome, NotChecked) and "device count" in outcome.reason


@pytest.mark.parametrize("threads, rows, expected", [
    (0, SIDE_BY_SIDE, None), (0, TURNS, Severity.WARNING),  # TF's default: judged by the trace alone
    (1, TURNS, Severity.ERROR), (1, SIDE_BY_SIDE, Severity.INFO),
    (2, SIDE_BY_SIDE, Severity.INFO), (2, TURNS, Severity.WARNING), (4, TURNS, None)])
def test_inter_op_threads_judged_by_whether_the_towers_ran_side_by_side(threads, rows, expected):
    inp = AuditInput(manifest=_manifest(_threads_manifest(threads)), events=events(*rows, steps=3))
    found = findings(inter_op_threads.check(inp))
    assert [f.severity for f in found] == ([] if expected is None else [expected])
    for f in found:
        # side by side: both busy 0-80 µs of a 180 µs union; taking turns: never
        share = 80 / 180 if rows is SIDE_BY_SIDE else 0.0
        assert f.evidence["side_by_side_share"] == pytest.approx(share, abs=1e-3)
        assert f.evidence["busy_union_ms_per_step"] == pytest.approx(0.180)
        assert f.evidence["took_turns"] is (rows is TURNS)
        # the union less the busiest device's busy time: 180 - 100 (turns), 180 - 180 (side by side)
        assert f.cost_us_per_step == pytest.approx(80.0 if rows is TURNS else 0.0)


def test_inter_op_threads_cost_counts_the_cores_the_towers_could_share():
    # Four towers taking turns, 50 µs each, on a 2-core host: side by side they need at least 200/2 µs
    rows = tuple((f"tower_{k}/a", "MatMul", k, 50 * k, 50) for k in range(4))
    manifest = _threads_manifest(1, cores=2, devices=4)
    (found,) = findings(inter_op_threads.check(AuditInput(manifest=_manifest(manifest), events=events(*rows, steps=3))))
    assert found.severity == Severity.ERROR and found.cost_us_per_step == pytest.approx(100.0)
    (found,) = findings(inter_op_threads.check(AuditInput(manifest=_manifest(_threads_manifest(1, cores=8, devices=4)),
                                                          events=events(*rows, steps=3))))
    assert found.cost_us_per_step == pytest.approx(150.0)  # enough cores: down to one tower's 50 µs


def kernel_list(by_op, gpu=False):
    """A kernel list as a TF build would give it (the real registry is checked in test_placement_tf.py)."""
    return KernelList("test", frozenset({"CPU", "GPU"} if gpu else {"CPU"}),
                      {op: frozenset(types) for op, types in by_op.items()})


def test_missing_kernel_only_where_the_registry_knows():
    g = graph(("nccl", "NcclAllReduce", "/device:CPU:0", CPU0), ("m", "MatMul", "/device:GPU:0", CPU0),
              ("fn", "my_function", "/device:CPU:0", CPU0))
    cpu_only = kernel_list({"NcclAllReduce": {"GPU"}, "MatMul": {"CPU", "GPU"}})
    found = findings(missing_kernels.check(AuditInput(graph=g, kernels=cpu_only)))
    errors = [f for f in found if f.severity > Severity.INFO]
    assert [f.ops for f in errors] == [("nccl",)]
    assert errors[0].evidence["kernels_for"] == ["GPU"] and errors[0].evidence["requested_type"] == "CPU"
    assert any("GPU" in f.evidence.get("unchecked_device_types", []) for f in found)
    gpu_only = graph(("m", "MatMul", "/device:GPU:0", CPU0))
    outcome = missing_kernels.check(AuditInput(graph=gpu_only, kernels=cpu_only))
    assert isinstance(outcome, NotChecked) and "GPU" in outcome.reason
    with_cuda = kernel_list({"MatMul": {"CPU", "GPU"}}, gpu=True)
    assert findings(missing_kernels.check(AuditInput(graph=gpu_only, kernels=with_cuda))) == []
    any_device = kernel_list({"NcclAllReduce": {"DEFAULT"}})
    assert findings(missing_kernels.check(AuditInput(graph=g, kernels=any_device))) == [
        f for f in found if f.severity == Severity.INFO]


def test_missing_kernel_needs_the_kernel_list_given_with_the_graph():
    g = graph(("nccl", "NcclAllReduce", "/device:CPU:0", CPU0))
    outcome = missing_kernels.check(AuditInput(graph=g))
    assert isinstance(outcome, NotChecked) and "kernel registry" in outcome.reason


def test_audit_collects_findings_and_reasons():
    result = audit_placement(AuditInput(graph=towers(True), events=tower_events(True)))
    assert result.worst == Severity.ERROR
    assert result.findings[0].rule_id == replica_pinning.RULE_ID
    reasons = {n.rule_id: n.reason for n in result.not_checked}
    assert inter_op_threads.RULE_ID in reasons
    assert set(result.checked) | set(reasons) == {r.id for r in result.rules}


def test_busy_interval_merge_ignores_malformed_negative_durations():
    import numpy as np

    from rnnprof.analyzers.placement.busy import length, union_array

    merged = union_array(np.array([0.0, 1.0, 10.0, 20.0]), np.array([2.0, 3.0, 4.0, 21.0]))  # [10, 4) is malformed
    assert merged.tolist() == [[0.0, 3.0], [20.0, 21.0]]
    assert length(merged) == 4.0


def test_busy_minus_cuts_every_interval_by_the_union_of_the_others():
    import numpy as np

    from rnnprof.analyzers.placement.busy import length, minus

    a = np.array([[0.0, 10.0], [20.0, 30.0]])
    b = np.array([[2.0, 4.0], [3.0, 6.0], [9.0, 22.0], [25.0, 26.0]])
    assert minus(a, b).tolist() == [[0.0, 2.0], [6.0, 9.0], [22.0, 25.0], [26.0, 30.0]]
    assert length(minus(a, np.zeros((0, 2)))) == 20.0 and minus(np.zeros((0, 2)), b).shape == (0, 2)


def _cpu_manifest(step_cpu, kind="logical-cpu", cores=2):
    """One inter-op thread over 2 devices of ``kind``; each timed step 100 µs of wall time, with CPU times."""
    manifest = _threads_manifest(1, cores=cores)
    manifest["devices"] = [{"name": f"/device:CPU:{k}", "kind": kind} for k in range(2)]
    manifest["step_times"] = {"warmup": [], "timed": [100e-6] * len(step_cpu)}
    manifest["step_cpu"] = {"warmup": [], "timed": [{"process_s": p, "host_busy_s": h} for p, h in step_cpu]}
    return manifest


@pytest.mark.parametrize("step_cpu, cpu_figure", [
    # the process used 1.5 of 2 free cores: its 150 µs of CPU time spread over both need 75 µs: 25 µs
    ([(150e-6, 150e-6)] * 5, 25.0),
    # another process took one of the 2 cores meanwhile: 120 µs of CPU time on the one left need 120 µs: nothing
    ([(120e-6, 220e-6)] * 5, 0.0),
    # one core's worth, nobody else: 100 µs spread over 2 cores take 50 µs: 50 µs
    ([(100e-6, 100e-6)] * 5, 50.0),
    # a single-threaded process on an idle host: 30 µs over 2 cores, 85 µs, more than the towers' 80 µs
    ([(30e-6, 30e-6)] * 5, 85.0),
    # the host's busy time unknown: every core counted free
    ([(150e-6, None)] * 5, 25.0),
])
def test_inter_op_threads_cost_on_shared_cores_lies_between_the_towers_and_the_cores_figures(step_cpu, cpu_figure):
    # TURNS: the towers' union 180 µs less the busiest tower's 100 µs = 80 µs, if no op slows down beside another
    inp = AuditInput(manifest=_manifest(_cpu_manifest(step_cpu)), events=events(*TURNS, steps=3))
    (found,) = findings(inter_op_threads.check(inp))
    assert found.severity == Severity.ERROR
    assert found.evidence["cpu_bound_ms_per_step"] == pytest.approx(cpu_figure / 1000, abs=1e-6)
    assert found.evidence["timed_steps"] == 5
    if cpu_figure < 80:  # the geometric mean of the two
        assert found.cost_us_per_step == pytest.approx((cpu_figure * 80) ** 0.5, abs=1e-6)
        assert "geometric mean" in found.cost_basis and f"{cpu_figure / 1000:.2f} ms" in found.cost_basis
        assert "0.08 ms, the devices' busy union" in found.cost_basis
    else:  # the towers' figure is the bound
        assert found.cost_us_per_step == pytest.approx(80.0)


def test_inter_op_threads_cpu_bound_only_for_devices_sharing_the_hosts_cores():
    # GPUs do not run on the host's cores: the process's CPU time says nothing of what their towers gain
    inp = AuditInput(manifest=_manifest(_cpu_manifest([(150e-6, 150e-6)] * 5, kind="gpu")),
                     events=events(*TURNS, steps=3))
    (found,) = findings(inter_op_threads.check(inp))
    assert found.cost_us_per_step == pytest.approx(80.0) and "timed_steps" not in found.evidence
    # CPU times that do not pair with the step times one for one are not used
    manifest = _cpu_manifest([(150e-6, 150e-6)] * 5)
    manifest["step_times"]["timed"].append(100e-6)
    inp = AuditInput(manifest=_manifest(manifest), events=events(*TURNS, steps=3))
    (found,) = findings(inter_op_threads.check(inp))
    assert found.cost_us_per_step == pytest.approx(80.0)
