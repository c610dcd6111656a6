"""Flags refused before any work starts: options the chosen kind of `rnnprof trace` would ignore, and
bad workload flags of `trace` and `scale`, refused in one line without loading TensorFlow.

Each case runs ``rnnprof.cli.main`` in a fresh Python, so "without TensorFlow" is a fact about
``sys.modules`` there, not about whatever this test process imported before.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
PROBE = textwrap.dedent("""
    import json, sys
    from rnnprof.cli import main
    code = main(json.loads(sys.argv[1]))
    print(json.dumps({"code": code, "tensorflow": "tensorflow" in sys.modules}))
""")


def _cli(argv: list[str]) -> tuple[int, bool, str]:
    """(exit code, whether TensorFlow was imported, stderr) of ``rnnprof ARGV`` in a fresh Python."""
    # A refusal takes well under a second; a minute means the command went on to run a workload.
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv)], capture_output=True, text=True,
                          env=ENV, timeout=60)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result["code"], result["tensorflow"], done.stderr


SCRIPT = ["--", sys.executable, "train.py"]
ATTACH = ["--attach", "grpc://127.0.0.1:1"]


@pytest.mark.parametrize("mode, flags, named, mode_named", [
    # Workload flags mean nothing to a script or a running job.
    (SCRIPT, ["--model", "rnnlm"], "--model", "a script"),
    (SCRIPT, ["--devices", "4"], "--devices", "a script"),
    (SCRIPT, ["--include-warmup"], "--include-warmup", "a script"),
    (ATTACH, ["--units", "64"], "--units", "a running job"),
    (ATTACH, ["--max-input-size", "1G"], "--max-input-size", "a running job"),
    # The script's window flags mean nothing to a built-in workload or a running job.
    ([], ["--steps", "5"], "--steps", "a built-in workload"),
    ([], ["--skip-steps", "2"], "--skip-steps", "a built-in workload"),
    ([], ["--delay", "1"], "--delay", "a built-in workload"),
    (ATTACH, ["--steps", "5"], "--steps", "a running job"),
    # --trace-steps is the built-in workload's, --duration the running job's.
    (SCRIPT, ["--trace-steps", "2"], "--trace-steps", "a script"),
    (ATTACH, ["--trace-steps", "2"], "--trace-steps", "a running job"),
    ([], ["--duration", "5"], "--duration", "a built-in workload"),
    (SCRIPT, ["--duration", "5"], "--duration", "a script"),
    # Typed at its default value, a flag is still given, and still refused.
    ([], ["--steps", "3"], "--steps", "a built-in workload"),
    (ATTACH, ["--model", "nmt"], "--model", "a running job"),
])
def test_a_flag_the_mode_ignores_is_refused_in_one_line(tmp_path, mode, flags, named, mode_named):
    out = tmp_path / "run"
    # The mode's own arguments come last: after `--` everything belongs to the script.
    code, tensorflow, err = _cli(["trace", "--out", str(out), *flags, *mode])
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("rnnprof trace: error:"), err
    assert named in lines[0] and mode_named in lines[0]
    assert not tensorflow and not out.exists()


def test_an_abbreviated_flag_is_refused_naming_the_flag_in_full(tmp_path):
    code, _, err = _cli(["trace", "--out", str(tmp_path / "run"), "--mod", "rnnlm", *ATTACH])
    assert code == 2 and "unrecognized arguments: --mod" in err and "did you mean --model?" in err


@pytest.mark.parametrize("mode, expected", [
    (SCRIPT[:1] + ["bash", "train.sh"], "can only run Python"),
    (["--attach", "http://x"], "grpc://HOST:PORT"),
])
def test_defaults_of_other_modes_are_not_refused(tmp_path, mode, expected):
    """Every option has a default; only typed ones count, so the mode's own check is what speaks."""
    code, _, err = _cli(["trace", "--out", str(tmp_path / "run"), *mode])
    assert code == 2 and expected in err and "does not apply" not in err, err


@pytest.mark.parametrize("argv, message", [
    (["scale", "--model", "nmt", "--plant", "softmax-on-device0"], "applies to --model rnnlm"),
    (["scale", "--attention", "luong", "--encoder", "fused"], "loop decoder"),
    (["scale", "--devices", "1,2", "--batch-scaling", "total", "--batch-size", "1"], "smaller than --devices 2"),
    (["scale", "--learning-rate", "0"], "--learning-rate must be a positive number"),
    (["scale", "--preset", "small"], "--preset applies to --model rnnlm"),
    (["scale", "--model", "rnnlm", "--data", "/nonexistent/corpus.txt"], "no such file"),
    (["trace", "--model", "nmt", "--plant", "softmax-on-device0"], "applies to --model rnnlm"),
    (["trace", "--attention", "bahdanau"], "loop decoder"),
    (["trace", "--batch-scaling", "total", "--batch-size", "1", "--devices", "2"], "smaller than --devices 2"),
    (["trace", "--model", "rnnlm", "--data", "/nonexistent/corpus.txt"], "no such file"),
])
def test_bad_workload_flags_are_refused_before_tensorflow_loads(tmp_path, argv, message):
    code, tensorflow, err = _cli([*argv, *(["--out", str(tmp_path / "run")] if argv[0] == "trace" else [])])
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not tensorflow, "TensorFlow was imported before the flags were checked"
    assert not (tmp_path / "run").exists()
