"""PyTorch capture: ``TorchCapture`` in one process, and ``rnnprof trace --framework torch`` on two gloo ranks.

Expected figures are computed here from the raw Kineto JSON, not taken from rnnprof's output.
"""

import gzip
import json
import re

import pytest

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning",
                                        "ignore::UserWarning")

STEP = re.compile(r"^ProfilerStep#(\d+)$")


def raw_events(path):
    with gzip.open(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def spans(events, name):
    return sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["name"] == name)


@pytest.mark.slow
def test_capture_records_exactly_the_window_with_its_phases_and_flops(tmp_path):
    import torch

    from rnnprof.profiler.capture.torch_profiler import TorchCapture

    torch.manual_seed(0)
    model = torch.nn.Linear(16, 16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    capture = TorchCapture(tmp_path, rank=3, skip_steps=2, steps=2)
    for _ in range(6):
        with capture.phase("forward"):
            loss = model(torch.randn(4, 16)).square().sum()
        with capture.phase("backward"):
            loss.backward()
        with capture.phase("optimizer"):
            optimizer.step()
        capture.step()
    facts = capture.close()
    assert capture.close() == facts  # closing twice changes nothing
    assert facts["trace"] == "torch/rank3.json.gz" and facts["steps"] == [2, 3] and facts["steps_run"] == 6
    assert facts["backend"] is None and facts["world_size"] is None
    events = raw_events(tmp_path / facts["trace"])
    markers = {int(STEP.match(e["name"]).group(1)): (e["ts"], e["ts"] + e["dur"])
               for e in events if STEP.match(e["name"])}
    assert sorted(markers) == [2, 3]
    for phase in ("forward", "backward", "optimizer"):
        ranges = spans(events, phase)
        assert len(ranges) == 2  # one per captured step, each inside its step's marker
        assert all(any(a <= s and e <= b for a, b in markers.values()) for s, e in ranges)
    addmm = [e for e in events if e["name"] == "aten::addmm"]
    assert len(addmm) == 2 and addmm[0]["args"]["Input Dims"] == [[16], [4, 16], [16, 16], [], []]
    # torch's estimate for addmm of [4,16] x [16,16]: 2 * 4 * 16 * 16 per call
    assert facts["flops"]["by_op"]["aten::addmm"] == 2 * (2 * 4 * 16 * 16)
    assert not list(tmp_path.glob("torch/.*"))  # no scratch file left behind


@pytest.mark.slow
def test_a_run_stopped_inside_the_window_keeps_the_steps_it_ran(tmp_path):
    import torch

    from rnnprof.profiler.capture.torch_profiler import TorchCapture

    capture = TorchCapture(tmp_path, rank=0, skip_steps=1, steps=5)
    for _ in range(3):
        torch.randn(8, 8).mm(torch.randn(8, 8))
        capture.step()
    facts = capture.close()
    assert facts["steps"] == [1, 2]
    names = {e["name"] for e in raw_events(tmp_path / facts["trace"])}
    assert {"ProfilerStep#1", "ProfilerStep#2"} <= names and "ProfilerStep#0" not in names


def test_a_window_needs_a_step():
    from rnnprof.profiler.capture.torch_profiler import TorchCapture

    with pytest.raises(ValueError, match="steps >= 1"):
        TorchCapture("unused", steps=0)
