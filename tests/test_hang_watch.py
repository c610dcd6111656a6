"""The hang watch's clock, its two samples and what it says, on a job it reaches through a transport the test
drives (its steps, its ranks and what they answer), on a clock the test moves: one watch for every transport
(a launched job's probed ranks, a TensorFlow chief), so what holds here holds for both."""

from __future__ import annotations

import types

import pytest

from rnnprof import rundir
from rnnprof.analyzers.hang import (STUCK, Culprit, Frame, HangVerdict, RankRecorder, RankStacks, RankState,
                                    RecordedCollective, ThreadStack)
from rnnprof.recording import hang_watch
from rnnprof.recording.hang_collect import Sample
from rnnprof.recording.hang_watch import CONFIRM_MAX_S, HangOptions, HangWatch

AFTER_S = 30.0  # --hang-after, on the test's clock


class Clock:
    """``time.monotonic`` as the watch reads it: each reading moves it on by a hundredth of a second (the watch's
    waits end), and the test moves it on by the quiet time it plants."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self) -> float:
        self.now += 0.01
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(hang_watch, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    monkeypatch.setattr(hang_watch, "POLL_S", 0.0)
    return clock


def stacks(rank: int, line: int) -> RankStacks:
    main = ThreadStack("0x1", (Frame("/site-packages/torch/distributed.py", 9, "wait"), Frame("/job/train.py", line,
                                                                                            "step")), main=True)
    return RankStacks(rank, (main,))


def recorder(rank: int, done: int) -> RankRecorder:
    return RankRecorder(rank, tuple(RecordedCollective(seq, "gloo:all_reduce") for seq in range(1, done + 1)))


class Job:
    """A transport to a job of ``ranks`` ranks: ``steps`` (by rank) as the test sets them, ``up`` whether every rank
    is up; each sample answers with the next of ``answers`` (a dict rank -> (main-thread line, collectives done)),
    the last one again once they run out."""

    def __init__(self, ranks: int = 2):
        self.steps = {rank: 0 for rank in range(ranks)}
        self.up, self.pids = True, {rank: 100 + rank for rank in range(ranks)}
        self.answers = [{rank: (20, 3) for rank in range(ranks)}]
        self.samples, self.kept = 0, None
        self.on_sample = lambda: None

    def progress(self):
        return dict(self.steps), self.up

    def live(self):
        return dict(self.pids)

    def sample(self, live, scratch):
        answer = self.answers[min(self.samples, len(self.answers) - 1)]
        self.samples += 1
        self.on_sample()
        got = Sample(stack_texts={r: f"stacks of {r}\n" for r in answer if r in live},
                     stacks={r: stacks(r, line) for r, (line, _) in answer.items() if r in live},
                     recorders={r: recorder(r, done) for r, (_, done) in answer.items() if r in live})
        return got

    def who(self, number):
        return f"member {number}"

    def judge(self, got):
        return HangVerdict(STUCK, f"stuck: {len(got.stacks)} answered", (Culprit(1, RankState.IN_PYTHON),))

    def stacks_file(self, number):
        return f"member{number}.txt"

    def keep(self, hang):
        self.kept = {**hang, "scope": "test"}
        return self.kept


def watch_of(tmp_path, job: Job, after: float | None = AFTER_S, stop: bool = True, **kwargs):
    said: list[str] = []
    tmp_path.mkdir(parents=True, exist_ok=True)  # the run directory
    watch = HangWatch(tmp_path, job, HangOptions(after=after, stop=stop, on_note=said.append), **kwargs)
    return watch, said


def test_a_job_quiet_for_the_threshold_and_unchanged_across_two_samples_is_hung_and_saved_by_its_transport(
        tmp_path, clock):
    job = Job()
    watch, said = watch_of(tmp_path, job)
    job.steps = {0: 3, 1: 3}
    assert watch.poll() is None  # a step finished: the clock starts again
    clock.now += AFTER_S - 1
    assert watch.poll() is None and job.samples == 0  # under the threshold: nobody asked
    clock.now += 2
    verdict = watch.poll()
    assert verdict is not None and verdict.summary == "stuck: 2 answered" and job.samples == 2 and said == []
    assert watch.verdict is verdict and watch.record is job.kept
    assert (job.kept["kind"], job.kept["ranks"], job.kept["hang_after_s"], job.kept["scope"]) == (STUCK, [1], AFTER_S,
                                                                                                  "test")
    hang = tmp_path / rundir.HANG_DIR
    assert sorted(p.name for p in hang.iterdir()) == ["member0.txt", "member1.txt", "verdict.txt"]
    assert job.kept["files"] == ["hang/member0.txt", "hang/member1.txt", "hang/verdict.txt"]
    assert (hang / "verdict.txt").read_text() == "stuck: 2 answered\n"


def test_the_clock_starts_once_every_rank_is_up(tmp_path, clock):
    job = Job()
    job.up = False
    watch, _ = watch_of(tmp_path, job)
    clock.now += 10 * AFTER_S
    assert watch.poll() is None and job.samples == 0  # ranks still opening their captures: never judged
    job.up = True
    assert watch.poll() is None and job.samples == 0  # the clock started at the last look
    clock.now += AFTER_S + 1
    assert watch.poll() is not None


@pytest.mark.parametrize("second, why", [
    ({0: (20, 3), 1: (21, 3)}, "member 1's main thread runs (train.py:20 -> train.py:21)"),
    ({0: (20, 5), 1: (20, 3)}, "collectives still finish (rank 0: #3 -> #5)"),
])
def test_what_moved_between_the_samples_makes_the_job_slow_not_hung_and_restarts_the_clock(tmp_path, clock, second,
                                                                                         why):
    job = Job()
    job.answers.append(second)
    watch, said = watch_of(tmp_path, job)
    clock.now += AFTER_S + 1
    assert watch.poll() is None and job.samples == 2
    assert said == [f"slow, not hung: no step finished for {AFTER_S + 1:.1f} s, but {why}"]
    assert not (tmp_path / rundir.HANG_DIR).exists() and watch.record is None
    assert watch.poll() is None and job.samples == 2  # the clock started again
    clock.now += AFTER_S + 1
    assert watch.poll() is not None  # nothing moves any more


def test_a_step_that_finishes_while_the_watch_confirms_makes_it_slow(tmp_path, clock):
    job = Job()
    watch, said = watch_of(tmp_path, job)
    clock.now += AFTER_S + 1
    job.on_sample = lambda: job.steps.update({1: 1})
    assert watch.poll() is None and job.samples == 1  # no second sample
    assert said and said[0].endswith("but a step finished meanwhile")


def test_the_confirming_wait_is_the_threshold_at_most_confirm_max(tmp_path, clock):
    for after, wait in ((2.0, 2.0), (60.0, CONFIRM_MAX_S)):
        job = Job()
        watch, _ = watch_of(tmp_path / str(after), job, after=after)
        clock.now += after + 1
        marks = []
        job.on_sample = lambda: marks.append(clock.now)
        assert watch.poll() is not None
        assert wait <= marks[1] - marks[0] < wait + 0.1


def test_ranks_that_end_between_the_samples_are_not_judged(tmp_path, clock):
    job = Job()
    watch, said = watch_of(tmp_path, job)
    clock.now += AFTER_S + 1
    job.on_sample = lambda: job.pids.pop(1) if job.samples == 2 else None
    assert watch.poll() is None and said == [] and watch.record is None
    assert not (tmp_path / rundir.HANG_DIR).exists()


def test_watching_from_a_thread_stops_a_hung_job_once_or_says_it_and_leaves_it_with_on_hang_wait(tmp_path, clock):
    stopped: list[HangVerdict] = []
    job = Job()
    watch, said = watch_of(tmp_path / "stop", job, on_hung=stopped.append)
    clock.now += AFTER_S + 1
    with watch:
        watch._thread.join(timeout=60)
    assert [v.summary for v in stopped] == ["stuck: 2 answered"] and said == []
    waiting = Job()
    watch, said = watch_of(tmp_path / "wait", waiting, stop=False, on_hung=stopped.append)
    clock.now += AFTER_S + 1
    with watch:
        watch._thread.join(timeout=60)
    assert len(stopped) == 1 and said == ["hung: stuck: 2 answered; --on-hang wait: the job keeps running"]


def test_a_failing_transport_is_said_and_leaves_the_job_unwatched(tmp_path, clock):
    job = Job()
    job.progress = lambda: 1 / 0
    watch, said = watch_of(tmp_path, job)
    with watch:
        watch._thread.join(timeout=60)
    assert said == ["the hang watch stopped (ZeroDivisionError: division by zero); the job is not watched"]
