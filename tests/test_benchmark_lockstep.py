"""The benchmarks' lockstep: two side processes take turns step by step, first side alternating."""

from __future__ import annotations

import pytest

from fixtures import BENCHMARKS, importable_benchmarks

importable_benchmarks()
from _lockstep import lockstep  # noqa: E402

SIDE = """
import sys, time
sys.path.insert(0, {bench!r})
from _lockstep import serve
name, log, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])

def make_step():
    def step():
        with open(log, "a") as f:
            f.write(name + "\\n")
        return seconds, 10
    return step

print("building")  # output before ready is skipped
serve(make_step)
"""


def test_sides_take_turns_and_are_measured_apart(tmp_path):
    script = tmp_path / "side.py"
    script.write_text(SIDE.format(bench=str(BENCHMARKS)))
    log = tmp_path / "order.txt"
    result = lockstep({"a": [str(script), "a", str(log), "0.5"], "b": [str(script), "b", str(log), "0.25"]},
                      warmup=1, batches=3)
    assert log.read_text().split() == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert result["a"]["words_per_second"] == pytest.approx(30 / 1.5)
    assert result["b"]["words_per_second"] == pytest.approx(30 / 0.75)
    assert result["a"]["seconds"] == pytest.approx(1.5)


def test_a_failing_side_is_one_message_with_its_stderr(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("import sys\nprint('no model here', file=sys.stderr)\nsys.exit(3)\n")
    good = tmp_path / "side.py"
    good.write_text(SIDE.format(bench=str(BENCHMARKS)))
    with pytest.raises(SystemExit, match="bad side failed:\n.*no model here"):
        lockstep({"good": [str(good), "good", str(tmp_path / "log"), "0.1"], "bad": [str(script)]}, 1, 1)
