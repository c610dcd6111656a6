"""Capturing the user's own PyTorch script: ``rnnprof trace --out DIR -- torchrun ... script.py`` and ``-- python``.

The script is written here: DDP over gloo on CPU, or one process without a process group. What each
trace must hold is counted here from the raw Kineto JSON (ProfilerStep markers, optimizer steps).
"""

import gzip
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from processes import alive

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning",
                                        "ignore::UserWarning")

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
STEP = re.compile(r"^ProfilerStep#(\d+)$")
OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#SGD\.step$")
COLLECTIVE = re.compile(r"^(c10d::allreduce_|gloo:all_reduce)$")

SCRIPT = r'''
import argparse, os, sys, time
import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=5)
parser.add_argument("--marks", action="store_true", help="rnnprof.step() per step, two optimizer steps each")
parser.add_argument("--fail-rank", type=int, default=-1)
parser.add_argument("--fail-at", type=int, default=-1)
parser.add_argument("--die-at", type=int, default=-1, help="the --fail-rank ends its process with os._exit(1)")
parser.add_argument("--pids", default=None, help="folder where each rank writes its pid")
parser.add_argument("--sleep", type=float, default=0.0)
parser.add_argument("--timeout", type=float, default=None, help="seconds a collective may wait for a gone rank")
parser.add_argument("--keep-rank", type=int, default=-1,
                    help="this rank ignores SIGTERM (torchrun's stop when another rank fails): it runs on until a "
                         "collective fails")
args = parser.parse_args()

distributed = "WORLD_SIZE" in os.environ
if distributed:
    import datetime

    timeout = datetime.timedelta(seconds=args.timeout) if args.timeout else None
    dist.init_process_group("gloo", timeout=timeout)
rank = dist.get_rank() if distributed else 0
if rank == args.keep_rank:
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if args.pids:
    with open(os.path.join(args.pids, f"rank{rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
if distributed:
    model = torch.nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
if args.marks:
    import rnnprof


def one_update():
    optimizer.zero_grad()
    model(torch.randn(16, 32)).square().mean().backward()
    optimizer.step()


for i in range(args.steps):
    if args.marks:
        rnnprof.step()
        one_update()
    one_update()
    if i == args.fail_at and rank == args.fail_rank:
        sys.exit(3)
    if i == args.die_at and rank == args.fail_rank:
        os._exit(1)
    time.sleep(args.sleep)
if distributed:
    dist.destroy_process_group()
'''


def env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}


def trace(tmp_path, *command, steps=2, skip_steps=1, wait=True):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "rnnprof", "trace", "--out", str(run), "--steps", str(steps),
            "--skip-steps", str(skip_steps), "--", *[str(script) if c == "SCRIPT" else c for c in command]]
    if not wait:
        return subprocess.Popen(argv, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), run
    done = subprocess.run(argv, env=env(), capture_output=True, text=True, timeout=300)
    return done, run


def raw_events(path):
    with gzip.open(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def markers(events):
    return {int(STEP.match(e["name"]).group(1)): (e["ts"], e["ts"] + e["dur"])
            for e in events if STEP.match(e["name"])}


def inside(events, pattern, span):
    return [e for e in events if pattern.match(e["name"]) and span[0] <= e["ts"] < span[1]]


def manifest(run):
    return json.loads((run / "manifest.json").read_text())


def wait_gone(pids, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.2)
    return [p for p in pids if alive(p)]


# -- torchrun, two gloo DDP ranks ------------------------------------------------------------------

# README's example script, captured as README's example captures it (a run of its own here, of 5 steps).
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train.py"


@pytest.fixture(scope="module")
def torchrun_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("torchrun")
    done, run = trace(tmp, TORCHRUN, "--nproc-per-node", "2", str(EXAMPLE), "--steps", "5")
    assert done.returncode == 0, done.stderr[-3000:]
    return run


@pytest.mark.slow
def test_torchrun_writes_one_trace_per_rank_holding_exactly_the_window(torchrun_run):
    for rank in (0, 1):
        events = raw_events(torchrun_run / "torch" / f"rank{rank}.json.gz")
        steps = markers(events)
        assert sorted(steps) == [1, 2]  # --skip-steps 1 --steps 2: the second and third optimizer steps
        for span in steps.values():
            assert len(inside(events, OPTIMIZER_STEP, span)) == 1  # a step is one optimizer.step()
            assert inside(events, COLLECTIVE, span), "DDP's gradient all-reduce runs in every step"


@pytest.mark.slow
def test_torchrun_manifest_lists_ranks_world_size_backend_and_files(torchrun_run):
    m = manifest(torchrun_run)
    assert m["status"] == "complete" and m["framework"] == "torch"
    assert m["world_size"] == 2 and m["backend"] == "gloo"
    assert [r["rank"] for r in m["ranks"]] == [0, 1]
    assert [r["trace"] for r in m["ranks"]] == ["torch/rank0.json.gz", "torch/rank1.json.gz"]
    assert m["captured"]["kineto"] == ["torch/rank0.json.gz", "torch/rank1.json.gz"]
    assert all(r["steps"] == [1, 2] and r["status"] == "complete" for r in m["ranks"])
    assert len({r["pid"] for r in m["ranks"]}) == 2  # two processes, not one


@pytest.mark.slow
def test_comm_reads_the_run_each_rank_per_step(torchrun_run, capsys):
    from test_torch_gloo import raw_figures

    from rnnprof.cli import main

    code = main(["comm", str(torchrun_run), "--json", "--per-step"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    document = json.loads(captured.out)
    assert [d["device"] for d in document["devices"]] == ["rank0/cpu:0", "rank1/cpu:0"]
    assert document["steps"] == [1, 2]
    for rank, device in enumerate(document["devices"]):
        events = raw_events(torchrun_run / "torch" / f"rank{rank}.json.gz")
        assert device["total"]["communication_us"] == pytest.approx(raw_figures(events)["communication_us"],
                                                                    abs=0.01)
        assert all(device["steps"][str(step)]["communication_us"] > 0 for step in (1, 2))


# -- one process: `-- python script.py`, steps marked with rnnprof.step() ----------------------------

@pytest.fixture(scope="module")
def python_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("python")
    done, run = trace(tmp, sys.executable, "SCRIPT", "--steps", "5", "--marks")
    assert done.returncode == 0, done.stderr[-3000:]
    return run


@pytest.mark.slow
def test_python_script_is_one_rank_without_a_process_group(python_run):
    m = manifest(python_run)
    assert m["status"] == "complete" and m["world_size"] == 1 and m["backend"] is None
    assert [r["rank"] for r in m["ranks"]] == [0] and m["captured"]["kineto"] == ["torch/rank0.json.gz"]


@pytest.mark.slow
def test_a_torch_run_records_torch_and_its_libraries_and_not_tensorflow(python_run):
    import torch

    versions = manifest(python_run)["versions"]
    assert versions["torch"] == torch.__version__
    assert versions.get("cuda") == torch.version.cuda and versions.get("rocm") == torch.version.hip
    assert "tensorflow" not in versions and versions["python"] == ".".join(map(str, sys.version_info[:3]))


@pytest.mark.slow
def test_rnnprof_step_defines_the_steps_when_the_script_marks_them(python_run):
    events = raw_events(python_run / "torch" / "rank0.json.gz")
    steps = markers(events)
    assert sorted(steps) == [1, 2]
    for span in steps.values():  # each marked step made two optimizer steps; the hooks did not count them
        assert len(inside(events, OPTIMIZER_STEP, span)) == 2


# -- failures and interrupts -----------------------------------------------------------------------

@pytest.mark.slow
def test_a_failing_rank_passes_its_exit_code_on_and_marks_the_run(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    done, run = trace(tmp_path, TORCHRUN, "--nproc-per-node", "2", "SCRIPT", "--steps", "50",
                      "--fail-rank", "1", "--fail-at", "3", "--pids", str(pids), "--timeout", "3")
    assert done.returncode == 3, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"rnnprof trace: error: rank 1: the script exited with code 3 (run directory: {run})")
    m = manifest(run)
    assert m["status"] == "interrupted" and m["exit_code"] == 3
    assert {r["rank"]: r["status"] for r in m["ranks"]} == {0: "interrupted", 1: "interrupted"}
    rank_pids = [int(p.read_text()) for p in pids.iterdir()]
    assert len(rank_pids) == 2 and wait_gone(rank_pids, timeout=5) == []


@pytest.mark.slow
def test_a_rank_that_dies_is_blamed_and_the_others_errors_follow_from_it(tmp_path):
    done, run = trace(tmp_path, TORCHRUN, "--nproc-per-node", "2", "SCRIPT", "--steps", "50",
                      "--fail-rank", "1", "--die-at", "5", "--timeout", "5", "--keep-rank", "0")
    # torchrun stops rank 0 as soon as it sees rank 1 end, which may come before rank 0's collective finds its
    # peer gone (rank 0 is then only stopped, with no error of its own). Ignoring that SIGTERM, rank 0 fails
    # for sure: its next collective finds the connection closed, or times out after 5 s.
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0
    assert lines[-1].startswith("rnnprof trace: error: rank 1: the rank's process ended without closing its capture")
    assert lines[-1].endswith(f"(run directory: {run})")
    m = manifest(run)
    assert m["failed_rank"] == 1 and m["error"].startswith("rank 1: ")
    # rank 0 saw its peer go: its own error is shown, as a consequence of rank 1's failure
    assert len(m["errors_after"]) == 1 and m["errors_after"][0].startswith("rank 0: the script raised ")
    assert "rnnprof trace: after rank 1 failed: rank 0: the script raised " in done.stderr
    ranks = {r["rank"]: r for r in m["ranks"]}
    assert ranks[0]["error"].startswith("the script raised ") and not ranks[0]["stopped"]
    assert "ended" not in ranks[1] and ranks[1]["exited"]  # it could not close its capture; rnnprof saw it end


# A signal to rnnprof during a capture, before, during or after the window, of a torchrun job or a python script:
# test_trace_signals.


# -- rnnprof.capture(...) in torch code --------------------------------------------------------------

@pytest.mark.slow
def test_capture_api_in_torch_code_records_optimizer_steps(tmp_path):
    import torch

    import rnnprof
    from rnnprof.recording.torch_script import TorchScriptCapture

    model = torch.nn.Linear(8, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    # framework="torch": this test process may have imported TensorFlow too (a torch-only process needs no
    # argument: the script tests run such processes)
    with rnnprof.capture(tmp_path / "run", steps=2, skip_steps=2, framework="torch") as cap:
        assert isinstance(cap, TorchScriptCapture)
        for _ in range(6):
            model(torch.randn(4, 8)).sum().backward()
            optimizer.step()
    m = manifest(tmp_path / "run")
    assert m["status"] == "complete" and m["framework"] == "torch" and m["ranks"][0]["steps"] == [2, 3]
    events = raw_events(tmp_path / "run" / "torch" / "rank0.json.gz")
    assert sorted(markers(events)) == [2, 3]
    assert m["command"] == m["config"]["script"] == sys.argv  # no command given: this process's
    with pytest.raises(ValueError, match="delay applies to TensorFlow code"):
        rnnprof.capture(tmp_path / "other", delay=1.0, framework="torch")
    with pytest.raises(ValueError, match="framework must be"):
        rnnprof.capture(tmp_path / "other", framework="jax")
    from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks

    hooks = [*_global_optimizer_pre_hooks.values(), *_global_optimizer_post_hooks.values()]
    assert not any(getattr(h, "__self__", None) is cap for h in hooks)  # removed after the window


def test_the_capture_times_every_step_in_the_window_and_after_it(tmp_path, capsys):
    import statistics
    import time

    import torch

    import rnnprof
    from rnnprof.events import names
    from rnnprof.cli import main

    model = torch.nn.Linear(8, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    starts, ends, naps = [], [], [0.0, 0.010, 0.0, 0.020, 0.0, 0.030, 0.0, 0.040, 0.0, 0.0, 0.0]
    with rnnprof.capture(tmp_path / "run", steps=2, skip_steps=2, framework="torch"):
        for nap in naps:  # a step begins after one optimizer step and ends after the next (step 0: the first)
            time.sleep(nap)
            model(torch.randn(4, 8)).sum().backward()
            starts.append(time.perf_counter())
            optimizer.step()
            ends.append(time.perf_counter())
    (rank,) = manifest(tmp_path / "run")["ranks"]
    seconds = rank[names.RANK_STEP_SECONDS]
    assert rank["steps"] == [2, 3] and len(seconds) == len(naps)  # the 4 steps after the window too
    # by this test's own clock: the capture reads a step's end inside optimizer.step(), so between this test's
    # reading before the call and its reading after it. Step i lasts at least from the first reading of step i-1's
    # end to the last of step i's start, at most from the earlier's start to its end: a bracket that holds
    # however the machine is loaded or the trace's export (a thread beside the training) holds the interpreter.
    # Before and in the window, the profiler's work after an optimizer step (preparing, starting, exporting)
    # runs after the capture reads the step's end, inside the call: the bracket widens there, and holds.
    rounding = 2e-6  # the manifest keeps microseconds
    for i in range(1, len(naps)):
        assert starts[i] - ends[i - 1] - rounding <= seconds[i] <= ends[i] - starts[i - 1] + rounding, (i, seconds)
    assert sum(seconds[1:]) >= starts[-1] - ends[0] - rounding
    assert all(s >= nap for s, nap in zip(seconds[1:], naps[1:]))
    assert rank[names.RANK_PROFILER_WARMUP_STEPS] == [1]
    assert rank[names.RANK_EXPORT_STEPS][:1] == [4]  # the export runs as the window's last step ends
    assert len(rank[names.RANK_STEP_CPU_SECONDS]) == len(naps)
    # the run page sets the traced steps (2, 3) against the untraced ones (not 0, the warm-up or the export)
    untraced = [s for i, s in enumerate(seconds) if i not in {0, 1, 2, 3, *rank[names.RANK_EXPORT_STEPS]}]
    assert main(["report", str(tmp_path / "run"), "-o", str(tmp_path / "run.html")]) == 0, capsys.readouterr().err
    page = (tmp_path / "run.html").read_text()
    row = re.search(r"<td>rank0</td>(.*?)</tr>", page[page.index("profiler ms/step"):], re.S).group(1)
    cells = [float(c.replace(",", "")) for c in re.findall(r"<td[^>]*>([\d.,]+)</td>", row)]
    traced, untraced = 1000 * statistics.median(seconds[2:4]), 1000 * statistics.median(untraced)
    assert cells[:3] == pytest.approx([traced, untraced, max(traced - untraced, 0.0)], abs=0.01)


@pytest.mark.slow
def test_a_script_that_gets_torch_from_a_module_elsewhere_is_captured_as_pytorch(tmp_path):
    """The script names neither framework: torch's capture starts as the library imports torch; TensorFlow is
    never imported."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "trainlib.py").write_text(
        "import torch\n\n\ndef train(steps):\n    model = torch.nn.Linear(4, 4)\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n    for _ in range(steps):\n"
        "        model(torch.randn(2, 4)).sum().backward()\n        optimizer.step()\n"
        "    import sys\n    print('tensorflow imported:', 'tensorflow' in sys.modules)\n")
    script = tmp_path / "main.py"
    script.write_text("import trainlib\n\ntrainlib.train(6)\n")
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "rnnprof", "trace", "--out", str(run), "--steps", "2", "--",
                           sys.executable, str(script)], env={**env(), "PYTHONPATH": f"{env()['PYTHONPATH']}:{lib}"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "tensorflow imported: False" in done.stdout
    m = manifest(run)
    assert m["status"] == "complete" and m["framework"] == "torch" and m["ranks"][0]["steps"] == [1, 2]
    assert sorted(markers(raw_events(run / "torch" / "rank0.json.gz"))) == [1, 2]
