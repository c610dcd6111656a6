"""The job layer (``rnnprof.job.ranks``) as an analysis to come would use it: a function of one rank and a reduce
(one round), or parts kept of each rank and a function of one step over them (two rounds), give what the same
computation over the ranks merged into one table gives; the scratch folder of the parts goes when the analysis
ends, whether it ends well or not."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from fixtures import FIXTURES
from rnnprof.analyzers.critical_path.job import RankPart
from rnnprof.errors import UsageError
from rnnprof.events import EventTable, Kind
from rnnprof.job.ranks import JobRun, map_reduce
from rnnprof.traces import load_events
from rnnprof.traces.rank_folder import job_of

SAMPLED = [str(FIXTURES / f"kineto-sampled-rank{r}.json.gz") for r in (0, 1)]


def events_per_worker(table: EventTable, kind: Kind) -> Counter:
    """A function of one rank: its events of ``kind``, by the worker of their device."""
    return Counter(table.devices[d].worker for d in table.device[table.kind == kind].tolist())


def spans_kept(table: EventTable, options: None):
    """The rank's times kept as a part, and its steps."""
    arrays = {"ts": table.ts, "end": table.ts + table.dur, "step": table.step}
    return {"times": RankPart(arrays, table.strings, table.devices)}, [int(s) for s in table.steps()]


def step_span(parts, context: str, step: int):
    """A function of one step over every rank's kept part: the step's first start and last end in the job, and
    where the parts were read from."""
    if context == "fail":
        raise UsageError("a step's task failed")
    starts, ends = [], []
    for kept in parts:
        times = kept["times"].arrays
        rows = np.flatnonzero(np.asarray(times["step"]) == step)
        starts.append(float(np.asarray(times["ts"][rows]).min()))
        ends.append(float(np.asarray(times["end"][rows]).max()))
    return (min(starts), max(ends)), Path(parts[0]["times"].arrays["ts"].path).parent


def test_a_function_of_a_rank_and_a_reduce_give_the_figure_of_the_ranks_merged():
    done = []
    report, notes, left_out = map_reduce(job_of(SAMPLED), events_per_worker, lambda counts: sum(counts, Counter()),
                                         Kind.KERNEL, jobs=1, on_done=lambda k, n: done.append((k, n)))
    merged = load_events(SAMPLED)
    expected = events_per_worker(merged, Kind.KERNEL)
    assert report == expected and set(expected) == {"rank0", "rank1"} and min(expected.values()) > 0
    assert done == [(1, 2), (2, 2)]
    assert report != events_per_worker(merged, Kind.HOST_OP), "the options reach the function of a rank"


def test_parts_kept_of_each_rank_give_each_steps_figure_over_the_ranks_merged():
    merged = load_events(SAMPLED)
    with JobRun(job_of(SAMPLED), jobs=1) as job:
        steps = job.ranks(spans_kept, keep=True)
        assert steps[0] == steps[1] and len(steps[0]) >= 2
        found = job.steps(step_span, "", steps[0])
    for step, (span, folder) in zip(steps[0], found):
        rows = merged.step == step
        assert span == (float(merged.ts[rows].min()), float((merged.ts + merged.dur)[rows].max()))
        assert not folder.exists(), "the scratch folder is removed when the analysis ends"


def test_the_scratch_folder_goes_when_a_step_fails_too(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the scratch folder is made
    with pytest.raises(UsageError, match="a step's task failed"):
        with JobRun(job_of(SAMPLED), jobs=1) as job:
            steps = job.ranks(spans_kept, keep=True)
            (scratch,) = tmp_path.iterdir()
            # two files a rank, whatever its parts hold (removing each file of a large job's scratch costs time)
            assert sorted(p.name for p in scratch.iterdir()) == ["rank0.json", "rank0.parts", "rank1.json",
                                                                "rank1.parts"]
            job.steps(step_span, "fail", steps[0])
    assert list(tmp_path.iterdir()) == []


def test_a_call_kept_for_later_runs_with_the_next_round_of_steps_or_when_its_result_is_asked():
    merged = load_events(SAMPLED)
    with JobRun(job_of(SAMPLED), jobs=1) as job:
        steps = job.ranks(spans_kept, keep=True)[0]
        rounds = []
        real_map = job._workers.map
        job._workers.map = lambda function, items, *a: rounds.append(len(items)) or real_map(function, items, *a)
        kept = job.later(step_span, "", steps[-1])
        (span, _), = job.steps(step_span, "", steps[:1])
        assert rounds == [2] and kept.done, "the kept call ran in the round of steps, after them"
        asked = job.later(step_span, "", steps[0])
        assert asked.result()[0] == span and rounds == [2, 1], "run on its own when asked first"
        found = kept.result()[0]
        assert rounds == [2, 1], "a call is run once"
    rows = merged.step == steps[-1]
    assert found == (float(merged.ts[rows].min()), float((merged.ts + merged.dur)[rows].max()))
