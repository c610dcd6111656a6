"""The data-parallel runner on the real workloads, with tiny configurations."""

import numpy as np
import pytest

from rnnprof.models.config import WorkloadConfig
from rnnprof.training.runner import DataParallelRun, thread_warnings

pytestmark = pytest.mark.slow


def tiny(**changes) -> WorkloadConfig:
    base = WorkloadConfig(model="rnnlm", encoder="fused", layers=1, units=16, embedding=16, vocab_size=50,
                          src_max_len=6, tgt_max_len=6, batch_size=4, learning_rate=0.5, warmup=1, batches=2)
    return base.replace(**changes)


def _differs(a: dict, b: dict) -> bool:
    return any(not np.allclose(a[name], b[name]) for name in a)


def _identical(replicas: list[dict]) -> bool:
    return all(np.allclose(replicas[0][name], other[name]) for other in replicas[1:] for name in replicas[0])


SHARED = [
    dict(variable_update="parameter_server"),
    dict(variable_update="replicated", all_reduce="ring"),
    dict(variable_update="replicated", all_reduce="hierarchical"),
    dict(variable_update="replicated", all_reduce="pscpu"),
    dict(variable_update="replicated", all_reduce="ring", gradient_repacking=2),
    dict(variable_update="replicated", all_reduce="hierarchical", gradient_repacking=3),
]


def _mode_id(mode: dict) -> str:
    return "-".join(str(v) for v in mode.values())


def _pairwise(modes: list[dict]) -> list:
    """Each mode on 2 and on 3 devices, once with each encoder: every pair of mode, encoder and device count is
    run (the modes' exchange reads the encoder only through the towers' gradients, the all-reduces the device
    count), not every triple; the loop encoder alternates between 2 and 3 devices from one mode to the next."""
    cases = []
    for i, mode in enumerate(modes):
        loop_on = 2 if i % 2 == 0 else 3
        for devices in (2, 3):
            encoder = "loop" if devices == loop_on else "fused"
            cases.append(pytest.param(mode, encoder, devices, id=f"{_mode_id(mode)}-{encoder}-{devices}"))
    return cases


@pytest.mark.parametrize("mode, encoder, devices", _pairwise(SHARED))
def test_replicas_stay_identical_and_train(mode, encoder, devices):
    with DataParallelRun(tiny(encoder=encoder, devices=devices, **mode)) as run:
        before = run.tower_variables()
        assert len(before) == devices
        assert _identical(before), "replicas must start from tower 0's initial values"
        result = run.step()
        after = run.tower_variables()
    assert _identical(after)
    assert _differs(before[0], after[0])
    assert result.words > 0 and np.isfinite(result.loss)


@pytest.mark.parametrize("encoder, devices", [("loop", 3), ("fused", 2)])  # each encoder, each device count
def test_independent_towers_diverge(encoder, devices):
    with DataParallelRun(tiny(encoder=encoder, devices=devices, variable_update="independent")) as run:
        before = run.tower_variables()
        run.step()
        run.step()
        after = run.tower_variables()
    for k in range(devices):
        assert _differs(before[k], after[k])
    # Towers see different batches and exchange nothing, so their updates differ.
    deltas = [{n: after[k][n] - before[k][n] for n in after[k]} for k in range(devices)]
    assert all(_differs(deltas[0], deltas[k]) for k in range(1, devices))


def test_replicated_matches_parameter_server_step_for_step():
    # Both apply the same averaged gradient to the same starting point: same losses.
    losses = {}
    for mode in ("parameter_server", "replicated"):
        with DataParallelRun(tiny(devices=2, variable_update=mode, all_reduce="ring")) as run:
            losses[mode] = [run.step().loss for _ in range(3)]
    assert np.allclose(losses["parameter_server"], losses["replicated"], rtol=1e-4)
    assert losses["replicated"][0] != losses["replicated"][2]


def test_nmt_towers_on_three_devices_replicated_and_parameter_server():
    for mode in (dict(variable_update="replicated", all_reduce="hierarchical", gradient_repacking=2),
                 dict(variable_update="parameter_server")):
        config = tiny(model="nmt", encoder="fused", devices=3, **mode)
        with DataParallelRun(config) as run:
            before = run.tower_variables()
            result = run.step()
            after = run.tower_variables()
        assert _identical(after) and _differs(before[0], after[0])
        assert result.words > 0


def test_nmt_loop_encoder_with_attention_replicated():
    config = tiny(model="nmt", encoder="loop", attention="luong", devices=2, all_reduce="ring")
    with DataParallelRun(config) as run:
        run.step()
        assert _identical(run.tower_variables())


def test_loss_falls_on_the_bundled_corpus():
    config = WorkloadConfig(model="rnnlm", preset="small", encoder="fused", layers=1, units=64, embedding=64,
                            vocab_size=2000, src_max_len=20, tgt_max_len=20, batch_size=16, learning_rate=1.0,
                            devices=2, variable_update="replicated", all_reduce="ring", optimizer="adam")
    config = config.replace(learning_rate=0.01)
    with DataParallelRun(config) as run:
        losses = [run.step().loss for _ in range(12)]
    assert np.mean(losses[-3:]) < np.mean(losses[:3]) - 0.3, losses


def test_scopes_are_readable_for_later_analyses():
    with DataParallelRun(tiny(devices=2, all_reduce="ring")) as run:
        names = [op.name for op in run.graph.get_operations()]
        assert run.device_kind == "logical-cpu"
        assert run.device_names == ["/job:localhost/replica:0/task:0/device:CPU:0",
                                    "/job:localhost/replica:0/task:0/device:CPU:1"]
        types = {op.type for op in run.graph.get_operations() if op.name.startswith("allreduce/")}
        tower1_devices = {op.device for op in run.graph.get_operations()
                          if op.name.startswith("tower_1/") and op.device}
    assert any(n.startswith("tower_0/") for n in names) and any(n.startswith("tower_1/") for n in names)
    assert any(n.startswith("update/") for n in names)
    assert "CollectiveReduceV2" in types or "CollectiveReduce" in types
    assert tower1_devices == {"/job:localhost/replica:0/task:0/device:CPU:1"}


def test_parameter_server_keeps_one_copy_on_the_parameter_device():
    with DataParallelRun(tiny(devices=2, variable_update="parameter_server")) as run:
        variables = [op for op in run.graph.get_operations() if op.type == "VarHandleOp"
                     and not op.name.startswith("update/")]
        aggregation = [op for op in run.graph.get_operations() if op.name.startswith("gradient_aggregation/")]
    assert variables and all(op.name.startswith("shared/") for op in variables)
    assert all(op.device.endswith("CPU:0") for op in variables)
    assert aggregation and all(op.device.endswith("CPU:0") for op in aggregation)


def test_requested_gpus_fall_back_without_hanging_the_all_reduce():
    with DataParallelRun(tiny(devices=2, request_gpu=True, all_reduce="ring")) as run:
        assert all("GPU" in d for d in run.device_names)
        run.step()
        assert _identical(run.tower_variables())


def test_one_inter_op_thread_warns_but_runs():
    config = tiny(devices=2, inter_op_threads=1)
    assert thread_warnings(config) and not thread_warnings(config.replace(inter_op_threads=0))
    assert not thread_warnings(config.replace(devices=1))
    with DataParallelRun(config) as run:
        assert run.warnings == thread_warnings(config)
        run.step()


def test_warmup_steps_are_not_timed_on_a_real_run():
    from rnnprof.training.measure import measure

    with DataParallelRun(tiny(devices=2)) as run:
        m = measure(run, warmup=2, batches=3)
        assert run.steps_run == 5
    assert len(m.timed_steps) == 3 and len(m.warmup_steps) == 2
    assert m.timed.total_seconds == pytest.approx(sum(s.seconds for s in m.timed_steps))
    assert m.timed.words == sum(s.words for s in m.timed_steps)


def test_one_device_runs_every_mode():
    for mode in ("independent", "parameter_server", "replicated"):
        with DataParallelRun(tiny(devices=1, variable_update=mode)) as run:
            assert np.isfinite(run.step().loss)
