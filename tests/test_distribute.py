"""--trainer distribute: the same workload trained by tf.distribute, beside rnnprof's own trainer."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rnnprof.cli import main
from rnnprof.models.config import WorkloadConfig, model_defaults


def resnet(**changes) -> WorkloadConfig:
    values = dict(model="resnet18", preset="small", devices=2, batch_size=4, optimizer="momentum",
                  learning_rate=0.01, fake_location="device", warmup=1, batches=2)
    values.update(changes)
    return WorkloadConfig(**values)


@pytest.mark.slow
def test_mirrored_replicas_hold_equal_variables_on_their_devices():
    from rnnprof.training.distribute import DistributeRun

    with DistributeRun(resnet(fake_location="cpu")) as run:
        assert run.strategy_name == "MirroredStrategy"
        before = run.replica_variables()
        results = [run.step() for _ in range(2)]
        after = run.replica_variables()
        devices = run.replica_devices()
    assert [d.rsplit("device:", 1)[-1] for d in devices] == ["CPU:0", "CPU:1"]
    assert len(after) == 2 and set(after[0]) == set(after[1]) and any("kernel" in k for k in after[0])
    assert all(np.array_equal(after[0][k], after[1][k]) for k in after[0]), "mirrored copies differ"
    assert any(not np.array_equal(before[0][k], after[0][k]) for k in before[0]), "the steps changed no weight"
    assert [r.words for r in results] == [2 * 4, 2 * 4], "images per step: replicas x batch per device"


@pytest.mark.slow
def test_central_storage_keeps_one_copy_on_the_host_and_counts_words_like_rnnprof():
    """The RNNLM under CentralStorageStrategy: one copy of the variables, on the parameter device, and the
    same words per step as rnnprof's trainer on the same batches."""
    from rnnprof.training.distribute import DistributeRun
    from rnnprof.training.runner import DataParallelRun

    sizes = {**model_defaults("rnnlm", "small"), "batch_size": 2}  # a WorkloadConfig does not apply its preset
    config = WorkloadConfig(model="rnnlm", preset="small", devices=2, variable_update="parameter_server", **sizes)
    with DistributeRun(config) as run:
        assert run.strategy_name == "CentralStorageStrategy"
        assert [d.rsplit("device:", 1)[-1] for d in run.replica_devices()] == ["CPU:0"]
        assert len(run.replica_variables()) == 1
        theirs = [run.step().words for _ in range(2)]
    with DataParallelRun(config) as own:
        ours = [own.step().words for _ in range(2)]
    assert theirs == ours and all(w > 0 for w in ours)


@pytest.mark.slow
def test_scale_puts_the_trainers_side_by_side(capsys):
    argv = ["scale", "--model", "resnet18", "--preset", "small", "--devices", "2", "--batch-size", "2",
            "--fake-location", "python", "--warmup", "1", "--batches", "2", "--trainer", "rnnprof,distribute"]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["config"]["trainer"] == ["rnnprof", "distribute"]
    rows = doc["rows"]
    assert [(r["trainer"], r["devices"]) for r in rows] == [("rnnprof", 2), ("distribute", 2)]
    for row in rows:
        assert row["images"] == 2 * 2 * 2  # devices x batch x timed batches, whoever trains
    by_trainer = {r["trainer"]: r["images_per_second"] for r in rows}
    (pair,) = doc["trainers"]["rows"]
    assert pair["devices"] == 2 and pair["images_per_second"] == by_trainer
    assert pair["ratio"] == pytest.approx(by_trainer["rnnprof"] / by_trainer["distribute"])
    assert doc["trainers"]["strategies"]["replicated"] == "MirroredStrategy"


@pytest.mark.parametrize("argv, message", [
    (["--variable-update", "independent", "--trainer", "distribute"],
     "--trainer distribute runs --variable-update replicated (MirroredStrategy) or parameter_server"),
    (["--trainer", "keras"], "--trainer: unknown value keras"),
    (["--framework", "torch", "--model", "rnnlm", "--trainer", "rnnprof,distribute"],
     "--trainer distribute applies to --framework tensorflow"),
])
def test_bad_trainers_are_one_line_errors(capsys, argv, message):
    code = main(["scale", "--devices", "1", *argv])
    _, err = capsys.readouterr()
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
