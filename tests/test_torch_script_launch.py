"""What `rnnprof trace -- COMMAND` starts, and how the bootstrap picks a framework; no script is run here."""

import sys
import textwrap
from pathlib import Path

import pytest

from rnnprof.cli import main
from rnnprof.errors import UsageError
from rnnprof.recording.imports import when_imported
from processes import left_running
from rnnprof.recording.launch import BOOTSTRAP, LAUNCHER, launch_command
from rnnprof.recording.torchrun_launch import torchrun_argv
from rnnprof.recording.script import script_framework

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("import torch\n")
    return str(path)


def test_python_runs_the_bootstrap_on_the_same_script(script):
    launch = launch_command(["python3", script, "--lr", "1"])
    assert launch.argv == ["python3", "-m", BOOTSTRAP, script, "--lr", "1"] and not launch.torchrun


def test_torchrun_runs_through_the_launcher_on_its_own_interpreter_with_its_options_as_given(script):
    launch = launch_command([TORCHRUN, "--nproc-per-node", "2", "--standalone", script, "--nproc-per-node", "9"])
    assert launch.torchrun
    assert launch.argv == [sys.executable, "-m", LAUNCHER, sys.executable, "--nproc-per-node", "2", "--standalone",
                           script, "--nproc-per-node", "9"]
    module = launch_command([sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", script])
    assert module.argv == [sys.executable, "-m", LAUNCHER, sys.executable, "--nnodes", "1", script]


def test_torchrun_keeps_its_options_and_runs_the_bootstrap_as_every_ranks_program(script):
    assert torchrun_argv(sys.executable, ["--nproc-per-node", "2", "--standalone", script, "--nproc-per-node",
                                          "9"]) == [
        "--nproc-per-node", "2", "--standalone", "--no-python", sys.executable, "-u", "-m", BOOTSTRAP, script,
        "--nproc-per-node", "9"]  # the script's own flag kept


def test_torchrun_module_flag_becomes_the_bootstraps(script):
    assert torchrun_argv(sys.executable, ["-m", "--nnodes", "1", "pkg.train", "-m", "x"]) == [
        "--nnodes", "1", "--no-python", sys.executable, "-u", "-m", BOOTSTRAP, "-m", "pkg.train", "-m", "x"]


@pytest.mark.parametrize("options, message", [
    (["--no-python", "SCRIPT"], "not Python"),
    (["--run-path", "SCRIPT"], "--run-path"),
    (["--nproc-per-node", "2", "missing.py"], "'missing.py' does not exist"),
    (["--nproc-per-node"], "torchrun: "),
])
def test_torchrun_options_that_cannot_be_captured_are_refused(script, options, message):
    with pytest.raises(UsageError, match=message):
        torchrun_argv(sys.executable, [script if o == "SCRIPT" else o for o in options])


@pytest.mark.parametrize("command, message", [
    (["bash", "SCRIPT"], "can only run Python or torchrun"),
    (["python3"], "no script after the interpreter"),
    (["/nowhere/torchrun", "SCRIPT"], "'/nowhere/torchrun' not found"),
])
def test_commands_that_cannot_be_captured_are_refused(script, command, message):
    with pytest.raises(UsageError, match=message):
        launch_command([script if c == "SCRIPT" else c for c in command])


@pytest.mark.parametrize("options, message", [
    (["--no-python", "train.sh"], "--no-python"),
    (["--nproc-per-node"], "torchrun: argument --nproc-per-node"),
    (["--nproc-per-node", "2", "missing.py"], "'missing.py' does not exist"),
])
def test_a_refused_torchrun_command_is_one_line_exit_2_and_writes_nothing(tmp_path, capfd, options, message):
    """The launcher reads the options with torchrun's parser before rnnprof opens the run: a refusal is its one
    line, exit 2, no run directory, and no process left."""
    code = main(["trace", "--out", str(tmp_path / "run"), "--", TORCHRUN, *options])
    err = capfd.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert err.startswith("rnnprof trace: error: ") and "Traceback" not in err
    assert not (tmp_path / "run").exists()
    assert left_running(grace_s=5.0) == {}


def test_a_run_that_cannot_be_opened_runs_nothing(tmp_path, script, capfd):
    """torchrun accepts the options, then rnnprof cannot create the run directory (--out lies under a file): one
    line, exit 2, and the launcher ends without starting a rank."""
    (tmp_path / "file").write_text("mine")
    code = main(["trace", "--out", str(tmp_path / "file" / "run"), "--", TORCHRUN, "--nproc-per-node", "2",
                 script])
    err = capfd.readouterr().err
    assert code == 2 and "cannot create the run directory" in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and (tmp_path / "file").read_text() == "mine"
    assert left_running(grace_s=5.0) == {}


@pytest.mark.parametrize("source, framework", [
    ("import torch\n", "torch"),
    ("from torch.nn import functional as F\n", "torch"),
    ("def main():\n    import torch.distributed as dist\n", "torch"),
    ("import tensorflow as tf\n", "tensorflow"),
    ("from keras import layers\n", "tensorflow"),
    ("import torch\nimport tensorflow\n", "tensorflow"),
    ("import numpy\nfrom . import torch\n", None),  # a relative import is the script's own module
    ("import mylib\n", None),
    ("this is not python", None),
])
def test_the_framework_is_read_from_the_scripts_imports(tmp_path, source, framework):
    path = tmp_path / "s.py"
    path.write_text(source)
    assert script_framework([str(path)]) == framework


def test_the_scripts_own_modules_are_read_too(tmp_path):
    (tmp_path / "model.py").write_text("import torch.nn\n")
    (tmp_path / "helpers").mkdir()
    (tmp_path / "helpers" / "__init__.py").write_text("import model\n")
    (tmp_path / "loop.py").write_text("import loop\nimport helpers\n")  # imports itself: read once
    (tmp_path / "s.py").write_text("import os\nimport loop\n")
    assert script_framework([str(tmp_path / "s.py")]) == "torch"
    (tmp_path / "model.py").write_text("import numpy\n")
    assert script_framework([str(tmp_path / "s.py")]) is None


def test_a_module_is_read_from_its_file(tmp_path, monkeypatch):
    (tmp_path / "pkg_under_test").mkdir()
    (tmp_path / "pkg_under_test" / "__init__.py").write_text("")
    (tmp_path / "pkg_under_test" / "train.py").write_text("import torch\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert script_framework(["-m", "pkg_under_test.train"]) == "torch"


def test_when_imported_runs_after_the_module_body_once(tmp_path, monkeypatch):
    (tmp_path / "watched_mod.py").write_text(textwrap.dedent("""
        import sys
        sys.modules[__name__].ready = True
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    when_imported("watched_mod", lambda module: seen.append(module.ready))
    try:
        import watched_mod  # noqa: F401
        import importlib

        importlib.reload(watched_mod)
    finally:
        sys.modules.pop("watched_mod", None)
    assert seen == [True]


def test_when_imported_can_be_cancelled(tmp_path, monkeypatch):
    (tmp_path / "unwatched_mod.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    cancel = when_imported("unwatched_mod", seen.append)
    cancel()
    try:
        import unwatched_mod  # noqa: F401
    finally:
        sys.modules.pop("unwatched_mod", None)
    assert seen == []


def test_delay_is_refused_for_torchrun_before_anything_runs(tmp_path, script, capsys):
    code = main(["trace", "--out", str(tmp_path / "run"), "--delay", "2", "--", TORCHRUN, script])
    err = capsys.readouterr().err
    assert code == 2 and err.strip().splitlines() == [
        "rnnprof trace: error: --delay applies to TensorFlow scripts; a PyTorch script's window is set by "
        "--skip-steps and --steps"]
    assert not (tmp_path / "run").exists()


def test_a_rank_that_died_without_a_word_marks_the_run_and_is_named(tmp_path):
    from rnnprof.recording import ranks

    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "rank0.json.gz").write_bytes(b"")
    common = {"world_size": 2, "steps": [], "steps_run": 3, "backend": "gloo"}
    ranks.write_record(tmp_path, {**common, "rank": 0, "status": "complete", "trace": "torch/rank0.json.gz",
                                  "exit_code": 0, "ended": 1.0}, ["torchrun", "x.py"])
    running = ranks.write_record(tmp_path, {**common, "rank": 1, "status": "running", "trace": None},
                                 ["torchrun", "x.py"])
    assert running["status"] == "running" and running["captured"]["kineto"] == ["torch/rank0.json.gz"]
    records = ranks.read_records(tmp_path)
    assert ranks.exit_code_of(records, -9) == -9  # the rank left no exit code of its own
    final = ranks.combine(tmp_path, ["torchrun", "x.py"], exit_code=-9)
    assert final["status"] == "interrupted" and final["exit_code"] == -9 and final["world_size"] == 2
    assert final["error"] == f"rank 1: {ranks.DIED}"
    assert [r["status"] for r in final["ranks"]] == ["complete", "interrupted"]


def test_rnnprof_itself_never_imports_torch_for_torchrun(tmp_path):
    """torchrun's parser runs in the launcher: rnnprof's own process, which waits out the whole job, stays without
    torch. Here the launcher imports torch to read the options and refuses them; rnnprof never needs it."""
    import subprocess

    probe = ("import sys\nfrom rnnprof.cli import main\n"
             f"code = main(['trace', '--out', {str(tmp_path / 'run')!r}, '--', {TORCHRUN!r}, '--no-python', 'x.sh'])\n"
             "print(code, 'torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["2", "False"], done.stdout + done.stderr
    assert "--no-python" in done.stderr and not (tmp_path / "run").exists()
