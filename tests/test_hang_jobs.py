"""Planted hangs, real gloo jobs under `rnnprof trace --hang-after 2s -- torchrun`, all run side by side once for
the module: the verdict names the rank, the collective and the script's marked line; rnnprof ends within the
stated bound of the script's own clock, leaves no process and keeps the traces already written. "data" and
"lock" share one 3-rank job (rank 1 sleeps in its data, rank 2 blocks in a lock: each is judged on its own
stacks); "mismatch" and "skip" are 2-rank jobs. A healthy job of slow steps (one process, gloo) under the same
short --hang-after is "slow, not hung" and completes. Then a built-in PyTorch workload and a TensorFlow cluster
that hang."""

from __future__ import annotations

import datetime
import json
import re
import sys
from pathlib import Path

import pytest

from processes import left_running, processes, run_together
from rnnprof.cli import main
from rnnprof.recording.hang_probe import STACKS_END
from rnnprof.recording.hang_watch import CONFIRM_MAX_S, STOP_BOUND_S
from test_hang import GRADIENT, JOB, LAST, STATISTIC, plant

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
HANG_AFTER_S = 2.0
PLANTS = ("data", "lock", "mismatch", "skip")
JOB_OF = {"data": ("data+lock", 1), "lock": ("data+lock", 2), "mismatch": ("mismatch", 1), "skip": ("skip", 1)}
RANKS_OF = {"data+lock": 3, "mismatch": 2, "skip": 2, "gil": 2}


def _trace(run: Path, mode: str, ranks: int) -> list[str]:
    return [sys.executable, "-m", "rnnprof", "trace", "--out", str(run), "--hang-after", f"{HANG_AFTER_S:g}s",
            "--steps", "1", "--", TORCHRUN, "--nproc-per-node", str(ranks), str(JOB), mode]


def _slow_alone(run: Path) -> list[str]:
    """The slow job as one gloo process of its own, without torchrun."""
    from rnnprof.training.cluster import free_ports

    world = ["MASTER_ADDR=localhost", f"MASTER_PORT={free_ports(1)[0]}", "RANK=0", "LOCAL_RANK=0", "WORLD_SIZE=1"]
    return ["env", *world, sys.executable, "-m", "rnnprof", "trace", "--out", str(run), "--hang-after",
            f"{HANG_AFTER_S:g}s", "--steps", "1", "--", sys.executable, str(JOB), "slow", "4"]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hangs")
    commands = {mode: _trace(root / mode, mode, n) for mode, n in RANKS_OF.items()}
    commands["slow"] = _slow_alone(root / "slow")
    done = run_together(list(commands.values()), timeout=400)
    left = [p for p in processes() if str(JOB) in p.cmdline and p.state not in ("Z", "X")]  # this checkout's
    assert not left, "a rank of a planted job still runs"
    runs = {mode: (root / mode, result) for mode, result in zip(commands, done)}
    return {**runs, **{plant: runs[job] for plant, (job, _) in JOB_OF.items()}}


def _manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


def _hang_json(run: Path, capsys) -> dict:
    assert main(["hang", str(run), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


# the culprit (its rank: JOB_OF) as (state, where, op, seq, op_where); the waiters as (rank, op, seq, where)
EXPECTED = {
    "data": (("in no collective", plant("data"), None, None, None), {(0, "all_reduce", GRADIENT, plant("gradient"))}),
    "lock": (("in a lock", plant("lock"), None, None, None), {(0, "all_reduce", GRADIENT, plant("gradient"))}),
    "mismatch": (("in another collective", plant("mismatch"), "all_gather", GRADIENT, plant("mismatch")),
                 {(0, "all_reduce", GRADIENT, plant("gradient")), (1, "all_gather", GRADIENT, plant("mismatch"))}),
    "skip": (("skipped", plant("barrier"), "all_reduce", STATISTIC, plant("statistic")),
             {(0, "all_reduce", LAST, plant("statistic")), (1, "barrier", LAST, plant("barrier"))}),
}


@pytest.mark.slow
@pytest.mark.parametrize("mode", PLANTS)
def test_a_planted_hang_is_named_stopped_in_bound_and_its_traces_kept(jobs, mode, capsys):
    run, result = jobs[mode]
    job, rank = JOB_OF[mode]
    faulty = [r for plant, (j, r) in JOB_OF.items() if j == job]
    assert result.returncode == 124, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    manifest = _manifest(run)
    assert last.startswith("rnnprof trace: error: hung: ") and manifest["hang"]["verdict"] in last
    assert manifest["status"] == "hung" and manifest["hang"]["ranks"] == faulty
    document = _hang_json(run, capsys)
    assert sorted(c["rank"] for c in document["culprits"]) == faulty
    (culprit,) = [c for c in document["culprits"] if c["rank"] == rank]
    culprit_fields = (culprit["state"], culprit["where"], culprit["op"], culprit["seq"], culprit["op_where"])
    assert (culprit["rank"], culprit_fields) == (rank, EXPECTED[mode][0])
    assert {(w["rank"], w["op"], w["seq"], w["where"]) for w in document["waiters"]} == EXPECTED[mode][1]
    planted = float(re.search(r"planted at ([0-9.]+)", result.stderr).group(1))  # the script's own clock
    finished = datetime.datetime.fromisoformat(manifest["finished"]).timestamp()
    assert finished - planted <= HANG_AFTER_S + min(HANG_AFTER_S, CONFIRM_MAX_S) + STOP_BOUND_S
    traces = manifest["captured"]["kineto"]
    ranks = range(RANKS_OF[job])
    assert traces == [f"torch/rank{r}.json.gz" for r in ranks] and all((run / t).is_file() for t in traces)
    assert sorted(p.name for p in (run / "hang").iterdir()) == sorted(
        [f"rank{r}.{k}" for r in ranks for k in ("fr.pkl", "stacks.txt")] + ["verdict.txt"])
    assert not list((run / "torch").glob(".rank*.stacks")) and not list((run / "torch").glob(".rank*.fr"))


@pytest.mark.slow
def test_a_rank_holding_the_interpreter_is_named_from_faulthandlers_stacks_and_the_others_from_their_threads(
        jobs, capsys):
    """The ranks' probe threads give their stacks, read under the interpreter lock; rank 1's main thread holds
    that lock in a C call, so its thread cannot answer, and faulthandler's signal handler gives its stacks."""
    run, result = jobs["gil"]
    assert result.returncode == 124, result.stderr[-2000:]
    document = _hang_json(run, capsys)
    assert [(c["rank"], c["state"], c["where"]) for c in document["culprits"]] == [(1, "outside Python", plant("gil"))]
    assert {(w["rank"], w["op"], w["seq"], w["where"]) for w in document["waiters"]} == {
        (0, "all_reduce", GRADIENT, plant("gradient"))}
    assert STACKS_END in (run / "hang" / "rank0.stacks.txt").read_text()  # its probe thread's answer
    rank1 = (run / "hang" / "rank1.stacks.txt").read_text()
    assert STACKS_END not in rank1 and "Current thread" in rank1  # faulthandler's, from the signal
    assert not (run / "hang" / "rank1.fr.pkl").exists()  # no thread could serve its flight recorder either


@pytest.mark.slow
def test_audit_of_a_hung_run_leads_with_its_verdict(jobs, capsys):
    run, _ = jobs["data"]
    main(["audit", str(run)])
    first = capsys.readouterr().err.strip().splitlines()[0]
    assert first.startswith(f"note: {run}: the job hung: rank 1 is in no collective: its main thread is at "
                            f"{plant('data')} in load_batch")


@pytest.mark.slow
def test_a_healthy_job_of_slow_steps_is_slow_not_hung_and_completes(jobs):
    run, result = jobs["slow"]
    assert result.returncode == 0, result.stderr[-2000:]
    assert "rnnprof trace: slow, not hung: no step finished for " in result.stderr
    manifest = _manifest(run)
    assert "error: hung:" not in result.stderr and manifest["status"] == "complete" and "hang" not in manifest
    assert not (run / "hang").exists()


def sleep_in_rank_1s_third_step(job):
    """The built-in workload's rank, except that rank 1 sleeps as its third training step begins."""
    import os
    import time

    from rnnprof.training import torch_ddp
    from rnnprof.training.torch_training import TorchTraining

    if os.environ["RANK"] == "1":
        original, calls = TorchTraining.step, []

        def step(self):
            calls.append(1)
            if len(calls) == 3:
                time.sleep(3600)  # plant: workload
            return original(self)

        TorchTraining.step = step
    return torch_ddp.rank_main(job)


@pytest.mark.slow
def test_a_hung_built_in_torch_workload_is_named_stopped_and_marked(tmp_path, monkeypatch, capfd):
    from rnnprof.training import torch_ddp

    monkeypatch.setattr(torch_ddp, "rank_main", sleep_in_rank_1s_third_step)
    out = tmp_path / "run"
    code = main(["trace", "--framework", "torch", "--model", "rnnlm", "--devices", "2", "--warmup", "1",
                 "--batches", "2", "--trace-steps", "1", "--units", "16", "--vocab-size", "60",
                 "--hang-after", f"{HANG_AFTER_S:g}s", "--out", str(out)])
    err = capfd.readouterr().err
    assert code == 124, err[-2000:]
    lines = Path(__file__).read_text().splitlines()
    where = f"test_hang_jobs.py:{next(i for i, l in enumerate(lines, 1) if l.endswith('# plant: workload'))}"
    last = err.strip().splitlines()[-1]
    source = (Path(torch_ddp.__file__).parent / "torch_training.py").read_text().splitlines()
    backward = f"torch_training.py:{next(i for i, l in enumerate(source, 1) if l.strip() == 'loss.backward()')}"
    assert last.startswith(f"rnnprof trace: error: hung: rank 1 is in no collective: its main thread is at {where} "
                           f"in step; rank 0 has waited in all_reduce #"), last  # DDP's, in rank 0's backward
    assert f"({backward}) since " in last
    manifest = _manifest(out)
    assert manifest["status"] == "hung" and manifest["hang"]["ranks"] == [1] and "error" not in manifest
    assert left_running(grace_s=5.0) == {}


TINY_CLUSTER = ["--model", "nmt", "--devices", "1", "--units", "16", "--layers", "1", "--src-max-len", "6",
                "--tgt-max-len", "6", "--vocab-size", "100", "--batch-size", "4", "--warmup", "1", "--batches", "1",
                "--trace-steps", "1", "--workers", "2"]


@pytest.mark.slow
def test_a_tf_cluster_whose_worker_blocks_before_its_first_step_names_that_worker(tmp_path):
    import os
    import subprocess

    from processes import alive

    plant_dir = Path(__file__).parent / "hang_jobs" / "tf_plant"
    out, mark = tmp_path / "run", tmp_path / "planted"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(plant_dir), str(Path(__file__).parents[1])]),
               RNNPROF_PLANT_TASK="worker:1", RNNPROF_PLANT_MARK=str(mark))
    result = subprocess.run([sys.executable, "-m", "rnnprof", "trace", *TINY_CLUSTER, "--hang-after",
                             f"{HANG_AFTER_S:g}s", "--out", str(out)], env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 124, result.stderr[-2000:]
    plant_source = (plant_dir / "sitecustomize.py").read_text().splitlines()
    blocked = next(i for i, l in enumerate(plant_source, 1) if l.endswith("# plant: task"))
    runner = (Path(__file__).parents[1] / "rnnprof" / "training" / "runner.py").read_text().splitlines()
    init = next(i for i, l in enumerate(runner, 1) if l.strip() == "self.session.run(init)")
    assert result.stderr.strip().splitlines()[-1] == (
        f"rnnprof trace: error: hung: task worker:1 has not started serving: its main thread is at "
        f"sitecustomize.py:{blocked} in blocked_serve; the chief waits at runner.py:{init} in __init__; "
        f"worker:0 serves; stopped; run directory: {out}")
    manifest = _manifest(out)
    assert manifest["status"] == "hung" and "error" not in manifest
    assert manifest["hang"]["tasks"] == ["worker:1"] and manifest["hang"]["ranks"] == [1]
    assert sorted(p.name for p in (out / "hang").iterdir()) == [
        "chief.stacks.txt", "rank0.stacks.txt", "rank1.stacks.txt", "verdict.txt"]
    assert not list(out.glob("timelines/.rank*"))  # no probe file left (nor their folder, where it held nothing else)
    _, pid = mark.read_text().split()
    assert not alive(int(pid)) and left_running(grace_s=5.0) == {}
