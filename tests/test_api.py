"""The Python API: every command's headline figure is reachable from ``rnnprof.open`` and equals its ``--json``
value, the document ``to_json`` gives is the command's, frames carry the same figures, a run's traces are read
once for all its analyses, errors are the command line's, and ``import rnnprof`` stays light."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
from rich.console import Console

import rnnprof
from rnnprof.cli import main
from rnnprof.errors import InputError, UsageError
from rnnprof.traces import kineto

from fixtures import FIXTURES

TWO_FAULTS = FIXTURES / "torch-two-faults" / "run"
GLOO = [FIXTURES / "torch-gloo-rank0.json.gz", FIXTURES / "torch-gloo-rank1.json.gz"]
HANG = sorted((FIXTURES / "hang" / "data").iterdir())


def _cli(*argv) -> tuple[str, dict]:
    """``rnnprof ARGV --json``'s stdout and its document, run in this process."""
    out = io.StringIO()
    code = main([*map(str, argv), "--json"], console=Console(file=out, width=200))
    assert code in (0, 1), f"rnnprof {' '.join(map(str, argv))} exited {code}"  # 1: audit's findings
    return out.getvalue(), json.loads(out.getvalue())


# (command, its inputs, the CLI's flags, the API's call, the headline figure from the result's typed fields, the
# same figure from the --json document, and from the result's frames)
CASES = [
    ("comm", [TWO_FAULTS], [], lambda run: run.comm(),
     lambda r: r.report.devices[1].total.communication_us,
     lambda d: d["devices"][1]["total"]["communication_us"],
     lambda f: f["devices"]["total.communication_us"][1]),
    ("comm", GLOO, ["--per-step"], lambda run: run.comm(per_step=True),
     lambda r: r.report.devices[0].steps[r.report.steps[0]].idle_us,
     lambda d: d["devices"][0]["steps"][str(d["steps"][0])]["idle_us"],
     lambda f: f["steps"]["idle_us"][0]),
    ("count-ops", [TWO_FAULTS], [], lambda run: run.count_ops(),
     lambda r: r.report.kernels.per_step(r.report.kernels.devices[0].cpu_kernels),
     lambda d: d["kernels"]["devices"][0]["cpu_kernels"] / len(d["kernels"]["steps"]),
     lambda f: f["kernels"]["cpu_kernels_per_step"][0]),
    ("count-ops", [FIXTURES / "tf-run-nmt-tiny"], [], lambda run: run.count_ops(),
     lambda r: r.report.kernels.devices[0].cpu_kernels,
     lambda d: d["kernels"]["devices"][0]["cpu_kernels"],
     lambda f: f["kernels"]["cpu_kernels"][0]),
    ("critical-path", [TWO_FAULTS], [], lambda run: run.critical_path(),
     lambda r: r.report.steps[2].length_us,
     lambda d: d["steps"][2]["length_us"],
     lambda f: f["steps"]["length_us"][2]),
    ("critical-path", [FIXTURES / "kineto-simple-add.json.gz"], [], lambda run: run.critical_path(),
     lambda r: r.report.steps[0].by_class["host"],
     lambda d: d["steps"][0]["by_class"]["host"],
     lambda f: f["shares"].set_index(["by", "key"]).loc[("class", "host"), "us"]),
    ("whatif", [TWO_FAULTS], ["--even-host", "rank1"], lambda run: run.whatif(even_host=["rank1"]),
     lambda r: r.report.median("predicted_us"),
     lambda d: d["median"]["predicted_us"],
     lambda f: f["steps"]["predicted_us"].median()),
    ("memory", [FIXTURES / "kineto-h200-gpu-checks.json.gz"], [], lambda run: run.memory(),
     lambda r: r.report.devices[0].peak.allocated,
     lambda d: d["devices"][0]["peak"]["allocated"],
     lambda f: f["devices"]["peak_allocated_bytes"][0]),
    ("roofline", [FIXTURES / "kineto-h100-bert-small-shapes.json.gz"], [], lambda run: run.roofline(),
     lambda r: r.reports[0][1].steps[0].tflops_per_s,
     lambda d: d["ranks"][0]["steps"][0]["tflops_per_s"],
     lambda f: f["steps"]["tflops_per_s"][0]),
    ("audit", [TWO_FAULTS], [], lambda run: run.audit(),
     lambda r: (r.audit.findings[0].rule, r.audit.findings[0].subject.rank, round(r.audit.findings[0].saving_us / 1000, 3)),
     lambda d: (d["findings"][0]["rule"], d["findings"][0]["subject"]["rank"], d["findings"][0]["saving_ms"]),
     lambda f: tuple(f["findings"].loc[0, ["rule", "rank", "saving_ms"]])),
    ("hang", HANG, [], lambda run: run.hang(),
     lambda r: (r.verdict.culprits[0].rank, r.verdict.culprits[0].where),
     lambda d: (d["culprits"][0]["rank"], d["culprits"][0]["where"]),
     lambda f: (f["culprits"]["rank"][0], f["culprits"]["where"][0])),
]


@pytest.mark.parametrize("command, paths, flags, call, typed, in_json, in_frames", CASES,
                         ids=[f"{c[0]}:{c[1][0].name}" for c in CASES])
def test_each_commands_headline_figure_from_the_api_equals_its_json(command, paths, flags, call, typed, in_json,
                                                                    in_frames):
    text, document = _cli(command, *paths, *flags)
    result = call(rnnprof.open(paths if len(paths) > 1 else paths[0]))
    assert result.COMMAND == command
    assert result.to_json() + "\n" == text  # the very text the command prints
    figure = in_json(document)
    assert figure not in (None, 0, ()), f"{command}: a headline of nothing proves nothing"
    assert typed(result) == pytest.approx(figure) if isinstance(figure, float) else typed(result) == figure
    frames = result.to_frames()
    assert in_frames(frames) == pytest.approx(figure) if isinstance(figure, float) else in_frames(frames) == figure
    assert "<table" in result._repr_html_()


def test_diff_of_two_runs_is_the_commands():
    other = FIXTURES / "torch-two-faults-within-jitter" / "run"
    text, document = _cli("diff", TWO_FAULTS, other)
    result = rnnprof.open(TWO_FAULTS).diff(other)
    assert result.to_json() + "\n" == text
    row = document["time"]["rows"][0]
    assert result.to_frames()["time"]["delta_us_per_step"][0] == pytest.approx(row["delta_us_per_step"])
    assert row["delta_us_per_step"] != 0


def test_a_run_reads_its_traces_once_for_all_its_analyses(monkeypatch):
    parsed = []
    real = kineto.load

    def counting(path, *args, **kwargs):
        parsed.append(path.name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(kineto, "load", counting)
    run = rnnprof.open(TWO_FAULTS)
    comm = run.comm()
    assert sorted(parsed) == ["rank0.json.gz", "rank1.json.gz"]
    run.audit(), run.critical_path(), run.comm(per_step=True)
    assert sorted(parsed) == ["rank0.json.gz", "rank1.json.gz"], "a second analysis read the traces again"
    assert run.comm().to_json() == comm.to_json()  # what was kept is what was read: the same figures
    rnnprof.open(TWO_FAULTS).comm()  # another Run reads them again
    assert len(parsed) == 4


def test_a_jobs_rank_files_are_read_once_too(monkeypatch):
    parsed = []
    real = kineto.load
    monkeypatch.setattr(kineto, "load", lambda path, *a, **k: parsed.append(path.name) or real(path, *a, **k))
    run = rnnprof.open(GLOO)
    run.comm(), run.critical_path(), run.whatif(even_host=True)
    assert sorted(parsed) == ["torch-gloo-rank0.json.gz", "torch-gloo-rank1.json.gz"]


def test_errors_are_the_command_lines_one_line_errors(tmp_path, capsys):
    with pytest.raises(InputError) as missing:
        rnnprof.open(tmp_path / "nope")
    assert str(missing.value) == f"{tmp_path / 'nope'}: does not exist (expected a run directory, trace files or " \
                                 "a folder of rank files)"
    no_memory = FIXTURES / "kineto-simple-add.json.gz"
    assert main(["memory", str(no_memory)]) == 2
    said = capsys.readouterr().err.strip()
    with pytest.raises(InputError) as raised:
        rnnprof.open(no_memory).memory()
    assert said == f"rnnprof memory: error: {raised.value}"
    with pytest.raises(UsageError, match="no change given"):
        rnnprof.open(TWO_FAULTS).whatif()
    with pytest.raises(UsageError, match="--kernel-wait-us"):
        rnnprof.open(TWO_FAULTS).comm(kernel_wait_us=-1)
    with pytest.raises(TypeError):
        rnnprof.open(TWO_FAULTS).comm(per_stpe=True)


def test_import_rnnprof_loads_no_framework_and_no_analysis():
    code = ("import sys, rnnprof\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'torch', 'pandas', 'numpy')\n"
            "      or m.startswith(('rnnprof.api', 'rnnprof.analyzers', 'rnnprof.traces'))))\n"
            "print(callable(rnnprof.open), rnnprof.Run.__name__)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "True Run"]


def test_the_tensorboard_tab_shows_what_a_notebook_shows():
    from rnnprof.api import summary
    from rnnprof.tensorboard_plugin.plugin import tab_page

    page = tab_page(TWO_FAULTS)
    assert page == rnnprof.open(TWO_FAULTS)._repr_html_()  # one rendering, the notebook's and the tab's
    assert page.index("PF001") < page.index('data-chart="step-split"') < page.index('data-chart="memory"')
    assert "share of the path" in page and "<svg" in page and "<script" not in page

