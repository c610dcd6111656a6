"""``audit`` of a whole job through the job layer (``rnnprof.job.audit``): every rank read apart, its figures,
memory, launches and comm combined, the critical path and the replays of the fixes run step by step over the parts
the ranks kept, gives the audit the rules give the ranks merged into one table, on every committed job."""

from __future__ import annotations

import json

import pytest

from fixtures import FIXTURES
from rnnprof.analyzers.audit import audit
from rnnprof.analyzers.replay.audit_savings import audit_replayer, replayed_savings
from rnnprof.cli import main
from rnnprof.commands import job_flags
from rnnprof.commands.audit_inputs import read_audit_input
from rnnprof.inputs.dependencies import read_dependencies
from rnnprof.job.audit import job_audit
from rnnprof.traces.left_out import left_out_of

JOBS = {
    "gloo": ["torch-gloo-rank0.json.gz", "torch-gloo-rank1.json.gz"],
    "gloo-balanced": ["torch-gloo-balanced-rank0.json.gz", "torch-gloo-balanced-rank1.json.gz"],
    "nccl-sampled": ["kineto-sampled-rank0.json.gz", "kineto-sampled-rank1.json.gz"],
    "hsdp": [f"torch-gloo-hsdp-collectives-rank{r}.json.gz" for r in range(4)],
    "fsdp2": ["torch-gloo-fsdp2-collectives-rank0.json.gz", "torch-gloo-fsdp2-collectives-rank1.json.gz"],
    "pipeline": ["torch-gloo-pp-collectives-rank0.json.gz", "torch-gloo-pp-collectives-rank1.json.gz"],
    "two-faults": ["torch-two-faults/run"],
    "two-faults-within-jitter": ["torch-two-faults-within-jitter/run"],
    "extra-op-within-jitter": ["torch-extra-op-within-jitter/run"],
    "waiting-for-cores": ["torch-control-waiting-for-cores/run"],
    "contention": ["torch-contention-control/run"],
    "memory-held": ["torch-memory-held-from-step5/run"],
    "fsdp2-memory": ["torch-fsdp2-gloo/run"],
    "pipeline-memory": ["torch-gloo-pp"],
}


def _merged(paths: list[str]) -> dict:
    """The reference: every rank in one table, the rules and the replays run on it in this process."""
    given = read_audit_input(paths)
    result = replayed_savings(audit(given), audit_replayer(given.events, read_dependencies(paths), given.classes))
    return result.as_dict(left_out_of(given.events.metadata))


def _job(paths: list[str], jobs: int) -> dict:
    folder, manifest = job_flags.ranks_of(paths)
    files = [str(f.path) for f in folder.files] if manifest is None else paths
    result, _, left_out = job_audit(folder, manifest, read_dependencies(files), jobs=jobs)
    return result.as_dict(left_out_of(left_out))


@pytest.mark.parametrize("name", JOBS)
def test_a_jobs_audit_through_the_job_layer_equals_the_audit_of_its_ranks_merged(name):
    paths = [str(FIXTURES / p) for p in JOBS[name]]
    expected = _merged(paths)
    assert expected["findings"], "a job with findings to compare"
    assert _job(paths, jobs=1) == expected


@pytest.mark.parametrize("name", ["two-faults", "fsdp2-memory"])
def test_ranks_audited_in_worker_processes_give_the_same_audit(name):
    """The ranks' figures, memory and parts travel from worker processes (the memory's second reading of a rank
    whose records miss fewer frees than the job's too) and the steps' replays run there."""
    paths = [str(FIXTURES / p) for p in JOBS[name]]
    assert _job(paths, jobs=2) == _merged(paths)


def test_audit_of_a_rank_folder_goes_through_the_job_layer_and_says_what_the_job_lacks(tmp_path, capsys):
    folder = tmp_path / "job"
    folder.mkdir()
    for name in JOBS["nccl-sampled"]:
        (folder / name).write_bytes((FIXTURES / name).read_bytes())
    assert main(["audit", str(folder), "--json", "--fail-on", "never", "--jobs", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any("2 of the job's 128 ranks are given" in n for n in doc["input_notes"])
    assert {k: doc[k] for k in ("findings", "noise", "top_fixes")} == \
        {k: v for k, v in _merged([str(folder / n) for n in JOBS["nccl-sampled"]]).items()
         if k in ("findings", "noise", "top_fixes")}


def test_jobs_flag_is_refused_for_input_that_is_no_job(capsys):
    code = main(["audit", str(FIXTURES / "kineto-1gpu-v100.json.gz"), "--jobs", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "--jobs applies to a job's rank files" in err


def test_replayed_steps_that_would_leave_workers_waiting_are_replayed_in_pieces_with_the_same_savings(monkeypatch):
    """6 replayed steps on 4 workers leave 2 idle in the last wave: each of the last 2 steps' sets of changes is
    split over two tasks, which those workers take, instead of 2 workers replaying them all while 2 wait; the
    savings stay those of the ranks merged (the tasks run here in one process, as 4 workers would)."""
    from rnnprof.job import ranks

    rounds = []
    real_map = ranks.Workers.map

    def recorded(self, function, items, *args):
        items = list(items)
        if function is ranks.run_step:
            rounds.append([(t.step, len(t.context[2])) for t in items if t.of_step.__name__ == "savings_of_step"])
        return real_map(self, function, items, *args)

    monkeypatch.setattr(ranks.Workers, "map", recorded)
    monkeypatch.setattr(ranks.JobRun, "workers", property(lambda self: 4))
    paths = [str(FIXTURES / p) for p in JOBS["two-faults"]]
    assert _job(paths, jobs=1) == _merged(paths)
    first = rounds[[len(r) > 0 for r in rounds].index(True)]  # its sets: one per finding whose fix replays
    steps = [s for s, _ in first]
    assert len(first) == 8 and len(set(steps)) == 6 and steps[4] == steps[5] != steps[6] == steps[7]
    sets = {n for _, n in first[:4]}
    assert len(sets) == 1 and sets.pop() == first[4][1] + first[5][1] == first[6][1] + first[7][1] >= 2
    assert min(n for _, n in first[4:]) >= 1
