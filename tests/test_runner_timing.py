"""The measurement protocol, on made-up steps (no TensorFlow), and the filter of TensorFlow's first-run notice."""

import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

from rnnprof.analyzers.throughput import summarize
from rnnprof.training.measure import measure


@dataclass(frozen=True)
class FakeStep:
    seconds: float
    words: int
    loss: float = 0.0


class CountingRun:
    """Step k takes k+1 seconds and yields 10*(k+1) words, so every step is recognizable."""

    def __init__(self):
        self.calls = 0

    def step(self):
        self.calls += 1
        return FakeStep(seconds=float(self.calls), words=10 * self.calls)


def test_warmup_steps_are_run_but_not_timed():
    run = CountingRun()
    m = measure(run, warmup=3, batches=4)
    assert run.calls == 7
    assert [s.seconds for s in m.warmup_steps] == [1.0, 2.0, 3.0]
    assert [s.seconds for s in m.timed_steps] == [4.0, 5.0, 6.0, 7.0]
    assert m.timed.steps == 4
    assert m.timed.total_seconds == pytest.approx(22.0)
    assert m.timed.words == 220
    assert m.with_warmup.total_seconds == pytest.approx(28.0)
    assert m.with_warmup.steps == 7


def test_words_per_second_is_total_words_over_total_time_not_mean_of_rates():
    steps = [FakeStep(1.0, 100), FakeStep(3.0, 100)]
    summary = summarize(steps)
    assert summary.words_per_second == pytest.approx(200 / 4.0)  # mean of rates would be 66.7
    assert summary.mean_step_seconds == pytest.approx(2.0)
    assert summary.median_step_seconds == pytest.approx(2.0)
    assert summary.std_step_seconds == pytest.approx(1.0)


def test_slow_warmup_biases_the_included_figure_downwards():
    run_steps = [FakeStep(5.0, 100)] + [FakeStep(1.0, 100)] * 4

    class Replay:
        def __init__(self):
            self.it = iter(run_steps)

        def step(self):
            return next(self.it)

    m = measure(Replay(), warmup=1, batches=4)
    assert m.timed.words_per_second == pytest.approx(100.0)
    assert m.with_warmup.words_per_second == pytest.approx(500 / 9.0)


def test_callback_sees_each_phase_in_order():
    seen = []
    measure(CountingRun(), warmup=2, batches=2, on_step=lambda phase, i, s: seen.append((phase, i, s.seconds)))
    assert seen == [("warmup", 0, 1.0), ("warmup", 1, 2.0), ("timed", 0, 3.0), ("timed", 1, 4.0)]


def test_zero_timed_batches_is_refused():
    with pytest.raises(ValueError):
        measure(CountingRun(), warmup=1, batches=0)


def test_progress_bar_follows_both_phases_on_a_terminal():
    from io import StringIO

    from rich.console import Console

    from rnnprof.reports.progress import StepProgress

    buffer = StringIO()
    console = Console(file=buffer, force_terminal=True, width=100)
    with StepProgress(console) as progress:
        measure(CountingRun(), warmup=2, batches=3, on_step=progress.run("replicated x2", 2, 3))
        tasks = {t.description.split(" (")[0]: t for t in progress._progress.tasks}
    assert progress.steps_seen == 5
    assert tasks["replicated x2 warm-up"].completed == 2 and tasks["replicated x2 timed"].completed == 3
    assert "replicated x2" in buffer.getvalue()


def test_progress_bar_is_silent_off_a_terminal():
    from io import StringIO

    from rich.console import Console

    from rnnprof.reports.progress import StepProgress

    buffer = StringIO()
    with StepProgress(Console(file=buffer, force_terminal=False)) as progress:
        measure(CountingRun(), warmup=1, batches=1, on_step=progress.run("x", 1, 1))
    assert progress.steps_seen == 2 and buffer.getvalue() == ""


class _RecordingNvtx:
    """Stands in for the nvtx package: records range starts and ends in order."""

    def __init__(self, fail: bool = False):
        self.log = []
        self.fail = fail

    def start_range(self, message, color=None, domain=None):
        if self.fail:
            raise RuntimeError("no CUDA driver")
        self.log.append(("start", message))
        return message

    def end_range(self, handle):
        self.log.append(("end", handle))


@pytest.mark.parametrize("warmup", [0, 2])
def test_trace_marks_warmup_timed_and_each_step_with_nvtx(monkeypatch, warmup):
    from rnnprof.recording import nvtx as nvtx_ranges
    from rnnprof.recording.nvtx import NvtxSteps

    fake = _RecordingNvtx()
    monkeypatch.setattr(nvtx_ranges, "_module", lambda: fake)
    steps = NvtxSteps(CountingRun(), warmup)
    measure(steps, warmup, 3)
    steps.end()
    expected = []
    if warmup:
        expected += [("start", "warm-up")]
        for n in range(warmup):
            expected += [("start", f"step {n}"), ("end", f"step {n}")]
        expected += [("end", "warm-up")]
    expected += [("start", "timed")]
    for n in range(warmup, warmup + 3):
        expected += [("start", f"step {n}"), ("end", f"step {n}")]
    expected += [("end", "timed")]
    assert fake.log == expected


def test_nvtx_that_fails_never_stops_the_run(monkeypatch):
    from rnnprof.recording import nvtx as nvtx_ranges
    from rnnprof.recording.nvtx import NvtxSteps

    monkeypatch.setattr(nvtx_ranges, "_module", lambda: _RecordingNvtx(fail=True))
    steps = NvtxSteps(CountingRun(), 1)
    m = measure(steps, 1, 3)
    steps.end()
    assert len(m.timed_steps) == 3


def test_tensorflow_start_up_noise_is_dropped_but_real_errors_pass(capfd):
    import os

    from rnnprof.frameworks.tensorflow import _STARTUP_NOISE, _native_stderr_filtered

    with _native_stderr_filtered(_STARTUP_NOISE):
        os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n")
        os.write(2, b"I0000 00:00:1795307529.025080    5260 port.cc:153] oneDNN custom operations are on.\n")
        os.write(2, b"W0000 00:00:1795307529.025080    5260 cpu_feature_guard.cc:227] rebuild TensorFlow\n")
        os.write(2, b"E0000 00:00:1795307529.025080    5260 util.cc:131] a real problem\n")
        os.write(2, b"Could not load dynamic library 'libcudart.so.12'\n")
    err = capfd.readouterr().err
    assert err.splitlines() == ["E0000 00:00:1795307529.025080    5260 util.cc:131] a real problem",
                                "Could not load dynamic library 'libcudart.so.12'"]


def test_only_the_onednn_int32_notice_is_dropped_around_the_first_run(capfd):
    import os

    from rnnprof.frameworks.tensorflow import quiet_first_run

    notice = (b"E0000 00:00:1795309404.854204   15745 util.cc:131] oneDNN supports DT_INT32 only on platforms "
              b"with AVX-512. Falling back to the default Eigen-based implementation if present.\n")
    with quiet_first_run():
        os.write(2, notice)
        os.write(2, b"E0000 00:00:1795309404.854204   15745 util.cc:131] a real problem\n")
        os.write(2, b"W0000 00:00:1795307529.025080    5260 op_kernel.cc:1857] OP_REQUIRES failed\n")
    err = capfd.readouterr().err
    assert err.splitlines() == ["E0000 00:00:1795309404.854204   15745 util.cc:131] a real problem",
                                "W0000 00:00:1795307529.025080    5260 op_kernel.cc:1857] OP_REQUIRES failed"]


ONEDNN_NOTICE = (b"E0000 00:00:1795309404.854204   15745 util.cc:131] oneDNN supports DT_INT32 only on platforms "
                 b"with AVX-512. Falling back to the default Eigen-based implementation if present.\n")
REAL_ERROR = b"E0000 00:00:1795309404.854204   15745 util.cc:131] a real problem\n"


def test_first_run_filter_on_a_real_stderr_drops_the_notice_only_inside_it():
    """In a fresh process whose fd 2 is a pipe: the notice written inside ``quiet_first_run`` is dropped, other
    lines (native and Python) pass in order, and the same notice written after it passes."""
    code = f"""if True:
        import os, sys
        from rnnprof.frameworks.tensorflow import quiet_first_run
        os.write(2, b"before\\n")
        with quiet_first_run():
            os.write(2, {ONEDNN_NOTICE!r})
            os.write(2, {REAL_ERROR!r})
            print("from python", file=sys.stderr)
        os.write(2, {ONEDNN_NOTICE!r})
        """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines(keepends=True) == [b"before\n", REAL_ERROR, b"from python\n", ONEDNN_NOTICE]


@pytest.mark.slow
def test_the_runner_filters_its_first_step_and_only_that(capfd):
    """TF prints the notice only on machines without AVX-512, so the session here writes it (and a real error) at
    every run, as TF would at the first: the runner must drop it at the first step and let everything else by."""
    from rnnprof.models.config import WorkloadConfig, model_defaults
    from rnnprof.training.runner import DataParallelRun

    sizes = dict(model_defaults("rnnlm", "small"), units=16, embedding=16, layers=1, batch_size=4)
    with DataParallelRun(WorkloadConfig(model="rnnlm", preset="small", devices=2, **sizes)) as run:
        session_run = run.session.run

        def run_and_log(*args, **kwargs):
            os.write(2, ONEDNN_NOTICE)
            os.write(2, REAL_ERROR)
            return session_run(*args, **kwargs)

        run.session.run = run_and_log
        capfd.readouterr()
        run.step()
        first = capfd.readouterr().err
        run.step()
        second = capfd.readouterr().err
    assert first.encode().count(REAL_ERROR) == 1 and ONEDNN_NOTICE not in first.encode()
    assert second.encode() == ONEDNN_NOTICE + REAL_ERROR
