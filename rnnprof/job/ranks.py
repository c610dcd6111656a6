"""A whole job's rank files analysed one rank per task, in worker processes or on a Dask cluster: the one layer
every job-wide analysis runs on.

Map: each task loads one rank file and gives it to the analysis' function of a rank, ``of_rank(table,
options)``; only its small result travels back, so memory is bounded by the workers, not the job. Store: where
a later round needs more of a rank than travels back, ``of_rank`` returns ``(parts, result)`` and the task keeps
the parts in a scratch folder (``scratch``); each step's task then reads the rows of its window from every
rank's parts, ``of_step(parts, context, step)``. Reduce: the analysis combines what came back with the
analyzers' own functions into what the same analysis of all ranks merged into one table gives (the tests hold
the two equal), wherever each rank was computed.

An analysis of one round is ``map_reduce(folder, of_rank, reduce, options)``; one of several rounds opens a
``JobRun`` and calls ``ranks`` and ``steps`` in turn. The functions a task calls are top-level functions of a
module, so that they travel to another process or machine.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

from rnnprof import limits
from rnnprof.analyzers.steps import StepSelection, StepSelectionError, select_steps
from rnnprof.errors import UsageError
from rnnprof.events import EventTable, TableMetadata, merge_metadata
from rnnprof.job.scratch import open_parts, save_parts
from rnnprof.job.workers import Workers
from rnnprof.traces.rank_folder import RankFile, RankFolder, load_rank, loaded_notes

# Rank files adding up to less than this are read in this process when --jobs is not given: about half a second
# of reading (8 MB/s of gzipped Kineto JSON on one core), less than starting worker processes costs (each imports
# numpy and rnnprof's analyzers, about 0.4 s of CPU).
SMALL_JOB_BYTES = 4 << 20

OnDone = Callable[[int, int], None]


class JobResult(NamedTuple):
    """What a job-wide analysis gives: its report, the notes said about the job's files, and what the ranks'
    loaders left out (their records merged)."""

    report: object
    notes: list[str]
    left_out: TableMetadata


@dataclass(frozen=True)
class RankTask:
    """One rank file and what to compute of it; picklable, so it can go to another process or machine."""

    rank_file: RankFile
    of_rank: Callable  # (table, options) -> result; with ``scratch``, (parts, result)
    options: object = None
    max_input_bytes: int | None = None  # the reading process' limit, applied in the worker too
    selection: StepSelection | None = None  # the steps to analyse (None: all)
    scratch: str | None = None  # where the rank's parts are kept (``scratch.part_files``; every worker reaches it)

    def load(self) -> EventTable:
        """The rank's table, restricted to the selected steps (a selection this rank cannot meet is a UsageError)."""
        limits.set_max_input_bytes(self.max_input_bytes)
        table = load_rank(self.rank_file)
        if self.selection is None or not self.selection.active:
            return table
        try:
            return select_steps(table, self.selection)
        except StepSelectionError as exc:
            raise UsageError(f"{self.rank_file.path}: {exc}") from None


@dataclass(frozen=True)
class RankResult:
    result: object
    distributed: dict | None  # the file's distributedInfo, wherever in the file it was
    worker: str  # the rank its events name (``rank<r>``)
    left_out: TableMetadata | None = None  # what its loader left out (``left_out``, ``left_out_examples``)


@dataclass(frozen=True)
class StepTask:
    """One step over the ranks' parts saved at ``scratch`` (one place per rank, in rank order)."""

    scratch: tuple[str, ...]
    of_step: Callable  # (parts: one dict of name -> part per rank, context, step) -> result
    context: object
    step: int


def run_rank(task: RankTask) -> RankResult:
    """A rank's task: its table loaded, ``of_rank`` of it, its parts saved where it keeps any."""
    table = task.load()
    result = task.of_rank(table, task.options)
    if task.scratch is not None:
        parts, result = result
        save_parts(parts, Path(task.scratch))
    left_out = TableMetadata(left_out=dict(table.metadata.left_out),
                             left_out_examples=table.metadata.left_out_examples)
    return RankResult(result, table.metadata.distributed[0] if table.metadata.distributed else None,
                      ",".join(sorted({d.worker for d in table.devices})), left_out)


def run_step(task: StepTask):
    """A step's task: ``of_step`` of every rank's parts, read as they are indexed."""
    return task.of_step([open_parts(Path(d)) for d in task.scratch], task.context, task.step)


class JobRun:
    """A job's analysis under way (``with JobRun(folder, jobs, scheduler, on_done) as job``): worker processes
    started once for all its rounds, and a scratch folder for the ranks' parts (``tempfile``'s, removed at the
    end: with ``scheduler``, every worker must reach it at the same path). ``notes`` and ``left_out``: those of
    the ranks read."""

    def __init__(self, folder: RankFolder, jobs: int | None = None, scheduler: str | None = None,
                 on_done: OnDone | None = None):
        self.folder, self.on_done = folder, on_done
        self._workers = Workers(local_jobs(folder, jobs, scheduler), scheduler, len(folder.files))
        self._scratch: tempfile.TemporaryDirectory | None = None
        self._dirs: tuple[str, ...] = ()
        self._later: list[Later] = []
        self.notes: list[str] = []
        self.left_out = TableMetadata()

    def __enter__(self) -> "JobRun":
        self._workers.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._workers.__exit__(*exc)
        if self._scratch is not None:
            self._scratch.cleanup()

    def ranks(self, of_rank: Callable, options: object = None, selection: StepSelection | None = None,
              keep: bool = False) -> list:
        """``of_rank(table, options)`` of each rank (its selected steps), in rank order, ``on_done`` after each;
        with ``keep``, each returns ``(parts, result)`` and its parts stay for ``steps``."""
        if keep and self._scratch is None:
            self._scratch = tempfile.TemporaryDirectory(prefix="rnnprof-job-")
            self._dirs = tuple(str(Path(self._scratch.name) / f"rank{k}") for k in range(len(self.folder.files)))
        tasks = [RankTask(f, of_rank, options, limits.max_input_bytes(), selection, self._dirs[k] if keep else None)
                 for k, f in enumerate(self.folder.files)]
        outcomes = self._workers.map(run_rank, tasks, self.on_done)
        self.notes = [*self.folder.notes, *loaded_notes(self.folder, [o.distributed for o in outcomes],
                                                        [o.worker for o in outcomes])]
        self.left_out = merge_metadata([o.left_out or TableMetadata() for o in outcomes])
        return [o.result for o in outcomes]

    def steps(self, of_step: Callable, context: object, steps: Sequence[int]) -> list:
        """``of_step(parts, context, step)`` of each step, over the parts the ranks kept, in the steps' order; the
        calls kept for later (``later``) run in the same round, after them (a worker takes one once it is free)."""
        if not self._dirs:
            raise RuntimeError("no rank kept parts: call ranks(..., keep=True) first")
        later, self._later = self._later, []
        tasks = [StepTask(self._dirs, of_step, context, s) for s in steps]
        found = self._workers.map(run_step, [*tasks, *(call.task for call in later)])
        for call, value in zip(later, found[len(tasks):]):
            call.value, call.done = value, True
        return found[:len(tasks)]

    @property
    def workers(self) -> int | None:
        """The worker processes a round runs on (1: this process); None on a Dask cluster, whose are not counted."""
        return None if self._workers.scheduler else self._workers.jobs

    @property
    def pending(self) -> int:
        """The calls kept for the next round (``later``)."""
        return len(self._later)

    def later(self, of_step: Callable, context: object, step: int) -> "Later":
        """``of_step(parts, context, step)`` kept for the next round of ``steps``, where it fills a worker that
        round leaves idle (3 steps on 2 cores leave one for the third's time); run on its own if its result is
        asked for first."""
        if not self._dirs:
            raise RuntimeError("no rank kept parts: call ranks(..., keep=True) first")
        call = Later(self, StepTask(self._dirs, of_step, context, step))
        self._later.append(call)
        return call


class Later:
    """A call of one step kept for the next round (``JobRun.later``); ``result()`` gives its value."""

    def __init__(self, job: JobRun, task: StepTask):
        self.job, self.task = job, task
        self.done, self.value = False, None

    def result(self):
        if not self.done:
            self.job.steps(self.task.of_step, self.task.context, [])  # runs every call kept, this one among them
        return self.value


def map_reduce(folder: RankFolder, of_rank: Callable, reduce: Callable, options: object = None,
               selection: StepSelection | None = None, **run) -> JobResult:
    """An analysis of one round: ``reduce(results)`` of ``of_rank(table, options)`` of every rank in ``folder``
    (``run``: ``JobRun``'s ``jobs``, ``scheduler``, ``on_done``)."""
    with JobRun(folder, **run) as job:
        results = job.ranks(of_rank, options, selection)
    return JobResult(reduce(results), job.notes, job.left_out)


def local_jobs(folder: RankFolder, jobs: int | None, scheduler: str | None) -> int | None:
    """``jobs`` as given; without it and without a scheduler, 1 (this process) for a small job's rank files
    (``SMALL_JOB_BYTES``), else None (the cores)."""
    if jobs is not None or scheduler:
        return jobs
    size = 0
    for rank_file in folder.files:
        try:
            size += Path(rank_file.path).stat().st_size
        except OSError:  # the loader says what is wrong with it
            return None
    return 1 if size < SMALL_JOB_BYTES else None
