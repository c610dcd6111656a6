"""Planted hangs of one TensorFlow process under `rnnprof trace --hang-after 4s` (6s), all run side by side once
for the module: a built-in workload on its own two devices (no cluster) that blocks inside TensorFlow's runtime at a
traced step (tests/hang_jobs/tf_plant, `RNNPROF_PLANT_STEP`), and a TF2 script that sleeps in its data loading
(tests/hang_jobs/tf_hang_script.py), stopped (the default) or left running with `--on-hang wait`: once until the
job ends by itself (the workload's input then comes late), once until rnnprof is sent SIGTERM; the same script with
nothing planted is the control. The
verdict names the frame the script marks with `# plant:`; rnnprof ends within the stated bound of the process's own
clock, leaves no process and keeps the traces already written."""

from __future__ import annotations

import datetime
import gzip
import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from processes import left_running, run_together
from rnnprof.cli import main
from rnnprof.recording.hang_watch import CONFIRM_MAX_S, STOP_BOUND_S

ROOT = Path(__file__).resolve().parents[1]
PLANT_DIR = ROOT / "tests" / "hang_jobs" / "tf_plant"
SCRIPT = ROOT / "tests" / "hang_jobs" / "tf_hang_script.py"
# A healthy TensorFlow process may spend seconds in one call into TensorFlow, its stack unchanged: the workload's
# first step optimizes its graph inside one Session.run (on a loaded machine it took over 2 s + 2 s, and a 2 s
# --hang-after judged it hung), a script's profiler window starts and stops. These leave them room (and
# docs/commands/hang.md says so to users).
HANG_AFTER_S = 4.0
WORKLOAD_HANG_AFTER_S = 6.0


def bound_s(hang_after_s: float) -> float:
    """How long after its last step rnnprof has ended (docs/commands/hang.md)."""
    return hang_after_s + min(hang_after_s, CONFIRM_MAX_S) + STOP_BOUND_S


WARMUP, BATCHES, TRACE_STEPS = 1, 2, 2
PLANT_STEP = WARMUP + BATCHES + 2  # the workload's 5th step (1-based): its second traced step, index 4
PAUSE_S = 20.0  # "pause": long enough for the watch to judge it hung (HANG_AFTER_S + confirm + sampling)
WAIT_LINE = "; --on-hang wait: the job keeps running"
TINY_RNNLM = ["--model", "rnnlm", "--devices", "2", "--units", "16", "--layers", "1", "--src-max-len", "6",
              "--tgt-max-len", "6", "--vocab-size", "100", "--batch-size", "4", "--warmup", str(WARMUP),
              "--batches", str(BATCHES), "--trace-steps", str(TRACE_STEPS)]


def marked(path: Path, name: str) -> str:
    """``file:N``, N the line ``path`` marks ``# plant: name``."""
    lines = path.read_text().splitlines()
    return f"{path.name}:{next(i for i, line in enumerate(lines, 1) if line.endswith(f'# plant: {name}'))}"


def _trace(run: Path, *extra: str, hang_after_s: float = HANG_AFTER_S) -> list[str]:
    return [sys.executable, "-m", "rnnprof", "trace", "--out", str(run), "--hang-after", f"{hang_after_s:g}s", *extra]


def _script(run: Path, mode: str, *extra: str) -> list[str]:
    return _trace(run, "--steps", "1", *extra, "--", sys.executable, str(SCRIPT), mode, f"{PAUSE_S:g}")


def _stopped_once_waiting(argv: list[str]) -> tuple[subprocess.Popen, threading.Thread, list[str]]:
    """``argv`` started; SIGTERM to it as soon as it says it leaves the hung job running. Join the thread, then
    read the lines it printed on stderr."""
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []

    def read() -> None:
        for line in child.stderr:
            lines.append(line)
            if WAIT_LINE in line:
                child.send_signal(signal.SIGTERM)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return child, reader, lines


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tf-hangs")
    pythonpath = os.pathsep.join([str(PLANT_DIR), str(ROOT)])

    def workload(name: str, *extra: str, pause: str = "") -> list[str]:
        return ["env", f"PYTHONPATH={pythonpath}", f"RNNPROF_PLANT_STEP={PLANT_STEP}", f"RNNPROF_PLANT_PAUSE_S={pause}",
                f"RNNPROF_PLANT_MARK={root / name}.planted",
                *_trace(root / name, *TINY_RNNLM, *extra, hang_after_s=WORKLOAD_HANG_AFTER_S)]

    commands = {
        "workload": workload("workload"),
        "script": _script(root / "script", "data"),
        "wait-ends": _script(root / "wait-ends", "pause", "--on-hang", "wait"),
        "workload-wait-ends": workload("workload-wait-ends", "--on-hang", "wait", pause=f"{PAUSE_S:g}"),
        "healthy": _script(root / "healthy", "healthy"),
    }
    stopped = {"wait-stopped": _script(root / "wait-stopped", "data", "--on-hang", "wait"),
               "workload-wait-stopped": workload("workload-wait-stopped", "--on-hang", "wait")}
    started = {name: _stopped_once_waiting(argv) for name, argv in stopped.items()}
    try:
        done = run_together(list(commands.values()), timeout=400)
        for child, _, _ in started.values():
            child.wait(timeout=120)
    finally:
        for child, _, _ in started.values():
            if child.poll() is None:
                child.kill()
                child.wait()
    runs = {name: (root / name, result) for name, result in zip(commands, done)}
    for name, (child, reader, lines) in started.items():
        reader.join(timeout=10)
        runs[name] = (root / name, subprocess.CompletedProcess([], child.returncode, "", "".join(lines)))
    assert left_running(grace_s=5.0) == {}, "a process of a planted job still runs"
    return runs


def _manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


def _finished(manifest: dict) -> float:
    return datetime.datetime.fromisoformat(manifest["finished"]).timestamp()


def _planted(stderr: str) -> float:
    return float(re.search(r"planted at ([0-9.]+)", stderr).group(1))  # the script's own clock


def _hang_json(run: Path, capsys) -> dict:
    assert main(["hang", str(run), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _no_probe_left(run: Path) -> None:
    assert not (run / "torch").exists()  # no rank folder in a TensorFlow run
    assert not list(run.glob("timelines/.rank*"))


@pytest.mark.slow
def test_a_built_in_tf_workload_blocked_inside_tensorflow_is_named_stopped_in_bound_and_its_traces_kept(jobs, capsys):
    run, result = jobs["workload"]
    assert result.returncode == 124, result.stderr[-2000:]
    step_at = marked(PLANT_DIR / "sitecustomize.py", "step")
    last = result.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"rnnprof trace: error: hung: no step finishes: the main thread waits inside TensorFlow's "
                        rf"runtime, in run \(session\.py:\d+\) called at {step_at} in step; stopped; run directory: "
                        rf"{re.escape(str(run))}", last), result.stderr[-3000:]
    manifest = _manifest(run)
    assert manifest["status"] == "hung" and "error" not in manifest
    assert manifest["hang"]["ranks"] == [0] and manifest["hang"]["scope"] == "process"
    planted, pid = (run.parent / "workload.planted").read_text().split()  # the process's own clock
    assert _finished(manifest) - float(planted) <= bound_s(WORKLOAD_HANG_AFTER_S)
    assert sorted(p.name for p in (run / "hang").iterdir()) == ["rank0.stacks.txt", "verdict.txt"]
    stacks = (run / "hang" / "rank0.stacks.txt").read_text()
    assert f'tf_plant/sitecustomize.py", line {step_at.split(":")[1]} in step' in stacks
    # the traced steps before the planted one (index PLANT_STEP - 1) were written and are kept
    traced = list(range(WARMUP + BATCHES, PLANT_STEP - 1))
    assert manifest["traced_steps"] == traced
    assert manifest["captured"]["timelines"] == [f"timelines/step-{s}.trace.json.gz" for s in traced]
    for timeline in manifest["captured"]["timelines"]:
        assert json.loads(gzip.decompress((run / timeline).read_bytes()))["traceEvents"]
    _no_probe_left(run)
    document = _hang_json(run, capsys)  # the same verdict from the run directory
    assert document["summary"] == manifest["hang"]["verdict"] and last.startswith(
        f"rnnprof trace: error: hung: {document['summary']}; ")
    assert [(c["rank"], c["state"], c["where"]) for c in document["culprits"]] == [(0, "in TensorFlow", step_at)]


@pytest.mark.slow
def test_a_tf_script_sleeping_in_its_data_loading_is_named_stopped_in_bound_and_its_window_kept(jobs, capsys):
    run, result = jobs["script"]
    assert result.returncode == 124, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"rnnprof trace: error: hung: no step finishes: the main thread is at "
                           f"{marked(SCRIPT, 'data')} in load_batch, in Python, outside TensorFlow; stopped; kept "
                           f"in {run}: "), last
    manifest = _manifest(run)
    assert manifest["status"] == "hung" and manifest["hang"]["scope"] == "process" and "error" not in manifest
    assert _finished(manifest) - _planted(result.stderr) <= bound_s(HANG_AFTER_S)
    assert manifest["profiled_steps"] == [1]  # --skip-steps 1 --steps 1: written before the hang, kept
    assert manifest["captured"]["xplane"] and all((run / x).is_file() for x in manifest["captured"]["xplane"])
    assert sorted(p.name for p in (run / "hang").iterdir()) == ["rank0.stacks.txt", "verdict.txt"]
    _no_probe_left(run)
    document = _hang_json(run, capsys)
    assert [(c["rank"], c["state"], c["where"], c["function"]) for c in document["culprits"]] == [
        (0, "in Python", marked(SCRIPT, "data"), "load_batch")]


@pytest.mark.slow
def test_a_healthy_tf_script_under_the_same_short_hang_after_is_not_hung_and_completes(jobs):
    run, result = jobs["healthy"]
    assert result.returncode == 0, result.stderr[-2000:]
    # no verdict, stopped ("error: hung:") or waited on ("hung:"); on a loaded machine the watch may say a step was
    # "slow, not hung:" meanwhile, as it does to a user
    assert "done at " in result.stderr and not re.search(r"^rnnprof trace: (error: )?hung:", result.stderr, re.M)
    manifest = _manifest(run)
    assert manifest["status"] == "complete" and "hang" not in manifest and manifest["steps_seen"] == 8
    assert not (run / "hang").exists()
    _no_probe_left(run)


@pytest.mark.slow
def test_on_hang_wait_leaves_the_job_running_to_its_end_and_the_run_marked_hung(jobs):
    run, result = jobs["wait-ends"]
    assert result.returncode == 0, result.stderr[-2000:]
    err = result.stderr
    said = next(line for line in err.splitlines() if WAIT_LINE in line)
    assert said.startswith(f"rnnprof trace: hung: no step finishes: the main thread is at {marked(SCRIPT, 'data')} "
                           f"in load_batch")
    done = float(re.search(r"done at ([0-9.]+)", err).group(1))  # the script went on and ended by itself
    assert err.index(said) < err.index("done at ")
    manifest = _manifest(run)
    assert manifest["status"] == "hung" and manifest["steps_seen"] == 8  # every step of the script ran
    assert _planted(err) < manifest["hang"]["detected"] < done  # judged while the script slept
    assert (run / "hang" / "verdict.txt").read_text().strip() == manifest["hang"]["verdict"]
    _no_probe_left(run)


@pytest.mark.slow
def test_a_built_in_workload_left_hung_by_on_hang_wait_that_goes_on_ends_by_itself_with_every_step_traced(jobs):
    """Its blocked step's input comes PAUSE_S after it blocked (tests/hang_jobs/tf_plant, RNNPROF_PLANT_PAUSE_S)."""
    run, result = jobs["workload-wait-ends"]
    assert result.returncode == 0, result.stderr[-2000:]
    said = next(line for line in result.stderr.splitlines() if WAIT_LINE in line)
    assert marked(PLANT_DIR / "sitecustomize.py", "step") in said
    manifest = _manifest(run)
    assert manifest["status"] == "hung" and manifest["hang"]["scope"] == "process" and "error" not in manifest
    traced = list(range(WARMUP + BATCHES, WARMUP + BATCHES + TRACE_STEPS))  # the blocked step's trace too
    assert manifest["traced_steps"] == traced
    assert manifest["captured"]["timelines"] == [f"timelines/step-{s}.trace.json.gz" for s in traced]
    planted = float((run.parent / "workload-wait-ends.planted").read_text().split()[0])  # the process's own clock
    # judged while the step was blocked, and the job ended after its input came (``finished``: whole seconds)
    assert planted < manifest["hang"]["detected"] < planted + PAUSE_S < _finished(manifest) + 1
    assert (run / "hang" / "verdict.txt").read_text().strip() == manifest["hang"]["verdict"]
    _no_probe_left(run)


@pytest.mark.slow
def test_on_hang_wait_then_sigterm_ends_rnnprof_and_the_job_and_keeps_the_run_hung(jobs):
    run, result = jobs["wait-stopped"]
    lines = result.stderr.splitlines()
    assert result.returncode == 130, result.stderr[-2000:]
    assert any(WAIT_LINE in line for line in lines) and "done at " not in result.stderr
    assert lines[-1].startswith("rnnprof trace: error: interrupted; kept in "), lines[-1]
    manifest = _manifest(run)
    assert manifest["status"] == "hung" and manifest["hang"]["scope"] == "process"
    assert manifest["profiled_steps"] == [1] and (run / "hang" / "rank0.stacks.txt").is_file()
    _no_probe_left(run)


@pytest.mark.slow
def test_a_cluster_of_tasks_started_elsewhere_is_judged_on_its_chief_and_its_tasks_left_alone(tmp_path, capsys):
    """--cluster-spec: two `rnnprof worker` tasks this test starts, worker 1 blocked before it serves (the plant
    of tests/test_hang_jobs.py's cluster); the chief waits for it in its first Session.run."""
    from processes import alive
    from rnnprof.training import child_processes
    from rnnprof.training.cluster import free_ports

    spec, out, mark = tmp_path / "cluster.json", tmp_path / "run", tmp_path / "planted"
    spec.write_text(json.dumps({"worker": [f"localhost:{port}" for port in free_ports(2)]}))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PLANT_DIR), str(ROOT)]), RNNPROF_PLANT_TASK="worker:1",
               RNNPROF_PLANT_MARK=str(mark))
    workers = [child_processes.start([sys.executable, "-m", "rnnprof", "worker", "--cluster-spec", str(spec), "--job",
                                    "worker", "--task", str(k)], env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL) for k in range(2)]
    try:
        result = subprocess.run(_trace(out, "--model", "nmt", "--devices", "1", "--units", "16", "--layers", "1",
                                       "--src-max-len", "6", "--tgt-max-len", "6", "--vocab-size", "100",
                                       "--batch-size", "4", "--warmup", "1", "--batches", "1", "--trace-steps", "1",
                                       "--cluster-spec", str(spec)), capture_output=True, text=True, timeout=300)
        assert all(w.poll() is None for w in workers)  # rnnprof leaves the tasks it did not start alone
    finally:
        for w in workers:
            child_processes.stop(w)
    assert result.returncode == 124, result.stderr[-2000:]
    runner = (ROOT / "rnnprof" / "training" / "runner.py").read_text().splitlines()
    init = next(i for i, line in enumerate(runner, 1) if line.strip() == "self.session.run(init)")
    last = result.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"rnnprof trace: error: hung: no step finishes: the chief's main thread waits inside "
                        rf"TensorFlow's runtime, in run \(session\.py:\d+\) called at runner\.py:{init} in __init__; "
                        r"the tasks \(worker:0, worker:1\) were started elsewhere \(--cluster-spec\): rnnprof cannot "
                        rf"ask them for their stacks; stopped; run directory: {re.escape(str(out))}", last), last
    manifest = _manifest(out)
    assert manifest["status"] == "hung" and manifest["hang"]["scope"] == "remote_cluster"
    assert manifest["hang"]["task_names"] == ["worker:0", "worker:1"] and manifest["hang"]["ranks"] == []
    assert sorted(p.name for p in (out / "hang").iterdir()) == ["chief.stacks.txt", "verdict.txt"]
    assert _hang_json(out, capsys)["summary"] == manifest["hang"]["verdict"]
    assert not alive(int(mark.read_text().split()[1])) and left_running(grace_s=5.0) == {}


@pytest.mark.slow
def test_a_built_in_workload_left_hung_by_on_hang_wait_ends_on_sigterm_though_stuck_inside_tensorflow(jobs):
    """Its main thread never runs Python again to act on the signal: the watch ends the process."""
    from rnnprof.recording.hang_watch import INTERRUPT_GRACE_S

    run, result = jobs["workload-wait-stopped"]
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 130, result.stderr[-2000:]
    assert any(WAIT_LINE in line and marked(PLANT_DIR / "sitecustomize.py", "step") in line for line in lines)
    assert lines[-1] == f"rnnprof trace: error: interrupted; the job hung; what was captured is in {run}"
    manifest = _manifest(run)
    assert manifest["status"] == "hung" and manifest["hang"]["scope"] == "process"
    # the signal came after the verdict, and the process waited the grace for the main thread (whole seconds)
    assert _finished(manifest) - manifest["hang"]["detected"] >= INTERRUPT_GRACE_S - 1
    assert sorted(p.name for p in (run / "hang").iterdir()) == ["rank0.stacks.txt", "verdict.txt"]
