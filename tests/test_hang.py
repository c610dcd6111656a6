"""rnnprof hang on real flight-recorder dumps and stacks of planted gloo hangs (tests/data/hang, made by
tests/hang_jobs/hang_job.py under `rnnprof trace`): each verdict names the rank, the collective and the line the
script marks with `# plant:`; dumps that name any class or function are refused without being run."""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import jsonschema
import pytest

from rnnprof.analyzers.hang import DESYNC, MISMATCH, NEVER_ARRIVED, RankRecorder, RecordedCollective, analyze_hang
from rnnprof.cli import main
from rnnprof.inputs.hang import read_hang_inputs

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "hang"
JOB = ROOT / "tests" / "hang_jobs" / "hang_job.py"
FAULT_STEP, STEPS = 5, 8  # hang_job.py's: step s makes all_reduce #2s+1 (gradient) and #2s+2 (statistic)
GRADIENT, STATISTIC, LAST = 2 * FAULT_STEP + 1, 2 * FAULT_STEP + 2, 2 * STEPS


def plant(name: str) -> str:
    """``hang_job.py:N``, N the line the script marks ``# plant: name``."""
    lines = JOB.read_text().splitlines()
    return f"hang_job.py:{next(i for i, line in enumerate(lines, 1) if line.endswith(f'# plant: {name}'))}"


def verdict_of(case: str):
    given = read_hang_inputs(sorted(DATA.joinpath(case).iterdir()))
    return analyze_hang(given.recorders, given.stacks, 2)


def only_culprit(verdict):
    assert [c.rank for c in verdict.culprits] == [1], verdict.summary
    return verdict.culprits[0]


@pytest.mark.parametrize("case, state, function", [("data", "in no collective", "load_batch"),
                                                   ("lock", "in a lock", "<module>"),
                                                   ("gil", "outside Python", "<module>")])
def test_a_rank_that_never_arrived_is_named_at_its_line_and_the_others_wait_in_the_gradient(case, state, function):
    verdict = verdict_of(case)
    culprit = only_culprit(verdict)
    assert verdict.kind == NEVER_ARRIVED
    assert (culprit.state, culprit.where, culprit.function) == (state, plant(case), function)
    assert [(w.rank, w.op, w.seq, w.where) for w in verdict.waiters] == [(0, "all_reduce", GRADIENT, plant("gradient"))]
    assert f"all_reduce #{GRADIENT} ({plant('gradient')})" in verdict.summary and plant(case) in verdict.summary
    assert culprit.others == ((f"{plant('holder')} in hold_lock",) if case == "lock" else ())


def test_a_rank_that_calls_all_gather_where_the_other_calls_all_reduce_is_a_mismatch():
    verdict = verdict_of("mismatch")
    culprit = only_culprit(verdict)
    assert verdict.kind == MISMATCH
    assert (culprit.op, culprit.seq, culprit.op_where) == ("all_gather", GRADIENT, plant("mismatch"))
    assert {(w.rank, w.op, w.seq, w.where) for w in verdict.waiters} == {
        (0, "all_reduce", GRADIENT, plant("gradient")), (1, "all_gather", GRADIENT, plant("mismatch"))}


def test_a_skipped_all_reduce_is_a_desync_naming_the_collective_missed():
    verdict = verdict_of("skip")
    culprit = only_culprit(verdict)
    assert verdict.kind == DESYNC and culprit.state == "skipped"
    assert (culprit.op, culprit.seq, culprit.op_where) == ("all_reduce", STATISTIC, plant("statistic"))
    assert {(w.rank, w.op, w.seq, w.where) for w in verdict.waiters} == {
        (0, "all_reduce", LAST, plant("statistic")), (1, "barrier", LAST, plant("barrier"))}


def test_ranks_that_agree_on_every_collective_get_no_culprit():
    """The balanced part of a real job: rank 0's and rank 1's first ten collectives, all finished, cut from the
    skip case before rank 1 skipped: no rank is named and no rank waits."""
    given = read_hang_inputs(sorted(DATA.joinpath("skip").glob("*.pkl")))
    cut = {r: RankRecorder(r, tuple(c for c in rec.collectives if c.seq < GRADIENT), GRADIENT - 1)
           for r, rec in given.recorders.items()}
    assert all(len(rec.collectives) == GRADIENT - 1 for rec in cut.values())
    verdict = analyze_hang(cut, {}, 2)
    assert verdict.culprits == () and verdict.waiters == () and verdict.kind == "stuck"


def test_the_command_prints_the_verdict_first_and_its_json_validates(capsys):
    assert main(["hang", *map(str, sorted(DATA.joinpath("data").iterdir()))]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("never arrived: rank 1 is in no collective")
    assert main(["hang", *map(str, sorted(DATA.joinpath("skip").iterdir())), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    schema = json.loads((ROOT / "docs" / "schemas" / "hang.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(document)
    assert document["schema_version"] == 1 and document["kind"] == DESYNC


class _Planted:
    """Unpickled by a trusting reader, this would create ``path``."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        import os

        return os.mkdir, (self.path,)


@pytest.mark.parametrize("payload", ["reduce", "class", "not a pickle", "no entries"])
def test_a_dump_that_is_not_plain_data_is_refused_in_one_line_and_nothing_runs(tmp_path, capsys, payload):
    made = tmp_path / "made"
    data = {"reduce": lambda: pickle.dumps({"entries": [_Planted(str(made))]}),
            "class": lambda: pickle.dumps({"entries": [], "x": RecordedCollective(1, "op")}),
            "not a pickle": lambda: b"\x1f\x8b\x08 gzip, not a pickle",
            "no entries": lambda: pickle.dumps({"version": "2.10"})}[payload]()
    dump = tmp_path / "nccl_trace_rank_0"
    dump.write_bytes(data)
    assert main(["hang", str(dump)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rnnprof hang: error: ") and str(dump) in err[0]
    assert not made.exists()


@pytest.mark.parametrize("name, expected", [("dump", "holds no rank number"), ("run", "has no hang/ folder")])
def test_inputs_it_cannot_judge_are_one_line(tmp_path, capsys, name, expected):
    if name == "run":
        path = tmp_path / "run"
        path.mkdir()
        (path / "manifest.json").write_text(json.dumps({"format": "rnnprof-run", "version": 1, "status": "complete"}))
    else:
        path = tmp_path / "dump"
        path.write_bytes(pickle.dumps({"entries": []}))
    assert main(["hang", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0]


def test_hang_after_is_refused_in_one_line_when_attaching(tmp_path, capsys):
    """A running job rnnprof attaches to is not its to watch nor stop; every job it runs is watched."""
    code = main(["trace", "--attach", "grpc://localhost:1", "--hang-after", "2s", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["rnnprof trace: error: --hang-after does not apply when tracing a running job "
                                 "(--attach); it is for scripts and built-in workloads"]
    assert not (tmp_path / "run").exists()


TF_PROCESS = ROOT / "tests" / "data" / "hang" / "tf_process"


def _marked(path: Path, name: str) -> str:
    lines = path.read_text().splitlines()
    return f"{path.name}:{next(i for i, line in enumerate(lines, 1) if line.endswith(f'# plant: {name}'))}"


def test_one_tf_process_is_named_where_its_main_thread_is_stuck():
    """Stacks of real planted hangs (tests/test_hang_tf.py's jobs): a built-in workload blocked in a Session.run
    that never returns, a script asleep in its data loading, and a rank blocked on a lock another of its threads
    holds (hang_job.py's lock case, read as one process)."""
    from rnnprof.analyzers.hang import STUCK, analyze_process_hang
    from rnnprof.traces.stack_dump import read_stacks

    plants = ROOT / "tests" / "hang_jobs"
    runtime = analyze_process_hang(read_stacks(TF_PROCESS / "runtime" / "rank0.stacks.txt", 0))
    step_at = _marked(plants / "tf_plant" / "sitecustomize.py", "step")
    assert [(c.rank, c.state, c.where, c.function) for c in runtime.culprits] == [(0, "in TensorFlow", step_at, "step")]
    assert runtime.kind == STUCK and re.search(r"inside TensorFlow's runtime, in run \(session\.py:\d+\) called at "
                                               + re.escape(step_at), runtime.summary)
    python = analyze_process_hang(read_stacks(TF_PROCESS / "python" / "rank0.stacks.txt", 0))
    data_at = _marked(plants / "tf_hang_script.py", "data")
    assert [(c.state, c.where, c.function) for c in python.culprits] == [("in Python", data_at, "load_batch")]
    assert "TensorFlow's runtime" not in python.summary
    lock = analyze_process_hang(read_stacks(DATA / "lock" / "rank1.stacks.txt", 0))
    (culprit,) = lock.culprits
    assert (culprit.state, culprit.where, culprit.others) == ("in a lock", plant("lock"),
                                                              (f"{plant('holder')} in hold_lock",))
    nothing = analyze_process_hang(None)
    assert [(c.rank, c.state) for c in nothing.culprits] == [(0, "did not answer")] and nothing.notes


TF_CLUSTER = ROOT / "tests" / "data" / "hang" / "tf_cluster"


def test_a_tf_cluster_task_that_is_not_serving_is_named_and_a_serving_cluster_names_none():
    from rnnprof.analyzers.hang import NEVER_ARRIVED, STUCK, analyze_cluster_hang, serving
    from rnnprof.traces.stack_dump import read_stacks

    serving_task, blocked = (read_stacks(TF_CLUSTER / f"rank{n}.stacks.txt", n) for n in (0, 1))
    chief = read_stacks(TF_CLUSTER / "chief.stacks.txt", -1)
    names = {0: "worker:0", 1: "worker:1"}
    plant_lines = (ROOT / "tests" / "hang_jobs" / "tf_plant" / "sitecustomize.py").read_text().splitlines()
    blocked_at = next(i for i, line in enumerate(plant_lines, 1) if line.endswith("# plant: task"))
    assert serving(serving_task) and not serving(blocked) and not serving(chief)
    verdict = analyze_cluster_hang(names, {0: serving_task, 1: blocked}, chief)
    (culprit,) = verdict.culprits
    assert verdict.kind == NEVER_ARRIVED and (culprit.rank, culprit.state, culprit.where, culprit.function) == (
        1, "not serving", f"sitecustomize.py:{blocked_at}", "blocked_serve")
    assert "the chief waits at runner.py:" in verdict.summary and verdict.summary.endswith("worker:0 serves")
    # the balanced control: both tasks where a serving task waits
    control = analyze_cluster_hang(names, {0: serving_task, 1: read_stacks(TF_CLUSTER / "rank0.stacks.txt", 1)}, chief)
    assert control.kind == STUCK and control.culprits == () and "every task serves" in control.summary
    gone = analyze_cluster_hang(names, {0: serving_task}, chief)  # a task that did not answer is named
    assert [(c.rank, c.state) for c in gone.culprits] == [(1, "did not answer")]


def test_a_cluster_of_tasks_started_elsewhere_names_no_task_and_says_where_its_chief_waits():
    """The chief's stacks of a real hung cluster (its first Session.run waits for worker 1): with tasks started
    elsewhere none can be blamed, the chief's frame is named and the tasks it could not see are said."""
    from rnnprof.analyzers.hang import analyze_remote_cluster_hang
    from rnnprof.traces.stack_dump import read_stacks

    verdict = analyze_remote_cluster_hang(["worker:0", "worker:1"], read_stacks(TF_CLUSTER / "chief.stacks.txt", -1))
    assert verdict.culprits == () and verdict.kind == "stuck"
    assert re.match(r"no step finishes: the chief's main thread waits inside TensorFlow's runtime, in run "
                    r"\(session\.py:\d+\) called at runner\.py:\d+ in __init__; the tasks \(worker:0, worker:1\) "
                    r"were started elsewhere", verdict.summary), verdict.summary
    assert verdict.notes == ("no stacks from worker:0, worker:1: started elsewhere (--cluster-spec)",)
