"""rnnprof watch on real jobs: a 2-rank gloo DDP job run under ``rnnprof watch -- torchrun`` as a user runs it, its
faults planted at known steps (``watch_job.py``: rank 1 starts to straggle, then memory starts to grow), read by
every test of the module; windows asked from another terminal and by a signal while it runs; the built-in PyTorch
workload, balanced (the quiet control); the built-in TensorFlow workload with a slowdown planted in its steps; and a
hung job, watched."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from rnnprof import rundir
from rnnprof.cli import main
from rnnprof.events.series import DATA_BEFORE_FORWARD, DATA_LOADER, WARMUP, RankSeries
from rnnprof.rundir.manifest import read_manifest_json
from rnnprof.rundir.series import read_series
from rnnprof.rundir.windows import read_lines, window_dirs

from processes import left_running, stderr_ends

HERE = Path(__file__).resolve().parent
JOB = HERE.parent / "benchmarks" / "_watch_job.py"
EXAMPLE = HERE.parent / "examples" / "train.py"
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
RNNPROF = [sys.executable, "-m", "rnnprof"]
STEPS, STRAGGLE_AT, SLEEP_MS, GROW_AT, GROW_KB = 480, 140, 30.0, 230, 1024


@pytest.fixture(scope="module")
def watched(tmp_path_factory):
    """The job watched to its end: (run directory, the script's clock of each rank, the TensorBoard folder, the
    answer of an ask from another terminal, rnnprof's exit and output)."""
    tmp = tmp_path_factory.mktemp("watch")
    run, clock, board = tmp / "run", tmp / "clock", tmp / "board"
    clock.mkdir()
    command = [*RNNPROF, "watch", "--out", str(run), "--window-steps", "4", "--capture-gap", "40",
               "--baseline-step", "20", "--tensorboard", str(board), "--", TORCHRUN, "--nproc-per-node", "2",
               str(JOB), str(clock), "--steps", str(STEPS), "--step-ms", "3", "--straggle-at", str(STRAGGLE_AT),
               "--sleep-ms", str(SLEEP_MS), "--grow-at", str(GROW_AT), "--grow-kb", str(GROW_KB)]
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ask = _when(run, 90, lambda: subprocess.run([*RNNPROF, "watch", "--capture", str(run)], capture_output=True,
                                                text=True, timeout=60))
    _when(run, 300, lambda: job.send_signal(signal.SIGUSR1))
    out, err = job.communicate(timeout=600)
    done = subprocess.CompletedProcess(command, job.returncode, out, err)
    assert done.returncode == 0, stderr_ends(done)
    clocks = {r: json.loads((clock / f"rank{r}-clock.json").read_text()) for r in (0, 1)}
    return run, clocks, board, ask, done


def _when(run: Path, step: int, then, timeout_s: float = 300):
    """``then()`` once every rank's series has reached ``step``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        series = read_series(run) if (run / rundir.SERIES_DIR).is_dir() else {}
        if len(series) == 2 and all(len(s) and s["step"][-1] >= step for s in series.values()):
            return then()
        time.sleep(0.05)
    raise AssertionError(f"the job did not reach step {step}")


def _anomalies(run: Path, kind: str) -> list[dict]:
    return [line for line in read_lines(run) if line.get("anomaly", {}).get("kind") == kind]


def test_the_job_completes_and_every_rank_keeps_every_step(watched):
    run, clocks, _, _, done = watched
    manifest = read_manifest_json(run)
    assert manifest["status"] == "complete" and manifest["exit_code"] == 0
    series = read_series(run)
    for rank in (0, 1):
        assert list(series[rank]["step"]) == list(range(STEPS))
        script = np.array(clocks[rank]["step_s"][1:])  # the script's own clock, from one step's end to the next
        assert np.median(series[rank]["step_s"][1:]) == pytest.approx(np.median(script), rel=0.05)
    assert manifest["watch"]["steps"] == STEPS and f"watched {STEPS} steps on 2 rank(s)" in done.stdout


def test_the_straggler_is_named_within_20_steps_with_the_scripts_own_cost(watched):
    run, clocks, _, _, _ = watched
    stragglers = _anomalies(run, "straggler")
    assert stragglers, read_lines(run)
    first = stragglers[0]["anomaly"]
    assert first["ranks"] == [1] and STRAGGLE_AT <= first["step"] <= STRAGGLE_AT + 20
    slept = np.median(list(clocks[1]["sleep_s"].values()))
    assert first["cost"] == pytest.approx(slept, rel=0.4)
    assert not [a for a in read_lines(run) if a.get("anomaly", {}).get("step", STEPS) < STRAGGLE_AT
                and a["anomaly"]["kind"] in ("straggler", "memory_growth")]


def test_its_window_is_captured_on_both_ranks_at_the_same_steps_and_its_verdict_kept_beside_it(watched):
    run = watched[0]
    name = _anomalies(run, "straggler")[0]["window"]
    window = run / rundir.WINDOWS_DIR / name
    manifest = read_manifest_json(window)
    assert manifest["status"] == "complete" and sorted(manifest["captured"]["kineto"]) == [
        "torch/rank0.json.gz", "torch/rank1.json.gz"]
    steps = [r["steps"] for r in manifest["ranks"]]
    first = rundir.window_first_step(name)  # asked of the ranks; a rank told late opens it at its next step
    assert steps[0] == steps[1] and len(steps[0]) == 4 and first <= steps[0][0] <= first + 2
    verdict = json.loads((window / rundir.VERDICT).read_text())
    assert verdict["headline"]["kind"] == "straggler" and verdict["headline"]["ranks"] == [1]
    assert verdict["agrees"] and verdict["agrees"]["rule"] == "PF001" and verdict["agrees"]["rank"] == "rank1"
    assert verdict["baseline_window"].startswith("000-step20") and "rank 1 straggles" in verdict["text"]


def test_memory_growth_is_named_with_its_rate(watched):
    run = watched[0]
    growth = [line["anomaly"] for line in _anomalies(run, "memory_growth")]
    assert sorted(r for a in growth for r in a["ranks"]) == [0, 1]  # each rank's, once
    planted = GROW_KB * 1024  # bytes kept a step
    for anomaly in growth:
        assert anomaly["cost"] == pytest.approx(planted, rel=0.1)
        assert GROW_AT - 5 <= anomaly["onset"] <= GROW_AT + 10


def test_windows_asked_from_another_terminal_and_by_a_signal_are_captured(watched):
    run, _, _, ask, done = watched
    assert ask.returncode == 0 and ask.stdout.startswith("window "), ask.stderr
    asked = ask.stdout.split()[1].rstrip(":")
    windows = read_manifest_json(run)["watch"]["windows"]
    by_name = {w["name"]: w for w in windows}
    seen = ([(w["name"], w["reason"], w["asks"]) for w in windows], done.stdout[-3000:])
    assert by_name["000-step20"]["reason"] == "baseline" and by_name["000-step20"]["asks"] == 0, seen
    # asked once every rank had run step 90: a window after it answers, one asked for or one already due
    assert by_name[asked]["first_step"] > 90 and by_name[asked]["asks"] >= 1, seen
    # the signal came once every rank had run step 300: a window after it answers too
    assert sum(w["asks"] for w in windows) == 2 and any(w["asks"] and w["first_step"] > 300 for w in windows), seen
    # a verdict beside every window the job ran through; one opened past its last step says it was not captured
    ran = [w for w in windows if w["first_step"] + w["steps"] <= STEPS]
    assert all((run / rundir.WINDOWS_DIR / w["name"] / rundir.VERDICT).is_file() for w in ran), seen
    assert all(w["verdict"].startswith("not captured") for w in windows if w not in ran), seen
    assert f"a window now: kill -USR1" in done.stdout or "window" in done.stdout


def test_the_series_is_written_as_tensorboard_scalars(watched):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run, _, board, _, _ = watched
    series = read_series(run)
    for rank in (0, 1):
        events = EventAccumulator(str(board / f"rank{rank}")).Reload()
        steps = events.Scalars("rnnprof/step_ms")
        assert [e.step for e in steps] == list(range(STEPS))
        assert np.allclose([e.value for e in steps], series[rank]["step_s"] * 1e3, rtol=1e-6)
        assert "rnnprof/memory_mb" in events.Tags()["scalars"]


def test_report_plots_the_series_with_the_windows_marked_and_audit_reads_a_window(watched, tmp_path, capsys):
    run = watched[0]
    page = tmp_path / "report.html"
    assert main(["report", str(run), "-o", str(page)]) == 0
    html = page.read_text()
    for chart in ("watch-steps", "watch-split", "watch-memory"):
        assert f'data-chart="{chart}"' in html
    assert "straggles" in html and "000-step20" in html
    window = run / rundir.WINDOWS_DIR / _anomalies(run, "straggler")[0]["window"]
    capsys.readouterr()
    assert main(["audit", str(window), "--json", "--fail-on", "never"]) == 0
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert [f["subject"]["rank"] for f in findings if f["rule"] == "PF001"] == ["rank1"]


def test_the_tensorboard_tab_and_the_notebook_show_the_watched_jobs_series_and_its_straggler(watched):
    from rnnprof.tensorboard_plugin.plugin import tab_page

    page = tab_page(watched[0])
    assert "<h3>The watched job</h3>" in page and 'data-chart="watch-steps"' in page and "<script" not in page
    straggler = _anomalies(watched[0], "straggler")[0]
    assert "straggles" in page and straggler["window"] in page


def test_the_readme_example_watches_a_users_own_script_every_part_of_its_steps_measured(tmp_path):
    """README's example, on fewer steps: examples/train.py knows nothing of rnnprof (its batches come from a
    DataLoader, DDP averages its gradients); balanced, no rank is named."""
    run = tmp_path / "run"
    done = subprocess.run([*RNNPROF, "watch", "--out", str(run), "--baseline-step", "30", "--window-steps", "3", "--",
                           TORCHRUN, "--nproc-per-node", "2", str(EXAMPLE), "--steps", "120"], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, stderr_ends(done)
    series = read_series(run)
    assert sorted(series) == [0, 1]
    for s in series.values():
        assert len(s) == 120 and s.unmeasured == {}
        for part in ("data_s", "forward_s", "backward_s", "optimizer_s", "comm_wait_s", "runqueue_s"):
            assert np.isfinite(s[part][1:]).all() and (s[part][1:] >= 0).all(), part
        assert np.median(s["data_s"][1:]) > 0 and np.median(s["comm_wait_s"][1:]) > 0
        parts = sum(s[p] for p in ("data_s", "forward_s", "backward_s", "optimizer_s"))
        assert (parts[1:] <= s["step_s"][1:] * (1 + 1e-9)).all()  # the parts lie inside their step
    # A busy machine can slow every rank's steps for a while (a regression, rightly raised); nothing in a rank
    raised = [line["anomaly"] for line in read_lines(run) if "anomaly" in line]
    assert [a for a in raised if a["kind"] in ("straggler", "input_stall", "memory_growth")] == []
    window = window_dirs(run)[0]
    assert window.name == "000-step30" and len(read_manifest_json(window)["captured"]["kineto"]) == 2


def test_the_builtin_torch_workload_is_watched_rank_by_rank_its_warmup_flagged(tmp_path):
    run = tmp_path / "run"
    done = subprocess.run([*RNNPROF, "watch", "--out", str(run), "--framework", "torch", "--model", "rnnlm",
                           "--devices", "2", "--units", "16", "--layers", "1", "--vocab-size", "60",
                           "--src-max-len", "6", "--batch-size", "4", "--warmup", "5", "--batches", "40",
                           "--baseline-step", "10", "--window-steps", "3"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, stderr_ends(done)
    series = read_series(run)
    assert sorted(series) == [0, 1] and all(len(s) == 45 for s in series.values())
    assert all(list(s["flags"].astype(int)[:6] & WARMUP) == [WARMUP] * 5 + [0] for s in series.values())
    manifest = read_manifest_json(run)
    assert manifest["status"] == "complete" and manifest["watch"]["windows"][0]["name"] == "000-step10"
    window = run / rundir.WINDOWS_DIR / "000-step10"
    assert [r["steps"] for r in read_manifest_json(window)["ranks"]] == [[10, 11, 12]] * 2


def test_the_builtin_tensorflow_workload_watched_raises_a_slowdown_and_captures_its_window(tmp_path, monkeypatch,
                                                                                           capsys):
    from rnnprof.training.runner import DataParallelRun

    # the planted slowdown stands well above what the machine's other load moves a step by (on 2 busy cores a
    # 20 ms sleep was once measured as 29 ms); once slowed, a window opens within a few steps, well before the end.
    # No baseline window: the regression is judged on the series alone, and its window is the TensorFlow capture
    # checked here (the analysis of a window of a TensorFlow run loads TensorFlow: seconds a window;
    # the baseline window and the comparison with it are checked on the watched PyTorch job above)
    slow_from, slow_s = 110, 0.05
    step = DataParallelRun.step
    calls, slept = [], []

    def slowed(self, options=None, run_metadata=None):
        calls.append(1)
        if len(calls) > slow_from:
            began = time.perf_counter()
            time.sleep(slow_s)
            slept.append(time.perf_counter() - began)  # the planted slowdown by the test's own clock
        return step(self, options=options, run_metadata=run_metadata)

    monkeypatch.setattr(DataParallelRun, "step", slowed)
    run = tmp_path / "run"
    assert main(["watch", "--out", str(run), "--model", "rnnlm", "--devices", "2", "--units", "16", "--layers", "1",
                 "--vocab-size", "60", "--src-max-len", "6", "--batch-size", "4", "--warmup", "3", "--batches", "260",
                 "--no-baseline", "--window-steps", "2"]) == 0
    series = read_series(run)[0]
    assert len(series) >= 263 and np.isfinite(series["memory"]).all() and series.memory_source == "process_rss"
    regression = [line for line in read_lines(run) if line.get("anomaly", {}).get("kind") == "regression"
                  and slow_from <= line["anomaly"]["step"] <= slow_from + 20]
    assert regression, read_lines(run)
    assert regression[0]["anomaly"]["cost"] == pytest.approx(np.median(slept), rel=0.4)
    window = run / rundir.WINDOWS_DIR / regression[0]["window"]
    assert read_manifest_json(window)["captured"]["timelines"] and (window / rundir.VERDICT).is_file()
    assert main(["comm", str(window)]) == 0


def test_a_hung_job_under_watch_is_named_stopped_and_marked(tmp_path):
    run = tmp_path / "run"
    done = subprocess.run([*RNNPROF, "watch", "--out", str(run), "--hang-after", "2s", "--no-baseline", "--",
                           TORCHRUN, "--nproc-per-node", "2", str(HERE / "hang_jobs" / "hang_job.py"), "data"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 124, stderr_ends(done)
    manifest = read_manifest_json(run)
    assert manifest["status"] == "hung" and manifest["hang"]["ranks"] == [1]
    assert "load_batch" in (run / "hang" / "verdict.txt").read_text()
    assert all(len(s) >= 4 for s in read_series(run).values())  # the steps before the hang were watched
    assert left_running() == {}


def test_a_gpu_ranks_memory_is_read_once_a_step_from_the_allocators_statistics(monkeypatch):
    """On a GPU the step's memory and its peak come from one read of the CUDA allocator's statistics (torch's
    ``memory_allocated()`` and ``max_memory_allocated()`` each flatten them all, which cost a watched 3 ms CUDA step
    a few percent on an H200), and the peak is reset for the next step."""
    from rnnprof.recording.torch_telemetry import MEMORY_CUDA, MemoryGauge

    calls = []

    class Allocator:
        def is_initialized(self):
            return True

        def memory_stats_as_nested_dict(self):
            calls.append("stats")
            return {"allocated_bytes": {"all": {"current": 5 << 20, "peak": 9 << 20}, "large_pool": {}}}

        def reset_peak_memory_stats(self):
            calls.append("reset")

        def memory_allocated(self):  # flattened: not to be called each step
            raise AssertionError("memory_allocated")

        max_memory_allocated = memory_allocated

    gauge = MemoryGauge()
    monkeypatch.setattr(gauge, "_cuda", Allocator())
    assert gauge.read() == (float(5 << 20), float(9 << 20)) and gauge.source == MEMORY_CUDA
    assert calls == ["stats", "reset"]
    gauge.close()


def _watched_loop(out: Path, with_loader: bool) -> RankSeries:
    """40 steps of a small model in this process under a rank's watch: each batch 4 ms in coming (a DataLoader whose
    dataset takes 1 ms an item, or a sleep before a tensor is made), each step followed by 12 ms after
    ``optimizer.step()`` (a loop that waits for its GPU there, or logs)."""
    import torch
    from torch.utils.data import DataLoader, Dataset

    from rnnprof.recording.watch_rank import TorchRankWatch

    class Slow(Dataset):
        def __len__(self):
            return 160

        def __getitem__(self, i):
            time.sleep(0.001)
            return torch.ones(16), torch.ones(1)

    def made():
        for _ in range(40):
            time.sleep(0.004)
            yield torch.ones(4, 16), torch.ones(4, 1)

    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    watch = TorchRankWatch(out, probe=False, records=False, rank=0).start()
    try:
        for x, y in (DataLoader(Slow(), batch_size=4) if with_loader else made()):
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            time.sleep(0.012)
    finally:
        watch.close()
    return read_series(out)[0]


def test_the_data_wait_is_the_dataloaders_time_not_what_the_loop_does_after_its_optimizer(tmp_path):
    """Where the loop iterates a DataLoader, the data wait is the training thread's time in it: the 12 ms after each
    ``optimizer.step()`` (a GPU loop's synchronize, which on an H200 was headed as an input stall) falls in `other`,
    not in the data wait. A loop with no DataLoader keeps the time from the step's start to its forward."""
    loader = _watched_loop(tmp_path / "loader", True)
    assert loader.data_source == DATA_LOADER and len(loader) == 40
    assert 0.004 <= np.median(loader["data_s"][1:]) < 0.010  # 4 items of 1 ms; the 12 ms after the step not in it
    assert np.median(loader["other_s"][1:]) >= 0.012
    plain = _watched_loop(tmp_path / "plain", False)
    assert plain.data_source == DATA_BEFORE_FORWARD and len(plain) == 40
    assert np.median(plain["data_s"][1:]) >= 0.016  # the sleep before the batch and the 12 ms after the last step
