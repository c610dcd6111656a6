"""scale --framework torch: the PyTorch RNNLM, the N-process DDP runner and the command, on real torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from io import StringIO
from pathlib import Path

import numpy as np
import pytest

from processes import left_running
from rnnprof.cli import main
from rnnprof.models.config import TorchOptions, WorkloadConfig

# A small RNNLM: a launch of 2 processes takes seconds, not minutes, on 2 loaded cores.
TINY = dict(model="rnnlm", preset="small", layers=1, units=16, embedding=16, vocab_size=60, src_max_len=6,
            batch_size=4, warmup=0, batches=1)


def tiny(devices=2, variable_update="replicated", **changes) -> TorchOptions:
    return TorchOptions(workload=WorkloadConfig(**{**TINY, "devices": devices, "variable_update": variable_update,
                                                   "optimizer": "adam", "learning_rate": 1e-2, **changes}))


AGENT_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")  # the elastic agent's default TORCHELASTIC_SIGNALS_TO_HANDLE


def handlers() -> dict:
    import signal

    return {name: signal.getsignal(getattr(signal, name)) for name in AGENT_SIGNALS}


def crash_on_rank_1(job):
    """A worker whose rank 1 fails before it joins the group; rank 0 waits for it until stopped."""
    from rnnprof.training.torch_ddp import rank_main

    if os.environ["RANK"] == "1":
        raise RuntimeError("planted failure on rank 1")
    return rank_main(job)


def deaf_to_interrupts(job):
    """A worker that ignores SIGINT and SIGTERM, as one blocked in C++ (gloo's connect) does, says so in a file
    of RNNPROF_TEST_DEAF_DIR and waits forever."""
    import signal
    import time

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    (Path(os.environ["RNNPROF_TEST_DEAF_DIR"]) / f"rank{os.environ['RANK']}").touch()
    while True:
        time.sleep(1)


@pytest.mark.slow
def test_ctrl_c_stops_a_worker_that_ignores_it_within_seconds(monkeypatch, tmp_path):
    """Torch's agent waits 30 s for a worker to exit before SIGKILL; a run that captures nothing waits
    SHUTDOWN_S."""
    import signal
    import time

    from rnnprof.training.torch_ddp import SHUTDOWN_S, run_ranks

    monkeypatch.setenv("RNNPROF_TEST_DEAF_DIR", str(tmp_path))
    monkeypatch.delenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", raising=False)
    interrupted_at = []

    def interrupt_when_it_ignores_it():
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("rank*")) and time.monotonic() < deadline:
            time.sleep(0.1)
        interrupted_at.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_when_it_ignores_it, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        # one worker: the agent's wait before SIGKILL is the same for each (every rank is stopped: the ctrl-c tests)
        run_ranks(tiny(devices=1), worker=deaf_to_interrupts)
    took = time.monotonic() - interrupted_at[0]
    # torch's own wait is 30 s; a loaded machine (the suite's workers beside it) was seen to add 10.7 s to ours
    assert SHUTDOWN_S <= took < SHUTDOWN_S + 20, took
    assert left_running(grace_s=5.0) == {}


def test_a_torch_whose_agent_takes_no_shutdown_timeout_keeps_its_own(monkeypatch, tmp_path):
    """torch 2.11's LaunchConfig has no ``shutdown_timeout`` (seen on an H200 machine: every built-in torch workload
    stopped in a TypeError before its first worker started); a torch that has it is given SHUTDOWN_S."""
    import dataclasses

    import torch.distributed.launcher.api as api

    from rnnprof.training.torch_ddp import SHUTDOWN_S, _launch_config

    monkeypatch.delenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", raising=False)
    assert _launch_config(2, str(tmp_path), None).shutdown_timeout == SHUTDOWN_S

    def kept(f):  # a field as it is, its default or default factory with it
        if f.default is not dataclasses.MISSING:
            return dataclasses.field(default=f.default)
        if f.default_factory is not dataclasses.MISSING:
            return dataclasses.field(default_factory=f.default_factory)
        return dataclasses.field()

    older = dataclasses.make_dataclass("LaunchConfig", [(f.name, f.type, kept(f)) for f in dataclasses.fields(
        api.LaunchConfig) if f.name != "shutdown_timeout"])  # torch 2.11's: the same but that field
    monkeypatch.setattr(api, "LaunchConfig", older)
    config = _launch_config(2, str(tmp_path), None)
    assert isinstance(config, older) and config.nproc_per_node == 2


def replicated_then_independent(job):
    """A worker that trains the job's replicas (replicated) and then, in the same process group, the same
    configuration as independent replicas: ``rank_main`` each time, its group joined and left once (a second
    launch of 2 processes costs seconds of CPU: torch and torch._dynamo, which DDP imports, loaded again). Each
    training builds its model from the run's seed, as in a process of its own. The independent run's result is
    under ``"independent"``."""
    import dataclasses

    import torch.distributed as dist

    from rnnprof.training.torch_ddp import rank_main

    workload = dataclasses.replace(job.options.workload, variable_update="independent")
    independent = dataclasses.replace(job, options=dataclasses.replace(job.options, workload=workload))
    init, destroy = dist.init_process_group, dist.destroy_process_group
    dist.destroy_process_group = lambda *args, **kwargs: None
    try:
        replicated = rank_main(job)
        dist.init_process_group = lambda *args, **kwargs: None
        return {**replicated, "independent": rank_main(independent)}
    finally:
        dist.init_process_group, dist.destroy_process_group = init, destroy
        if dist.is_initialized():
            destroy()


@pytest.mark.slow
def test_ddp_replicas_hold_identical_parameters_and_independent_replicas_diverge():
    from rnnprof.training.torch_ddp import run_ranks

    before = handlers()
    replicated = run_ranks(tiny(batches=2), worker=replicated_then_independent, return_parameters=True)
    # the agent's handlers (raising SignalException) are gone again: left in place, a SIGTERM to this process, or
    # to a child it forks (a multiprocessing pool's worker), raised instead of stopping it
    assert handlers() == before
    independent = [r["independent"] for r in replicated]
    for results in (replicated, independent):
        assert [r["rank"] for r in results] == [0, 1]
        assert results[0]["parameters"].keys() == results[1]["parameters"].keys()
    names = replicated[0]["parameters"].keys()
    assert all(np.array_equal(replicated[0]["parameters"][n], replicated[1]["parameters"][n]) for n in names)
    differing = [n for n in names if not np.allclose(independent[0]["parameters"][n], independent[1]["parameters"][n])]
    assert "lstm.weight_hh_l0" in differing and "projection.weight" in differing
    # Same seed, same start: the two modes began equal, so replicated replicas moved together, not stayed put.
    assert not np.allclose(replicated[0]["parameters"]["projection.weight"],
                           independent[0]["parameters"]["projection.weight"])


@pytest.mark.slow
def test_the_loss_falls_on_the_bundled_corpus():
    import torch

    from rnnprof.training.torch_training import TorchTraining

    options = TorchOptions(workload=WorkloadConfig(model="rnnlm", preset="small", devices=1, optimizer="adam",
                                                   learning_rate=1e-2, batch_size=16, layers=1, units=64,
                                                   embedding=64, vocab_size=500))
    # one thread, as each rank of a launch on 2 cores trains: beside other work on the cores, a second thread's
    # spinning between operators took four times the CPU of the training
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        training = TorchTraining(options)
        losses = [training.step().loss for _ in range(40)]
    finally:
        torch.set_num_threads(threads)
    assert np.log(500) * 0.9 < np.mean(losses[:3])  # starts near a uniform guess over the vocabulary
    assert np.mean(losses[-5:]) < np.mean(losses[:3]) - 1.0, losses


def test_tied_projection_is_the_embedding_table_and_words_are_the_target_tokens():
    pytest.importorskip("torch")
    from rnnprof.training.torch_training import TorchTraining

    training = TorchTraining(TorchOptions(workload=WorkloadConfig(**{**TINY, "devices": 1}), tied=True))
    assert training.model.projection.weight is training.model.embedding.weight
    step = training.step()
    assert step.words == 4 * 6  # batch 4, 6 target tokens each
    assert training.evaluation().step().words == 4 * 6


@pytest.mark.slow
def test_a_crashing_rank_is_named_in_one_line_and_nothing_is_left_running(capfd, monkeypatch, tmp_path):
    import tempfile

    from rnnprof.errors import RankFailed
    from rnnprof.training.torch_ddp import run_ranks

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    steps, before = [], handlers()
    with pytest.raises(RankFailed) as failed:
        run_ranks(tiny(), worker=crash_on_rank_1, on_step=lambda *step: steps.append(step))
    assert handlers() == before
    message = str(failed.value)
    assert "\n" not in message and "rank 1 of 2 failed" in message and "planted failure on rank 1" in message
    assert failed.value.exit_code not in (0, 3)
    err = capfd.readouterr().err
    assert "Traceback" in err and "in crash_on_rank_1" in err and err.count("RuntimeError: planted failure on rank 1") == 1
    assert "SIGTERM" not in err  # the agent's own log of stopping rank 0 is not shown
    assert left_running(grace_s=5.0) == {}
    assert steps == [] and not [t for t in threading.enumerate() if t.name == "rnnprof-step-follower"]
    assert not list(tmp_path.iterdir())  # the launch's folder, with the ranks' step logs, is gone


def _scale(*argv, width=200):
    buffer = StringIO()
    from rich.console import Console

    # the small preset's batches (32 windows of 20 tokens per process), through a smaller LSTM and vocabulary, on 2
    # processes: what is checked here is what a configuration's run gives its row, the same for each (a sweep of
    # several device counts: test_explain's torch sweep on 1 and 2)
    code = main(["scale", "--framework", "torch", "--model", "rnnlm", "--preset", "small", "--devices", "2",
                 "--layers", "1", "--units", "16", "--vocab-size", "60", "--warmup", "1", "--batches", "2", *argv],
                console=Console(file=buffer, width=width, force_terminal=False))  # piped, whatever TTY_COMPATIBLE says
    return code, buffer.getvalue()


@pytest.fixture(scope="module")
def scale_sweep(tmp_path_factory):
    """One sweep on 2 processes as a user runs it, with ``--eval``: its table (stdout), its document
    (``--out``'s sweep.json, the ``--json`` document), what a terminal's stderr showed (the progress bar) and each
    update the progress heard: ``(label, phase, index, step)``."""
    import contextlib

    from rnnprof.reports.progress import StepProgress

    updates, run = [], StepProgress.run

    def recording_run(self, label, warmup, batches):
        on_step = run(self, label, warmup, batches)

        def recorded(phase, index, step):
            updates.append((label, phase, index, step))
            on_step(phase, index, step)
        return recorded

    out, err = tmp_path_factory.mktemp("scale") / "sweep", StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stderr(err):
        patch.setenv("TTY_COMPATIBLE", "1")  # stderr counts as a terminal: the progress bar is drawn
        patch.setattr(StepProgress, "run", recording_run)
        code, text = _scale("--eval", "--out", str(out))
    assert code == 0, text + err.getvalue()
    return {"text": text, "document": json.loads((out / "sweep.json").read_text()), "err": err.getvalue(),
            "updates": updates, "left_running": left_running(grace_s=5.0)}


@pytest.mark.slow
def test_scale_prints_the_table_with_the_process_note_and_eval_words_per_second(scale_sweep):
    text = scale_sweep["text"]
    assert "replicated, DDP gloo all-reduce" in text
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if "eval" in line.split())
    assert "words/s" in lines[header + 1].split()[-3:]  # the eval column's second header line
    rows = [line.split() for line in lines if line.strip().endswith("x")]
    assert [row[:3] for row in rows] == [["2", "32", "64"]]  # small preset: batch 32 per device
    assert all(len(row) == 8 and float(row[5].replace(",", "")) > 0 for row in rows)  # eval words/s beside words/s
    assert "processes sharing" in text and "not a scaling result" in text
    assert scale_sweep["left_running"] == {}


TF_TOP_KEYS = {"schema_version", "config", "device_kind", "unit", "rows", "definitions", "notes"}
TF_ROW_KEYS = {"variable_update", "all_reduce", "devices", "batch_per_device", "batch_total", "timed_batches",
               "total_seconds", "words", "words_per_second", "mean_step_seconds", "median_step_seconds",
               "std_step_seconds", "speedup", "baseline_devices", "step_seconds", "warmup_step_seconds"}
TF_EVAL_KEYS = {"eval_words_per_second", "eval_step_seconds_median"}  # what --eval adds to a row


@pytest.mark.slow
def test_scale_json_has_the_tensorflow_documents_keys_and_times_only_the_timed_batches(scale_sweep):
    doc, updates = dict(scale_sweep["document"]), scale_sweep["updates"]
    # --out saves the --json document with its format named, and without the schema_version that printing puts first
    assert doc.pop("format") == "rnnprof-sweep"
    assert "timed (loss" not in scale_sweep["text"]  # the bar is not on stdout
    # One update per step, in order, reaching this process from the ranks: the steps the document times.
    assert {name for name, *_ in updates} == {f"replicated x{row['devices']}" for row in doc["rows"]}
    for row in doc["rows"]:
        label = f"replicated x{row['devices']}"
        mine = [(phase, index, step) for name, phase, index, step in updates if name == label]
        assert [(phase, index) for phase, index, _ in mine] == [("warmup", 0), ("timed", 0), ("timed", 1)]
        assert [step.seconds for _, _, step in mine] == row["warmup_step_seconds"] + row["step_seconds"]
        assert all(step.words == 32 * 20 * row["devices"] for _, _, step in mine)
    err = scale_sweep["err"]
    assert "replicated x2 timed (loss " in err and "2/2" in err  # the bar, drawn on stderr
    assert set(doc) == TF_TOP_KEYS - {"schema_version"}
    assert set(WorkloadConfig().to_dict()) < set(doc["config"]) and doc["config"]["framework"] == "torch"
    assert doc["config"]["optimizer"] == "adam" and doc["config"]["learning_rate"] == pytest.approx(2e-4)
    assert doc["device_kind"] == "cpu-processes"
    assert "slowest rank" in doc["definitions"]["step_seconds"] and "session.run" not in doc["definitions"]["step_seconds"]
    for row in doc["rows"]:
        assert set(row) == TF_ROW_KEYS | TF_EVAL_KEYS
        assert len(row["step_seconds"]) == 2 and len(row["warmup_step_seconds"]) == 1
        assert row["total_seconds"] == pytest.approx(sum(row["step_seconds"]))
        # small preset: 32 windows of 20 target tokens per process and batch; 2 timed batches, warm-up not counted
        assert row["words"] == 2 * 32 * 20 * row["devices"]
    (row,) = doc["rows"]
    assert row["speedup"] == 1.0 and row["baseline_devices"] == 2  # the sweep's smallest run is its baseline


_REFUSALS = [
    (["--model", "nmt"], "runs --model rnnlm or transformer, got --model nmt"),
    (["--model", "rnnlm", "--encoder", "loop"], "--encoder applies to --framework tensorflow"),
    (["--model", "rnnlm", "--all-reduce", "ring"], "--all-reduce applies to --framework tensorflow"),
    (["--model", "rnnlm", "--variable-update", "replicated,parameter_server"], "parameter_server"),
    (["--model", "rnnlm", "--plant", "softmax-on-device0"], "--plant applies"),
    (["--model", "rnnlm", "--gradient-repacking", "2"], "--gradient-repacking applies"),
]


def test_bad_torch_flags_are_refused_in_one_line_before_torch_is_imported():
    script = (
        "import sys, json\n"
        "from rnnprof.cli import main\n"
        "cases = json.loads(sys.argv[1])\n"
        "codes = [main(['scale', '--framework', 'torch', *argv]) for argv, _ in cases]\n"
        "codes.append(main(['scale', '--model', 'rnnlm', '--bucket-cap-mb', '10']))\n"
        "codes.append(main(['trace', '--framework', 'torch', '--model', 'rnnlm', '--variable-update', "
        "'parameter_server']))\n"
        "print(json.dumps([codes, 'torch' in sys.modules, 'tensorflow' in sys.modules]))\n")
    out = subprocess.run([sys.executable, "-c", script, json.dumps(_REFUSALS)], capture_output=True, text=True,
                         timeout=120)
    codes, torch_loaded, tensorflow_loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert codes == [2] * (len(_REFUSALS) + 2), out.stderr
    assert not torch_loaded and not tensorflow_loaded
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == len(_REFUSALS) + 2, out.stderr
    for line, (_, message) in zip(lines, _REFUSALS):
        assert message in line
    assert "--bucket-cap-mb applies to --framework torch" in lines[-2]
    assert "--variable-update parameter_server applies to --framework tensorflow" in lines[-1]


def test_without_torch_the_command_says_how_to_install_it():
    script = ("import sys\nsys.modules['torch'] = None\nfrom rnnprof.cli import main\n"
              "sys.exit(main(['scale', '--framework', 'torch', '--model', 'rnnlm', '--devices', '1']))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "pip install 'rnnprof[torch]'" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_threads_per_process_split_the_cores_at_least_one_each():
    from rnnprof.training.torch_ddp import threads_per_process

    assert threads_per_process(1, cores=16) == 16
    assert threads_per_process(3, cores=16) == 5
    assert threads_per_process(4, cores=2) == 1


def test_ranks_use_nccl_and_their_own_gpu_only_where_every_rank_has_one():
    from rnnprof.errors import UsageError
    from rnnprof.training.torch_ddp import RankPlan, check_gpu_count, rank_plan

    assert [rank_plan(2, r, gpus=2, threads=4) for r in (0, 1)] == [RankPlan("nccl", "cuda:0", 4),
                                                                      RankPlan("nccl", "cuda:1", 4)]
    assert rank_plan(2, 1, gpus=8, threads=1) == RankPlan("nccl", "cuda:1", 1)  # more GPUs than ranks
    assert rank_plan(1, 0, gpus=1, threads=16) == RankPlan("nccl", "cuda:0", 16)
    assert rank_plan(2, 1, gpus=0, threads=1) == RankPlan("gloo", "cpu", 1)  # CPU only
    assert rank_plan(3, 2, gpus=2, threads=2) == RankPlan("gloo", "cpu", 2)  # not a GPU each: no rank on a GPU
    check_gpu_count(2, gpus=0)  # CPU processes share the cores
    check_gpu_count(2, gpus=2)
    with pytest.raises(UsageError, match="--devices 3 but only 2 GPU"):
        check_gpu_count(3, gpus=2)


def test_combined_steps_take_the_slowest_rank_and_every_ranks_words():
    from rnnprof.training.torch_ddp import combine_ranks

    steps = combine_ranks([[(0.5, 10, 2.0), (0.2, 10, 1.0)], [(0.3, 12, 4.0), (0.4, 12, 3.0)]])
    assert [(s.seconds, s.words, s.loss) for s in steps] == [(0.5, 22, 3.0), (0.4, 22, 2.0)]


def _both_ranks_train(tmp_path) -> bool:
    """Whether each of the 2 ranks of the launch in ``tmp_path`` (its TMPDIR) has begun its steps: its log of them
    for the progress is open (the rank imported torch, joined the group, built its model and data)."""
    from rnnprof.training.torch_progress import step_log_path

    logs = [Path(step_log_path(str(steps), rank)) for steps in tmp_path.glob("rnnprof-torch-*/steps") for rank in (0, 1)]
    return sum(log.is_file() for log in logs) == 2


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["importing", "training"])  # 0.3 s after both spawn; once both begin their steps
def test_ctrl_c_stops_every_rank_and_exits_130_in_one_line(moment, tmp_path):
    import signal
    import time

    from processes import descendants

    command = [sys.executable, "-m", "rnnprof", "scale", "--framework", "torch", "--model", "rnnlm",
               "--preset", "small", "--layers", "1", "--units", "16", "--vocab-size", "60", "--devices", "2",
               "--warmup", "1", "--batches", "100000"]  # a small LSTM: its first step comes soon after the imports
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, TMPDIR=str(tmp_path)))
    try:
        deadline = time.monotonic() + 60
        while sum("spawn_main" in p.cmdline for p in descendants(child.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        if moment == "importing":
            time.sleep(0.3)
            assert not _both_ranks_train(tmp_path)
        else:
            deadline = time.monotonic() + 120
            while not _both_ranks_train(tmp_path):
                assert child.poll() is None and time.monotonic() < deadline, "the ranks never began their steps"
                time.sleep(0.05)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 130, err
    # the configuration's progress line (stderr is no terminal), then the one line of the interruption
    assert [line for line in err.splitlines() if line.strip()] == ["rnnprof scale: [1/1] replicated x2: started",
                                                                   "rnnprof scale: interrupted"], err
    assert left_running(grace_s=5.0) == {}
    # the launch's folder, with the ranks' step logs, is gone; ranks that ran a step made torch's own compile cache
    # there (torch keeps it in TMPDIR for later processes)
    import getpass

    assert {p.name for p in tmp_path.iterdir()} <= {f"torchinductor_{getpass.getuser()}"}, list(tmp_path.iterdir())
