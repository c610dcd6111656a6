"""``report`` of a whole job through the job layer (``rnnprof.job.report``): every rank read apart, the report's
analyses combined, the timeline and the critical path of the typical step drawn from the parts the ranks kept,
gives the page ``analyze_run`` gives of the ranks merged into one table, on the committed jobs."""

from __future__ import annotations

import pytest

from fixtures import FIXTURES
from rnnprof.analyzers.run_report import analyze_run
from rnnprof.cli import main
from rnnprof.commands import job_flags
from rnnprof.commands.audit_inputs import audit_input
from rnnprof.commands.roofline import ONE_PROCESS
from rnnprof.inputs.dependencies import read_dependencies
from rnnprof.inputs.read import job_graphs, read_inputs
from rnnprof.job.report import job_run_report
from rnnprof.paths import shown
from rnnprof.reports.run_page import run_page

JOBS = {
    "gloo": ["torch-gloo-rank0.json.gz", "torch-gloo-rank1.json.gz"],
    "nccl-sampled": ["kineto-sampled-rank0.json.gz", "kineto-sampled-rank1.json.gz"],
    "hsdp": [f"torch-gloo-hsdp-collectives-rank{r}.json.gz" for r in range(4)],
    "two-faults": ["torch-two-faults/run"],
    "memory-held": ["torch-memory-held-from-step5/run"],
    "fsdp2-memory": ["torch-fsdp2-gloo/run"],
    "pipeline-memory": ["torch-gloo-pp"],
}


def _page(report) -> str:
    findings = report.findings
    return run_page(report, "job", [], findings, "" if findings is not None else report.findings_reason, {})


def _merged(paths: list[str]) -> str:
    """The reference: every rank in one table, the report's analyses run on it in this process."""
    return _page(_merged_report(paths))


def _merged_report(paths: list[str]):
    inputs = read_inputs(paths)
    graphs = inputs.graph_set
    report = analyze_run(", ".join(map(shown, paths)), inputs.events, inputs.events_reason,
                         user_graph=graphs.user if graphs else None,
                         runtime_graph=graphs.runtime if graphs else None, user_reason=inputs.user_graph_reason,
                         runtime_reason=inputs.runtime_graph_reason, audit_input=audit_input(inputs),
                         manifest=inputs.manifest, dependencies=read_dependencies(paths),
                         roofline_reason=ONE_PROCESS)
    return report


def _job(paths: list[str], jobs: int) -> str:
    return _page(_job_report(paths, jobs))


def _job_report(paths: list[str], jobs: int):
    folder, manifest = job_flags.ranks_of(paths)
    graphs = job_graphs(paths)
    (report, _), _, _ = job_run_report(folder, ", ".join(map(shown, paths)), manifest, read_dependencies(paths),
                                       user_reason=graphs.user_graph_reason,
                                       runtime_reason=graphs.runtime_graph_reason, roofline_reason=ONE_PROCESS,
                                       jobs=jobs)
    return report


@pytest.mark.parametrize("name", JOBS)
def test_a_jobs_report_through_the_job_layer_equals_the_report_of_its_ranks_merged(name):
    paths = [str(FIXTURES / p) for p in JOBS[name]]
    assert _job(paths, jobs=1) == _merged(paths)


@pytest.mark.parametrize("name", ["memory-held", "fsdp2-memory"])
def test_a_jobs_memory_leaves_out_the_blocks_any_rank_loses_the_frees_of(name):
    """Every device's memory as of the ranks merged, growth and step peaks included: a rank whose records miss no
    free of a size another rank's do leaves that size out too (FSDP2 on gloo: rank 1 loses 49,408-byte blocks,
    rank 0 those and 32,768-byte ones)."""
    paths = [str(FIXTURES / p) for p in JOBS[name]]
    merged = _merged_report(paths).memory
    assert merged is not None and merged.devices
    assert _job_report(paths, jobs=1).memory == merged


def test_a_jobs_report_made_in_worker_processes_is_the_same_page():
    paths = [str(FIXTURES / p) for p in JOBS["fsdp2-memory"]]
    assert _job(paths, jobs=2) == _merged(paths)


def test_report_of_a_run_directory_of_ranks_takes_jobs_and_refuses_it_for_a_sweep_or_one_trace(tmp_path, capsys):
    out = tmp_path / "r.html"
    run = FIXTURES / "torch-two-faults" / "run"
    assert main(["report", str(run), "-o", str(out), "--jobs", "2"]) == 0
    assert "rank1 arrives last at collectives" in out.read_text()  # the planted straggler, found in workers
    code = main(["report", str(FIXTURES / "kineto-1gpu-v100.json.gz"), "-o", str(out), "--force", "--jobs", "2"])
    assert code == 2 and "--jobs applies to a job's rank files" in capsys.readouterr().err


def test_the_timeline_and_critical_path_of_a_jobs_typical_step_ride_with_the_replays(monkeypatch):
    """They add no round of their own: a worker the replayed steps leave idle takes them (3 steps on 2 cores)."""
    from rnnprof.job import ranks

    rounds = []
    real_map = ranks.Workers.map

    def recorded(self, function, items, *args):
        items = list(items)
        if function is ranks.run_step:
            rounds.append([task.of_step.__name__ for task in items])
        return real_map(self, function, items, *args)

    monkeypatch.setattr(ranks.Workers, "map", recorded)
    report = _job_report([str(FIXTURES / p) for p in JOBS["gloo"]], jobs=1)
    assert report.timeline is not None and report.critical_path is not None and report.top_fixes is not None
    riding = [r for r in rounds if "timeline_of_step" in r or "path_of_step" in r]
    assert len(riding) == 1 and riding[0].count("timeline_of_step") == 1 and riding[0].count("path_of_step") == 1
    assert riding[0][0] == "savings_of_step", "after the replayed steps"
