"""A signal at any moment of ``rnnprof trace`` of a PyTorch script: the whole job stops within seconds, every
window that was completed is kept, the manifest lists exactly the files on disk and the last line says what
was kept. Real processes: the CLI, its bootstrap, torchrun and gloo ranks, sent real signals."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from processes import alive

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
STOP_WITHIN_S = 5.0
STEP = re.compile(r"^ProfilerStep#(\d+)$")

# Each step runs many small ops, so that exporting the window's trace takes a while (a few tenths of a second);
# the rank marks the start of every step and, just before the optimizer step that closes the window, the
# moment the export begins.
SCRIPT = r'''
import os, sys, time
import torch
import torch.distributed as dist

marks, closing, steps, ops = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
distributed = "WORLD_SIZE" in os.environ
if distributed:
    dist.init_process_group("gloo")
rank = dist.get_rank() if distributed else 0
torch.set_num_threads(1)
model = torch.nn.Linear(8, 8)
if distributed:
    model = torch.nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


def mark(name, text=""):
    path = os.path.join(marks, f"rank{rank}.{name}")
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


mark("pid", str(os.getpid()))
x = torch.ones(4)
for i in range(steps):
    mark("step", str(i))
    for _ in range(ops):
        x = x + 1
    model(torch.randn(4, 8)).sum().backward()
    if i == closing:
        mark("closing", str(time.time()))
    optimizer.step()
    optimizer.zero_grad()
    time.sleep(0.02)
'''

SKIP, WINDOW = 1, 2
CLOSING = SKIP + WINDOW - 1


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",
            "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}


def _start(tmp_path: Path, ranks: int, steps: int = 100000, ops: int = 6000):
    script, marks, run = tmp_path / "train.py", tmp_path / "marks", tmp_path / "run"
    script.write_text(SCRIPT)
    marks.mkdir()
    launcher = [TORCHRUN, "--nproc-per-node", str(ranks)] if ranks > 1 else [sys.executable]
    argv = [sys.executable, "-m", "rnnprof", "trace", "--out", str(run), "--steps", str(WINDOW),
            "--skip-steps", str(SKIP), "--", *launcher, str(script), str(marks), str(CLOSING), str(steps), str(ops)]
    rnnprof = subprocess.Popen(argv, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)  # its own process group: the test plays the terminal
    return rnnprof, marks, run


def _wait_until(rnnprof, done, what: str, timeout: float = 120) -> None:
    """Until ``done()``, polling every 5 ms; rnnprof's stderr as the failure where it ends first."""
    deadline = time.monotonic() + timeout
    while not done():
        if rnnprof.poll() is not None:
            raise AssertionError(rnnprof.communicate()[1][-3000:])
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.005)


def _wait_for(rnnprof, marks: Path, names: list[str], timeout: float = 120) -> None:
    _wait_until(rnnprof, lambda: all((marks / n).is_file() for n in names), str(names), timeout)


def _wait_for_export(rnnprof, marks: Path, run: Path, ranks: int) -> None:
    """Until every rank has begun writing its window's trace: its closing mark, then its scratch file in the run
    (made as the export begins; or the trace in place, where a rank's export is already over). The mark alone
    comes just before the optimizer step that closes the window: on a busy machine a signal sent on seeing it
    could land before that step ended, cutting the window short."""
    _wait_for(rnnprof, marks, [f"rank{r}.closing" for r in range(ranks)])
    torch = run / "torch"
    _wait_until(rnnprof, lambda: all(list(torch.glob(f".rank{r}.json.gz.*")) or (torch / f"rank{r}.json.gz").is_file()
                                     for r in range(ranks)), "the export begin")


def _step_of(marks: Path, rank: int) -> int:
    return int((marks / f"rank{rank}.step").read_text())


def _rank_pids(marks: Path, ranks: int) -> list[int]:
    return [int((marks / f"rank{r}.pid").read_text()) for r in range(ranks)]


def _stop(rnnprof, signum: int, group: bool, pids: list[int]) -> tuple[float, float, str]:
    """Send the signal; (when it was sent, seconds until rnnprof and every rank had ended, rnnprof's stderr)."""
    sent = time.time()
    start = time.monotonic()
    try:
        if group:
            os.killpg(rnnprof.pid, signum)
        else:
            os.kill(rnnprof.pid, signum)
        _, stderr = rnnprof.communicate(timeout=60)
        while any(alive(p) for p in pids) and time.monotonic() - start < 60:
            time.sleep(0.02)
        return sent, time.monotonic() - start, stderr
    finally:
        if rnnprof.poll() is None:
            os.killpg(rnnprof.pid, signal.SIGKILL)
            rnnprof.communicate()
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def _manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


def _disk_traces(run: Path) -> list[str]:
    return sorted(f"torch/{p.name}" for p in (run / "torch").iterdir()
                  if not p.name.startswith(".") and p.name.endswith(".json.gz"))


class _Event(msgspec.Struct):
    name: str = ""
    ph: str = ""


class _Trace(msgspec.Struct):
    traceEvents: list[_Event]


def _window_of(path: Path) -> list[int]:
    """The steps of the trace's ProfilerStep markers. The whole document is parsed (a trace cut short fails), into
    the two fields read: a window of these many-op steps is some 100,000 events, which ``json.load`` takes seconds
    of CPU to turn into dicts."""
    with gzip.open(path, "rb") as f:
        events = msgspec.json.decode(f.read(), type=_Trace).traceEvents
    return sorted(int(STEP.match(e.name).group(1)) for e in events if e.ph == "X" and STEP.match(e.name))


def _check_kept(run: Path, stderr: str, ranks: list[int]) -> None:
    """The manifest matches the disk, each kept trace holds its whole window, the last line names exactly them."""
    manifest = _manifest(run)
    assert manifest["status"] == "interrupted"
    kept = [f"torch/rank{r}.json.gz" for r in ranks]
    assert _disk_traces(run) == kept
    assert manifest["captured"]["kineto"] == kept
    by_rank = {r["rank"]: r for r in manifest["ranks"]}
    for r, record in by_rank.items():
        if r in ranks:
            assert record["trace"] == f"torch/rank{r}.json.gz" and record["steps"] == list(range(SKIP, CLOSING + 1))
            assert _window_of(run / record["trace"]) == list(range(SKIP, CLOSING + 1))
        else:
            assert record["trace"] is None and record["steps"] == []
    assert not [p.name for p in (run / "torch").iterdir() if p.name.startswith(".rank") and ".json.gz." in p.name]
    if ranks:
        listed = ", ".join(f"torch/rank{r}.json.gz (rank {r}, steps {SKIP}-{CLOSING})" for r in ranks)
        expected = f"rnnprof trace: error: interrupted; kept in {run}: {listed}"
    else:
        expected = f"rnnprof trace: error: interrupted; nothing was kept in {run}: no capture window had been written"
    assert stderr.strip().splitlines()[-1] == expected


# rnnprof handles SIGINT and SIGTERM alike (each raises KeyboardInterrupt in it, and it passes SIGTERM on to the
# launcher and every rank): each test sends one of them, to rnnprof alone or to the group, at one moment of the job,
# so that together they cover both signals, both ways of sending them, and the moments before, during and after
# the window's export, with one job each (a 2-rank job costs ~10 CPU-s).

@pytest.mark.slow
def test_sigterm_to_rnnprof_alone_during_the_export_of_a_python_script_keeps_the_window(tmp_path):
    rnnprof, marks, run = _start(tmp_path, ranks=1)
    _wait_for_export(rnnprof, marks, run, 1)
    sent, took, stderr = _stop(rnnprof, signal.SIGTERM, False, _rank_pids(marks, 1))
    assert rnnprof.returncode == 130, stderr[-3000:]
    assert took < STOP_WITHIN_S
    # the signal came while the window was being written: its trace was put in place after it, whole
    assert (run / "torch" / "rank0.json.gz").stat().st_mtime > sent
    _check_kept(run, stderr, [0])


@pytest.mark.slow
def test_sigint_to_rnnprof_alone_stops_a_torchrun_job_and_keeps_its_windows(tmp_path):
    rnnprof, marks, run = _start(tmp_path, ranks=2, ops=200)
    _wait_for(rnnprof, marks, ["rank0.step", "rank1.step"])
    deadline = time.monotonic() + 120
    while min(_step_of(marks, r) for r in (0, 1)) < CLOSING + 3:  # the window is behind both ranks
        assert rnnprof.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    pids = _rank_pids(marks, 2)
    _, took, stderr = _stop(rnnprof, signal.SIGINT, False, pids)
    assert rnnprof.returncode == 130, stderr[-3000:]
    assert took < STOP_WITHIN_S and not any(alive(p) for p in pids)
    _check_kept(run, stderr, [0, 1])


@pytest.mark.slow
def test_sigint_to_the_group_during_a_torchrun_export_keeps_both_windows(tmp_path):
    rnnprof, marks, run = _start(tmp_path, ranks=2)
    _wait_for_export(rnnprof, marks, run, 2)
    pids = _rank_pids(marks, 2)
    exporting = [r for r in (0, 1) if list((run / "torch").glob(f".rank{r}.json.gz.*"))]
    sent, took, stderr = _stop(rnnprof, signal.SIGINT, True, pids)
    assert rnnprof.returncode == 130, stderr[-3000:]
    assert took < STOP_WITHIN_S and not any(alive(p) for p in pids)
    # the signal came while a rank's window was being written (a rank may have finished its own a moment
    # before): that trace was put in place after it, whole
    assert exporting, "no rank was writing its window as the signal was sent"
    assert all((run / "torch" / f"rank{r}.json.gz").stat().st_mtime > sent for r in exporting)
    _check_kept(run, stderr, [0, 1])


@pytest.mark.slow
def test_a_signal_before_the_window_keeps_nothing_and_says_so(tmp_path):
    # one rank: what is kept is read off the ranks' records, as for a torchrun job (whose ranks a signal stops,
    # test_sigint_to_rnnprof_alone_stops_a_torchrun_job_and_keeps_its_windows)
    rnnprof, marks, run = _start(tmp_path, ranks=1, ops=2000000)  # long steps (seconds): step 0 is still running as the signal lands
    _wait_for(rnnprof, marks, ["rank0.step"])
    pids = _rank_pids(marks, 1)
    assert _step_of(marks, 0) < SKIP
    _, took, stderr = _stop(rnnprof, signal.SIGTERM, False, pids)
    assert rnnprof.returncode == 130, stderr[-3000:]
    assert took < STOP_WITHIN_S and not any(alive(p) for p in pids)
    _check_kept(run, stderr, [])
