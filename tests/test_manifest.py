"""The run manifest read once into ``events.Manifest``: what the writers write comes back as the same JSON object,
and a malformed manifest is one line that names the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rnnprof import rundir
from rnnprof.cli import main
from rnnprof.errors import InputError
from rnnprof.events import Manifest, ManifestDevice, StepCpuTime
from rnnprof.recording import ranks
from rnnprof.rundir.manifest import new_manifest, read_manifest
from rnnprof.rundir.writer import RunWriter

SEED = Path(__file__).resolve().parent / "fuzz_seeds" / rundir.MANIFEST


def _round_trips(path: Path) -> Manifest:
    text = (path / rundir.MANIFEST).read_text()
    manifest = read_manifest(path)
    assert manifest.as_dict() == json.loads(text)
    assert json.dumps(manifest.as_dict(), indent=2) == json.dumps(json.loads(text), indent=2)  # key order too
    return manifest


def test_a_tensorflow_runs_manifest_round_trips(tmp_path):
    writer = RunWriter(tmp_path / "run", command=["rnnprof", "trace"], config={"model": "x", "devices": 2})
    writer.set_devices(["/device:CPU:0", "/device:CPU:1"], "logical-cpu")
    writer.manifest["step_times"]["timed"] += [0.5, 0.25]
    writer.manifest["step_cpu"]["timed"] += [{"process_s": 0.4, "host_busy_s": None}] * 2
    writer.update(throughput={"median_step_seconds": 0.375, "words_definition": "tokens"}, traced_steps=[3, 4],
                  clock_offsets={"/job:worker/task:0": {"applied_us": 0.0}})
    writer.finish()
    manifest = _round_trips(writer.path)
    assert manifest.devices == (ManifestDevice("/device:CPU:0", "logical-cpu"),
                                ManifestDevice("/device:CPU:1", "logical-cpu"))
    assert manifest.step_cpu.timed == (StepCpuTime(0.4, None),) * 2 and manifest.traced_steps == (3, 4)
    assert manifest.device_kinds == {"logical-cpu"} and manifest.median_step_seconds == 0.375
    assert manifest.status == rundir.STATUS_COMPLETE and not manifest.is_torch


def test_a_pytorch_runs_manifest_round_trips(tmp_path):
    run = tmp_path / "run"
    (run / rundir.TORCH_TRACES_DIR).mkdir(parents=True)
    for rank in (0, 1):
        (run / rundir.TORCH_TRACES_DIR / f"rank{rank}.json.gz").write_bytes(b"")
        ranks.write_record(run, {"rank": rank, "world_size": 2, "backend": "gloo", "status": "complete",
                                 "trace": f"torch/rank{rank}.json.gz", "steps": [4, 5], "steps_run": 6},
                           command=["python", "train.py"])
    ranks.combine(run, exit_code=0)
    manifest = _round_trips(run)
    assert manifest.is_torch and manifest.world_size == 2 and manifest.backend == "gloo"
    assert set(manifest.rank_traces) == {"torch/rank0.json.gz", "torch/rank1.json.gz"}
    assert manifest.status == rundir.STATUS_COMPLETE and manifest.steps_seen == 6


def test_the_seed_and_a_new_manifest_round_trip(tmp_path):
    assert Manifest.from_dict(json.loads(SEED.read_text())).as_dict() == json.loads(SEED.read_text())
    fresh = new_manifest(["rnnprof", "trace"], {"model": "x"})
    assert Manifest.from_dict(fresh).as_dict() == fresh
    assert Manifest.from_dict({"status": "complete", "odd": [1]}).as_dict() == {"status": "complete", "odd": [1]}


MALFORMED = {
    "not an object": ("[1, 2]", "manifest is not a JSON object"),
    "a step not a number": ('{"traced_steps": [3, "4"]}', "Expected `int`, got `str` - at `$.traced_steps[1]`"),
    "a bool for a step": ('{"profiled_steps": [true]}', "Expected `int`, got `bool` - at `$.profiled_steps[0]`"),
    "config a string": ('{"config": "fast"}', "Expected `object`, got `str` - at `$.config`"),
    "throughput a list": ('{"throughput": [1, 2]}', "Expected `object`, got `array` - at `$.throughput`"),
    "a device without its name": ('{"devices": [{"kind": "gpu"}]}',
                                  "Object missing required field `name` - at `$.devices[0]`"),
    "a step's CPU times without process_s": ('{"step_cpu": {"timed": [{"host_busy_s": 1.0}]}}',
                                             "Object missing required field `process_s` - at `$.step_cpu.timed[0]`"),
    "a status not a string": ('{"status": 1}', "Expected `str`, got `int` - at `$.status`"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_manifest_is_one_line_naming_the_field(tmp_path, capsys, case):
    text, expected = MALFORMED[case]
    run = tmp_path / "run"
    (run / rundir.TIMELINES_DIR).mkdir(parents=True)
    (run / rundir.MANIFEST).write_text(text)
    with pytest.raises(InputError, match="manifest") as raised:
        read_manifest(run)
    assert expected in str(raised.value) and "\n" not in str(raised.value)
    assert main(["comm", str(run)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert str(run / rundir.MANIFEST) in line and expected in line


def test_untimed_fetches_round_trip_and_each_is_a_note_in_step_order(tmp_path):
    """A cluster task whose fetches TensorFlow left untimed (``untimed_fetches``, the writer's record of the
    timeline's) is named by every command reading the run, steps in their numeric order."""
    from rnnprof.rundir.manifest import run_notes

    writer = RunWriter(tmp_path / "run", command=["rnnprof", "trace"], config={"model": "x"})
    writer.update(untimed_fetches={"10": {"/job:ps/replica:0/task:1": 3}, "2": {"/job:ps/replica:0/task:0": 13}},
                  traced_steps=[])
    writer.finish()
    manifest = _round_trips(writer.path)
    assert manifest.untimed_fetches["2"] == {"/job:ps/replica:0/task:0": 13}
    notes = [n for n in run_notes([writer.path]) if "TensorFlow timed none" in n]
    assert [n.split(": ")[1] for n in notes] == ["step 2", "step 10"]
    assert "the 13 tensor(s) that /job:ps/replica:0/task:0 fetched from other tasks" in notes[0]
