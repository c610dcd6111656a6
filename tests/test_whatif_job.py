"""A whole job's what-if computed rank by rank (``job.whatif.job_whatif``: each rank read in a worker, each step's
replay graph built from the ranks' rows in its window and replayed there) against ``whatif`` of the ranks merged
into one table, on the real rank pairs in tests/data: every figure of every step, for each kind of change."""

from __future__ import annotations

import dataclasses

import pytest

from fixtures import FIXTURES
from rnnprof.analyzers.critical_path import Dependencies
from rnnprof.analyzers.replay import (COMM, COMM_GROUP, DELAY, EVEN_HOST, EVEN_INPUT, EVEN_WORK, FAMILY, GRAPH_LAUNCH,
                                     MICRO_BATCHES, MOVE_LAYER, NO_COPIES, NO_SYNCS, OVERLAP, PREFETCH, SCALE,
                                     SCALE_HOST, Change, ChangeError, whatif)
from rnnprof.analyzers.replay.families import family_named
from rnnprof.analyzers.replay.fixes import RequestedChanges
from rnnprof.cli import main
from rnnprof.traces import load_events
from rnnprof.traces.rank_folder import job_of
from rnnprof.job.whatif import job_whatif

GLOO = ("torch-gloo-rank0.json.gz", "torch-gloo-rank1.json.gz")
SAMPLED = ("kineto-sampled-rank0.json.gz", "kineto-sampled-rank1.json.gz")
GLOO_CHANGES = [[Change(COMM, "", 0.5), Change(SCALE, "aten::add_", 0.5)],
                [Change(EVEN_HOST, ""), Change(EVEN_INPUT, "")],  # the latest rank found over the steps
                [Change(OVERLAP)],
                [Change(DELAY, "rank1", delay_ms=0.5, before=r"^Optimizer\.zero_grad#"),
                 Change(DELAY, "rank0", delay_ms=0.2)]]
# rank 1 of this pair runs a batched product (aten::bmm) rank 0 does not: taken out by name, and as the fix of PF001
EXTRA_OP = tuple(f"torch-extra-op-within-jitter/run/torch/rank{r}.json.gz" for r in (0, 1))
EXTRA_OP_CHANGES = [[Change(EVEN_WORK, "rank1")],
                    [Change(EVEN_HOST, ""), Change(EVEN_INPUT, ""), Change(EVEN_WORK, "")]]
FSDP = tuple(f"torch-gloo-fsdp/torch/rank{r}.json.gz" for r in (0, 1))
PP = tuple(f"torch-gloo-pp/torch/rank{r}.json.gz" for r in (0, 1))
HSDP = tuple(f"torch-gloo-hsdp-collectives-rank{r}.json.gz" for r in range(4))
FSDP_CHANGES = [[Change(COMM, "all-gather", 0.5)], [Change(PREFETCH), Change(COMM, "reduce-scatter", 0.0)]]
PP_CHANGES = [[Change(COMM, "send/recv", 0.2)], [Change(DELAY, "rank1", delay_ms=2.0)],
              [Change(MICRO_BATCHES, factor=8)], [Change(MOVE_LAYER, "2,2:3,1")]]  # the schedule's, from every operator
HSDP_CHANGES = [[Change(COMM, "", 0.5), Change(COMM, "reduce-scatter", 0.0)]]
SAMPLED_CHANGES = [[Change(NO_COPIES), Change(SCALE_HOST, "aten::mm", 0.0), Change(OVERLAP)],
                   [Change(FAMILY, family_named("gemm"), 0.5), Change(EVEN_HOST, "rank1")],
                   [Change(NO_SYNCS), Change(GRAPH_LAUNCH)]]


def _both(names, changes, jobs, steps=None):
    paths = [str(FIXTURES / n) for n in names]
    merged = whatif(load_events(paths), changes, Dependencies(), steps=steps)
    job, _, _ = job_whatif(job_of(paths), RequestedChanges(tuple(changes)), jobs=jobs,
                           choose=(lambda known: steps) if steps else None)
    return merged, job


@pytest.mark.parametrize("names, sets, jobs", [(GLOO, GLOO_CHANGES, 2), (SAMPLED, SAMPLED_CHANGES, 1),
                                                (EXTRA_OP, EXTRA_OP_CHANGES, 2), (FSDP, FSDP_CHANGES, 1),
                                                (PP, PP_CHANGES, 1), (HSDP, HSDP_CHANGES, 1)],
                         ids=["gloo-2-workers", "sampled-in-process", "extra-op-2-workers", "fsdp", "pipeline",
                              "hsdp-4-ranks"])
def test_a_jobs_replay_is_that_of_its_ranks_merged(names, sets, jobs):
    for changes in sets:
        merged, job = _both(names, changes, jobs)
        assert len(job.steps) == len(merged.steps) >= 2
        assert any(s.predicted_us != s.replayed_us for s in merged.steps)  # the changes change something
        for a, b in zip(merged.steps, job.steps):
            assert dataclasses.asdict(a) == dataclasses.asdict(b)
        assert (job.changed, job.notes, job.lacks) == (merged.changed, merged.notes, merged.lacks)


def test_a_jobs_process_groups_resolve_a_group_change_as_its_merged_ranks_do():
    """``--comm GROUP=F`` names a group by its ranks: the job's ranks list the groups they are in, the merged
    table the union of them; both resolve it to the same group and replay it alike."""
    paths = [str(FIXTURES / n) for n in FSDP]
    asked = RequestedChanges(groups=((COMM_GROUP, "1,0", 0.5),))
    table = load_events(paths)
    merged = whatif(table, asked.on(table), Dependencies())
    job, _, _ = job_whatif(job_of(paths), asked, jobs=1)
    assert job.changed == merged.changed == {"process group 0 x0.5": 100}
    assert [dataclasses.asdict(s) for s in job.steps] == [dataclasses.asdict(s) for s in merged.steps]


def test_a_step_selection_replays_those_steps_only():
    merged, job = _both(SAMPLED, [Change(COMM, "", 0.5)], 1, steps=[552])  # its steps: 551 and 552
    assert [s.step for s in job.steps] == [s.step for s in merged.steps] == [552]
    assert dataclasses.asdict(job.steps[0]) == dataclasses.asdict(merged.steps[0])


def test_a_jobs_changes_are_checked_against_its_ranks(capsys):
    paths = [str(FIXTURES / n) for n in GLOO]
    with pytest.raises(ChangeError, match="no rank 'rank7'"):
        job_whatif(job_of(paths), RequestedChanges((Change(EVEN_HOST, "rank7"),)), jobs=1)
    assert main(["whatif", *paths, "--scale", "no_such_op=0.5", "--jobs", "1"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_jobs_is_refused_for_one_trace(capsys):
    assert main(["whatif", str(FIXTURES / "kineto-event-sync.json.gz"), "--comm", "0.5", "--jobs", "2"]) == 2
    assert "--jobs applies to a job's rank files" in capsys.readouterr().err
