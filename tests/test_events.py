import numpy as np
import pytest

from rnnprof.events import Device, EventTableBuilder, Kind, concat, parse_tf_device


def _table(fmt, base, events):
    b = EventTableBuilder(fmt, [f"{fmt}.json"])
    for ts, name, dev in events:
        b.add(ts, 1.0, name, name.split(":")[0], dev, "lane", Kind.HOST_OP)
    return b.build(time_base_us=base)


def test_parse_tf_device_variants():
    assert parse_tf_device("/job:localhost/replica:0/task:0/device:GPU:1") == Device("gpu", 1)
    assert parse_tf_device("/device:CPU:3") == Device("cpu", 3)
    assert parse_tf_device("/gpu:0") == Device("gpu", 0)
    assert parse_tf_device("/job:worker/replica:0/task:2/device:CPU:0") == Device("cpu", 0, "/job:worker/replica:0/task:2")
    assert parse_tf_device("not a device") is None


def test_builder_interns_strings_and_devices():
    t = _table("x", 0.0, [(0, "MatMul", Device("gpu", 0)), (5, "MatMul", Device("gpu", 1)), (9, "Add", Device("gpu", 0))])
    assert len(t) == 3
    assert list(t.text(t.name)) == ["MatMul", "MatMul", "Add"]
    assert t.name[0] == t.name[1] != t.name[2]
    assert t.devices == (Device("gpu", 0), Device("gpu", 1))
    assert len(t.on_device(Device("gpu", 0))) == 2
    assert t.code_of("Add") == t.name[2]
    assert t.code_of("absent") == -1


def test_concat_aligns_time_bases_explicitly():
    a = _table("a", 1000.0, [(0, "A", Device("gpu", 0, "rank0"))])
    b = _table("b", 1500.0, [(0, "B", Device("gpu", 0, "rank1"))])
    merged = concat([a, b])
    assert merged.time_base_us == 1000.0
    np.testing.assert_allclose(merged.ts, [0.0, 500.0])
    assert list(merged.text(merged.name)) == ["A", "B"]
    assert [d.label for d in merged.devices] == ["rank0/gpu:0", "rank1/gpu:0"]
    started = concat([a, b], align="start")
    np.testing.assert_allclose(started.ts, [0.0, 0.0])
    with pytest.raises(ValueError):
        concat([a], align="nonsense")
