"""A folder of Kineto rank files as the input of diff (each side), critical-path and report: the ranks are
loaded and merged in one process, checked like comm's whole job, and the folder's notes are shown."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest

from fixtures import FIXTURES
from rnnprof.cli import main

SAMPLED = [FIXTURES / "kineto-sampled-rank0.json.gz", FIXTURES / "kineto-sampled-rank1.json.gz"]


def _raw(path: Path) -> dict:
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as f:
        return json.load(f)


RAW = [_raw(p) for p in SAMPLED]


def _ranks() -> list[str]:
    return sorted(f"rank{raw['distributedInfo']['rank']}" for raw in RAW)


def _gpus() -> set[str]:
    return {f"rank{raw['distributedInfo']['rank']}/gpu:{e['args']['device']}" for raw in RAW
            for e in raw["traceEvents"] if e.get("cat") == "kernel"}


def _steps() -> list[int]:
    return sorted({int(e["name"].split("#")[1]) for raw in RAW for e in raw["traceEvents"]
                   if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#")})


@pytest.fixture
def folder(tmp_path) -> Path:
    job = tmp_path / "job"
    job.mkdir()
    for f in SAMPLED:
        shutil.copy(f, job / f.name)
    (job / "notes.json").write_text(json.dumps({"not": "a trace"}))
    return job


def _cli(capsys, *argv):
    code = main([*map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_critical_path_of_a_folder_joins_its_ranks(folder, capsys):
    code, out, err = _cli(capsys, "critical-path", folder, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["workers"] == _ranks() and [s["step"] for s in doc["steps"]] == _steps()
    assert all(s["edges"]["collective"] > 0 for s in doc["steps"])  # the ranks are joined
    assert "skipped 1 file(s) that are not Kineto traces: notes.json" in err
    code, files_out, _ = _cli(capsys, "critical-path", *SAMPLED, "--json")  # the same ranks given as files
    assert code == 0 and json.loads(files_out)["steps"] == doc["steps"]


def test_diff_of_a_folder_with_itself_and_with_one_of_its_ranks(folder, capsys):
    code, out, err = _cli(capsys, "diff", folder, folder, "--json")
    assert code == 0, err
    assert json.loads(out)["identical"] is True
    assert err.count("skipped 1 file(s) that are not Kineto traces: notes.json") == 2  # once per side
    code, out, err = _cli(capsys, "diff", folder, SAMPLED[0], "--json", "--top", "0")
    assert code == 0, err
    time = json.loads(out)["time"]
    only_a = {r["device"] for r in time["rows"] if r["b_us_per_step"] is None}
    rank1 = {g for g in _gpus() if g.startswith("rank1/")}
    assert rank1 and rank1 <= only_a


def test_report_of_a_folder_draws_a_bar_per_gpu_of_every_rank(folder, tmp_path, capsys):
    out = tmp_path / "job.html"
    code, _, err = _cli(capsys, "report", folder, "-o", out)
    assert code == 0, err
    page = out.read_text()
    specs = dict(re.findall(r'<script type="application/json" id="(spec-\d+)">(.*?)</script>', page, re.S))
    charts = {name: json.loads(specs[spec_id]) for name, spec_id in
              re.findall(r'<div class="chart" data-chart="([\w-]+)" data-spec="(spec-\d+)">', page)}
    assert {r["device"] for r in charts["breakdown"]["datasets"]["breakdown"]} == _gpus()
    assert "note: " in page and "notes.json" in page


def test_ranks_without_distributed_info_are_named_after_their_files(tmp_path, capsys):
    job = tmp_path / "job"
    job.mkdir()
    for rank, raw in enumerate(RAW):
        trace = {k: v for k, v in raw.items() if k != "distributedInfo"}
        (job / f"trace_{rank}.json").write_text(json.dumps(trace))
    code, out, err = _cli(capsys, "critical-path", job, "--json")
    assert code == 0, err
    assert json.loads(out)["workers"] == ["rank0", "rank1"]
    assert "no distributedInfo" in err and "trace_0.json" in err


@pytest.mark.parametrize("command", ["critical-path", "diff", "report"])
def test_a_folder_with_two_files_of_one_rank_is_one_line_exit_2(tmp_path, capsys, command):
    job = tmp_path / "job"
    job.mkdir()
    for name in ("a.json", "b.json"):
        (job / name).write_text(json.dumps(RAW[0]))
    argv = {"critical-path": [job], "diff": [job, SAMPLED[0]], "report": [job, "-o", tmp_path / "r.html"]}[command]
    code, out, err = _cli(capsys, command, *argv)
    assert code == 2 and out == ""
    assert "rank 0 appears in 2 files" in err and len(err.strip().splitlines()) == 1
