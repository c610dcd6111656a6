"""Installing as users do: TensorFlow through an extra, and a clear line where it is missing."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

from fixtures import FIXTURES

REPO = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _installed(requirements: list[str], extra: str | None, machine: str, system: str = "linux") -> set[str]:
    """Names (with extras) of the requirements pip would install on that platform."""
    env = default_environment()
    env.update(platform_machine=machine, sys_platform=system, extra=extra or "")
    chosen = set()
    for text in requirements:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate(env):
            chosen.add(req.name + (f"[{','.join(sorted(req.extras))}]" if req.extras else ""))
    return chosen


def test_the_base_install_has_no_tensorflow_so_the_cpu_and_gpu_builds_never_collide():
    for machine in ("x86_64", "aarch64", "arm64"):
        assert not {n for n in _installed(PROJECT["dependencies"], None, machine) if n.startswith("tensorflow")}


def test_cpu_extra_is_tensorflow_cpu_on_x86_and_plain_tensorflow_on_arm():
    cpu = PROJECT["optional-dependencies"]["cpu"]
    assert _installed(cpu, "cpu", "x86_64") == {"tensorflow-cpu"}
    assert _installed(cpu, "cpu", "aarch64") == {"tensorflow"}
    assert _installed(cpu, "cpu", "arm64", "darwin") == {"tensorflow"}


def test_gpu_extra_is_tensorflow_with_cuda_on_linux_x86():
    gpu = PROJECT["optional-dependencies"]["gpu"]
    assert _installed(gpu, "gpu", "x86_64") == {"tensorflow[and-cuda]"}


def test_nvtx_stays_a_base_dependency():
    assert "nvtx" in _installed(PROJECT["dependencies"], None, "x86_64")


def _without_tensorflow(*argv: str) -> subprocess.CompletedProcess:
    """rnnprof in a fresh interpreter where ``import tensorflow`` fails as it does when it is not installed."""
    code = ("import sys; sys.modules['tensorflow'] = None\n"
            "from rnnprof.cli import main\n"
            f"sys.exit(main({list(argv)!r}))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)


def test_training_without_tensorflow_is_one_line_naming_the_extras():
    result = _without_tensorflow("scale", "--model", "rnnlm", "--devices", "1", "--warmup", "0", "--batches", "1")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "TensorFlow" in lines[0] and "rnnprof[cpu]" in lines[0] and "rnnprof[gpu]" in lines[0]


def test_reading_an_xspace_without_tensorflow_is_one_line_naming_the_extras(tmp_path):
    # Any bytes named .xplane.pb: the proto module is looked up before the file is parsed.
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(b"\x0a\x0b\x12\x09/host:CPU")
    result = _without_tensorflow("comm", str(path))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "rnnprof[cpu]" in lines[0], result.stderr


def test_trace_analyses_work_without_tensorflow():
    result = _without_tensorflow("comm", str(FIXTURES / "kineto-2rank-nccl-rank0.json.gz"), "--json")
    assert result.returncode == 0, result.stderr
    assert '"devices"' in result.stdout


def test_torch_is_an_extra_pinned_to_one_release_and_part_of_the_test_extra():
    extras = PROJECT["optional-dependencies"]
    for name in ("torch", "test"):
        pins = [Requirement(r) for r in extras[name] if Requirement(r).name == "torch"]
        assert [str(r.specifier) for r in pins] == ["==2.13.*"], name
    assert "torch" not in {Requirement(r).name for r in PROJECT["dependencies"]}
