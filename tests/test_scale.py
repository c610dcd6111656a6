"""rnnprof scale: speedup maths (pure) and the command on tiny real runs."""

import json
import subprocess
import sys
from dataclasses import dataclass

import pytest

from rnnprof.analyzers.scale import ScalePoint, shared_cores_note, speedup_table
from rnnprof.cli import main
from rnnprof.analyzers.throughput import summarize


@dataclass(frozen=True)
class FakeStep:
    seconds: float
    words: int
    loss: float = 0.0


def point(mode, devices, seconds, words):
    timed = summarize([FakeStep(seconds, words)])
    return ScalePoint(variable_update=mode, all_reduce=None, devices=devices, per_device_batch=8,
                      total_batch=8 * devices, timed=timed)


def test_speedup_is_throughput_relative_to_the_one_device_run_of_the_same_mode():
    result = speedup_table([point("replicated", 2, 1.0, 300), point("replicated", 1, 1.0, 200),
                            point("independent", 1, 2.0, 200), point("independent", 4, 1.0, 400)])
    by = {(r.point.variable_update, r.point.devices): r for r in result.rows}
    assert by[("replicated", 1)].speedup == pytest.approx(1.0)
    assert by[("replicated", 2)].speedup == pytest.approx(1.5)
    assert by[("independent", 4)].speedup == pytest.approx(4.0)
    assert [r.point.devices for r in result.rows] == [1, 2, 1, 4]  # sorted within each mode
    assert result.notes == ()


def test_without_a_one_device_run_the_smallest_count_is_the_base_and_a_note_says_so():
    result = speedup_table([point("replicated", 4, 1.0, 300), point("replicated", 2, 1.0, 200)])
    assert [r.baseline_devices for r in result.rows] == [2, 2]
    assert [round(r.speedup, 2) for r in result.rows] == [1.0, 1.5]
    assert len(result.notes) == 1 and "2 devices" in result.notes[0]


def test_shared_cores_note_only_for_logical_cpu_devices():
    assert "not a scaling result" in shared_cores_note("logical-cpu", 2)
    assert shared_cores_note("gpu", 2) is None


TINY = ["--model", "rnnlm", "--encoder", "fused", "--layers", "1", "--units", "16", "--vocab-size", "50",
        "--src-max-len", "6", "--tgt-max-len", "6", "--batch-size", "4", "--warmup", "1", "--batches", "3"]


@pytest.mark.slow
def test_json_has_a_row_per_device_count_with_consistent_figures(capsys):
    code = main(["scale", "--devices", "1,2,3", "--variable-update", "replicated,parameter_server",
                 "--include-warmup", "--json", *TINY])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    rows = doc["rows"]
    assert [(r["variable_update"], r["devices"]) for r in rows] == [
        ("replicated", 1), ("replicated", 2), ("replicated", 3),
        ("parameter_server", 1), ("parameter_server", 2), ("parameter_server", 3)]
    for row in rows:
        assert len(row["step_seconds"]) == 3 and len(row["warmup_step_seconds"]) == 1
        assert row["total_seconds"] == pytest.approx(sum(row["step_seconds"]))
        assert row["words_per_second"] == pytest.approx(row["words"] / row["total_seconds"])
        assert row["batch_total"] == row["batch_per_device"] * row["devices"] == 4 * row["devices"]
        assert row["total_seconds_including_warmup"] == pytest.approx(
            row["total_seconds"] + sum(row["warmup_step_seconds"]))
        base = next(r for r in rows if r["variable_update"] == row["variable_update"] and r["devices"] == 1)
        assert row["speedup"] == pytest.approx(row["words_per_second"] / base["words_per_second"])
    assert all(r["speedup"] == 1.0 for r in rows if r["devices"] == 1)
    assert doc["device_kind"] == "logical-cpu"
    assert any("not a scaling result" in note for note in doc["notes"])
    assert doc["definitions"]["words"]
    assert doc["config"]["devices"] == [1, 2, 3]
    # piped, the progress is a line per configuration as it starts and ends, on stderr only
    labels = [f"[{k + 1}/6] {mode} x{n}" for k, (mode, n) in enumerate(
        [(m, n) for m in ("replicated", "parameter_server") for n in (1, 2, 3)])]
    lines = err.splitlines()
    assert [line for line in lines if line.endswith(": started")] == [
        f"rnnprof scale: {label}: started" for label in labels]
    done = [line for line in lines if ": done in " in line]
    assert [line.split(": done in ")[0] for line in done] == [f"rnnprof scale: {label}" for label in labels]
    for line, row in zip(done, rows):
        assert line.endswith(f"{row['words_per_second']:,.0f} words/s over 3 timed steps")


@pytest.mark.slow
def test_table_on_the_terminal_names_the_columns_and_the_note():
    from io import StringIO

    from rich.console import Console

    buffer = StringIO()
    console = Console(file=buffer, width=200, force_terminal=False)
    code = main(["scale", "--devices", "2,3", "--batch-scaling", "total", "--batch-size", "6",
                 *[a for a in TINY if a not in ("--batch-size", "4")]], console=console)
    text = buffer.getvalue()
    assert code == 0
    assert "words/s" in text and "speedup" in text and "1.00x" in text
    assert "relative to 2 devices" in text  # no 1-device run in the sweep
    assert "not a scaling result" in text
    # Total batch 6 split over 2 and 3 devices: (devices, per device, total) leads each row.
    rows = [line.split()[:3] for line in text.splitlines() if line.strip().endswith("x")]
    assert rows == [["2", "3", "6"], ["3", "2", "6"]]


@pytest.mark.slow
def test_sweep_measures_each_config_in_order_and_reports_progress():
    """The sweep without the command: a point per config, in order, each step passed to its progress."""
    from rnnprof.models.config import WorkloadConfig
    from rnnprof.training.sweep import sweep

    base = WorkloadConfig(model="rnnlm", layers=1, units=16, embedding=16, vocab_size=50, src_max_len=6,
                          tgt_max_len=6, batch_size=4, warmup=1, batches=2, learning_rate=1.0)
    configs = [base.replace(devices=2, variable_update="independent"),
               base.replace(devices=1, variable_update="replicated", include_warmup=True)]
    seen, warnings = [], []

    def progress(label, warmup, batches):
        seen.append((label, warmup, batches, []))
        return lambda phase, index, step: seen[-1][3].append((phase, index))

    swept = sweep(configs, progress, on_warning=warnings.append)
    assert [(p.variable_update, p.devices) for p in swept.points] == [("independent", 2), ("replicated", 1)]
    assert [s[:3] for s in seen] == [("independent x2", 1, 2), ("replicated x1", 1, 2)]
    assert all(s[3] == [("warmup", 0), ("timed", 0), ("timed", 1)] for s in seen)
    first, second = swept.points
    assert first.all_reduce is None and second.all_reduce == "ring"  # only replicated mode reduces
    assert first.total_batch == 8 and second.total_batch == 4
    assert first.with_warmup is None and second.with_warmup.steps == 3
    assert len(first.step_seconds) == 2 and len(first.warmup_step_seconds) == 1
    assert first.timed.total_seconds == pytest.approx(sum(first.step_seconds))
    assert swept.device_kind == "logical-cpu" and swept.model == "rnnlm" and swept.words_definition
    assert warnings == []


def test_progress_is_bars_on_a_terminal_and_a_line_per_configuration_elsewhere():
    from io import StringIO

    from rich.console import Console

    from rnnprof.reports.progress import StepProgress

    done = point("replicated", 2, 0.5, 1000)
    piped = StringIO()
    with StepProgress(Console(file=piped, force_terminal=False, width=60), name="rnnprof scale") as progress:
        progress.on_run(0, 2, "replicated x2", None)
        progress.on_run(0, 2, "replicated x2", done)
    lines = piped.getvalue().splitlines()
    assert lines[0] == "rnnprof scale: [1/2] replicated x2: started"
    assert lines[1].startswith("rnnprof scale: [1/2] replicated x2: done in ")
    assert lines[1].endswith(" s, 2,000 words/s over 1 timed steps") and len(lines) == 2  # never wrapped
    terminal = StringIO()
    with StepProgress(Console(file=terminal, force_terminal=True, width=60)) as progress:
        progress.on_run(1, 2, "replicated x2", None)
        (task,) = progress._progress.tasks
        assert (task.completed, task.total) == (1, 2) and "replicated x2" in task.description
        progress.on_run(1, 2, "replicated x2", done)
        assert task.completed == 2
    assert "started" not in terminal.getvalue()


@pytest.mark.parametrize("argv, message", [
    (["--variable-update", "replicated,sharded"], "sharded"),
    (["--devices", "0,2"], "at least 1"),
    (["--devices", "two"], "whole numbers"),
    (["--all-reduce", "nccl"], "nccl needs GPUs"),
    (["--model", "nmt", "--encoder", "fused", "--attention", "luong"], "loop decoder"),
])
def test_bad_flags_exit_2_with_one_line(argv, message, capsys):
    code = main(["scale", *TINY, *argv])
    err = capsys.readouterr().err
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("rnnprof")]
    assert len(lines) == 1 and message in lines[0]
    assert "Traceback" not in err


@pytest.mark.slow
def test_bad_flag_through_the_console_script_has_no_traceback():
    out = subprocess.run([sys.executable, "-m", "rnnprof", "scale", "--devices", "0"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("rnnprof scale: error: --devices")


@pytest.mark.parametrize("width", [80, 120])
def test_table_never_cuts_a_figure_short_at_narrow_widths(width):
    from io import StringIO

    from rich.console import Console

    from rnnprof.reports.scale import render_table

    def big_point(devices, seconds, words):
        steps = [FakeStep(seconds, words), FakeStep(seconds * 1.2, words)]
        return ScalePoint(variable_update="replicated", all_reduce="ring", devices=devices, per_device_batch=1024,
                          total_batch=1024 * devices, timed=summarize(steps),
                          with_warmup=summarize([FakeStep(100.0, words), *steps]))

    result = speedup_table([big_point(1, 13.392, 4_000_000), big_point(16, 1.1, 60_000_000)])
    buffer = StringIO()
    render_table(result, model="nmt", words_definition="tokens", warmup=10, batches=2000, include_warmup=True,
                 notes=[], console=Console(file=buffer, width=width), parameter_device=None)
    text = buffer.getvalue()
    assert "…" not in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    fast = result.rows[1].point
    for figure in (f"{fast.timed.words_per_second:,.0f}", f"{fast.with_warmup.words_per_second:,.0f}",
                   f"{result.rows[1].speedup:.2f}x", "16384", "14.731±1.339", "speedup", "median±std"):
        assert figure in text


@pytest.mark.parametrize("argv, message", [
    (["--batches", "-1"], "--batches: expected a number of at least 1"),
    (["--warmup", "-2"], "--warmup: expected a number of at least 0"),
    (["--units", "-5"], "--units: expected a number of at least 1"),
    (["--learning-rate", "-0.1"], "--learning-rate must be a positive number"),
    (["--learning-rate", "nan"], "--learning-rate must be a positive number"),
    (["--model", "nmt", "--plant", "softmax-on-device0"], "applies to --model rnnlm"),
    (["--devices", "1,0"], "at least 1"),
])
def test_negative_numbers_and_misapplied_flags_are_one_line(argv, message, capsys):
    code = main(["scale", *TINY, *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err  # no usage block before the error
    assert err.startswith("rnnprof scale: error:") and message in err


@pytest.mark.parametrize("explain", [[], ["--explain"]])
def test_more_devices_than_visible_gpus_is_refused_before_training(explain, tmp_path, monkeypatch, capsys):
    # a machine with one GPU: --devices 1,2 asks for two, with or without --explain, before any run starts
    import rnnprof.commands.scale as scale_command

    monkeypatch.setattr(scale_command, "visible_gpus", lambda: 1)
    ran = []
    monkeypatch.setattr(scale_command, "sweep", lambda *a, **k: ran.append(a))
    monkeypatch.setattr(scale_command, "traced_sweep", lambda *a, **k: ran.append(a))
    out = tmp_path / "sweep"
    code = main(["scale", "--model", "rnnlm", "--preset", "small", "--devices", "1,2", *explain, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "asks for 2 GPUs but 1 are visible" in err and err.count("\n") == 1
    assert not ran
