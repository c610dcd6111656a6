"""ResNet on synthetic images: the model trains, batch norm keeps its moving averages, replicas stay equal,
images are counted, and each place the images are made in really is where they are made."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rnnprof.cli import main
from rnnprof.models.config import WorkloadConfig

pytestmark = pytest.mark.slow


def small(**changes) -> WorkloadConfig:
    values = dict(model="resnet18", preset="small", devices=2, batch_size=4, optimizer="momentum",
                  learning_rate=0.01, fake_location="device", warmup=1, batches=2)
    values.update(changes)
    return WorkloadConfig(**values)


def _moving_averages(run) -> dict[str, np.ndarray]:
    import tensorflow as tf

    with run.graph.as_default():
        variables = [v for v in tf.compat.v1.global_variables() if "moving_" in v.op.name]
    return dict(zip((v.op.name for v in variables), run.session.run(variables)))


@pytest.fixture(scope="module")
def replicated_run():
    """Two towers of ResNet-18 (small), replicated; closed after the module's tests."""
    from rnnprof.training.runner import DataParallelRun

    with DataParallelRun(small()) as run:
        yield run


def test_batch_norm_moving_averages_move_with_training(replicated_run):
    before = _moving_averages(replicated_run)
    # One mean and one variance per batch norm layer and tower: ResNet-18 has 1 + 16 + 3 projections = 20.
    assert len(before) == 2 * 20 * 2
    assert all(np.all(v == 0) for k, v in before.items() if k.endswith("moving_mean"))
    replicated_run.step()
    after = _moving_averages(replicated_run)
    moved = [k for k in before if not np.allclose(before[k], after[k])]
    assert len(moved) == len(before), f"unchanged: {sorted(set(before) - set(moved))[:5]}"


def test_replicated_towers_hold_identical_variables_after_steps(replicated_run):
    first = replicated_run.tower_variables()[0]
    result = replicated_run.step()
    towers = replicated_run.tower_variables()
    assert set(towers[0]) == set(towers[1]) and any("kernel" in k for k in towers[0])
    assert all(np.array_equal(towers[0][k], towers[1][k]) for k in towers[0])
    assert any(not np.array_equal(first[k], towers[0][k]) for k in first), "the step changed the weights"
    assert result.words == 2 * 4, "images per step: towers x batch per device"


def test_independent_towers_see_different_images_and_diverge():
    from rnnprof.training.runner import DataParallelRun

    with DataParallelRun(small(variable_update="independent", fake_location="cpu")) as run:
        for _ in range(2):
            run.step()
        towers = run.tower_variables()
    assert any(not np.array_equal(towers[0][k], towers[1][k]) for k in towers[0])


def test_the_loss_falls_on_a_batch_kept_on_the_device():
    """The same images every step: a working model and optimizer fit them."""
    from rnnprof.training.runner import DataParallelRun

    with DataParallelRun(small(devices=1, learning_rate=0.05)) as run:
        losses = [run.step().loss for _ in range(12)]
    assert min(losses[-3:]) < 0.7 * losses[0], losses


def test_resnet50_builds_bottlenecks_and_counts_images():
    from rnnprof.training.runner import DataParallelRun

    with DataParallelRun(small(model="resnet50", devices=1, batch_size=2, fake_location="python")) as run:
        assert run.step().words == 2
        names = set(run.tower_variables()[0])
    # 16 bottleneck blocks of three convolutions, 4 projections, the stem: 53 kernels with the dense layer.
    assert len([n for n in names if n.endswith("kernel")]) == 3 * 16 + 4 + 1 + 1


def test_each_image_location_places_its_input_ops_where_it_says():
    """From the graph the workload builds in two towers' device scopes: device keeps a variable per tower,
    cpu makes images by an op on the host every step, python reads a tf.data iterator on the host."""
    import tensorflow as tf

    from rnnprof.models.tensorflow.resnet import ResNetWorkload

    expected = {"device": "VarHandleOp", "cpu": "RandomUniform", "python": "IteratorGetNext"}
    for location, op_type in expected.items():
        workload = ResNetWorkload(small(fake_location=location))
        with tf.Graph().as_default() as graph:
            for tower in range(2):
                with tf.device(f"/job:localhost/replica:0/task:0/device:CPU:{tower}"), tf.name_scope(f"tower_{tower}"):
                    workload.make_inputs(tower)
            ops = [op for op in graph.get_operations() if op.type == op_type]
            devices = sorted({op.device.rsplit("device:", 1)[-1] for op in ops})
        if location == "device":
            assert devices == ["CPU:0", "CPU:1"], (location, devices)  # one per tower's device
        else:
            assert devices == ["CPU:0"], (location, devices)  # the host


def test_scale_prints_images_per_location_and_json_carries_every_figure(capsys):
    # one device count: the sweep over counts is test_scale's; here, the locations and the images counted on each
    code = main(["scale", "--model", "resnet18", "--preset", "small", "--devices", "2", "--batch-size", "2",
                 "--fake-location", "device,cpu", "--warmup", "1", "--batches", "2", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert doc["unit"] == "images" and doc["config"]["fake_location"] == ["device", "cpu"]
    rows = doc["rows"]
    assert [(r["fake_location"], r["devices"]) for r in rows] == [("device", 2), ("cpu", 2)]
    for row in rows:
        assert row["images"] == row["devices"] * 2 * 2  # devices x batch x timed batches
        assert row["images_per_second"] == pytest.approx(row["images"] / row["total_seconds"])
        assert "words_per_second" not in row
    code = main(["scale", "--model", "resnet18", "--preset", "small", "--devices", "1", "--batch-size", "2",
                 "--fake-location", "python", "--warmup", "1", "--batches", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "images/s" in out and "images made on python" in out and "words" not in out


@pytest.mark.parametrize("argv, message", [
    (["--model", "rnnlm", "--fake-location", "cpu"], "--fake-location applies to the ResNets"),
    (["--model", "resnet50", "--preset", "rnn_benchmark"], "--preset rnn_benchmark applies to --model rnnlm"),
    (["--model", "resnet50", "--fake-location", "gpu"], "--fake-location: unknown value"),
])
def test_bad_resnet_flags_are_one_line_errors(capsys, argv, message):
    code = main(["scale", "--devices", "1", *argv])
    _, err = capsys.readouterr()
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
