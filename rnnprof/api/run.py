"""``rnnprof.open``: a run (a run directory, trace files, a folder of rank files) to analyse from Python.

Each method of ``Run`` is one command's analysis, called as the command calls it (``commands.<name>.analyze``),
with the command's options as keywords: it returns the result the command renders (``reports.results``), whose
``to_json()`` is the command's ``--json``. The run's files are read once: the tables the first analysis loads are
kept (``traces.memo``) for every later one. A job's rank files that the job layer reads in worker processes (a
large job, or ``jobs=``) are read there, by each analysis.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from rnnprof.api.options import command_args
from rnnprof.api.summary import RunSummary, run_summary
from rnnprof.commands import audit, comm, count_ops, critical_path, diff, hang, memory, pipeline, roofline, whatif
from rnnprof.errors import InputError
from rnnprof.paths import broken
from rnnprof.reports.results.audit import AuditFindings
from rnnprof.reports.results.comm import CommResult
from rnnprof.reports.results.count_ops import CountOpsResult
from rnnprof.reports.results.critical_path import CriticalPathResult
from rnnprof.reports.results.diff import DiffResult
from rnnprof.reports.results.hang import HangResult
from rnnprof.reports.results.memory import MemoryResult
from rnnprof.reports.results.pipeline import PipelineResult
from rnnprof.reports.results.roofline import RooflineResult
from rnnprof.reports.results.whatif import WhatIfResult
from rnnprof.traces.memo import TableMemo

PathLike = str | os.PathLike
Steps = str | tuple[int | None, int | None] | None


def open(path_or_paths: PathLike | Sequence[PathLike], *, max_input_size: str | None = None) -> "Run":
    """A ``Run`` of a run directory, a trace file, several trace files (one per rank: one job) or a folder of
    rank files, as the commands take them; nothing is read until an analysis asks. A path that does not exist
    is an ``InputError``, the command line's message. ``max_input_size``: the largest file read ("512M", "20G";
    ``--max-input-size``)."""
    paths = (path_or_paths,) if isinstance(path_or_paths, (str, os.PathLike)) else tuple(path_or_paths)
    if not paths:
        raise InputError("(no paths)", "nothing to open", "a run directory, trace files or a folder of rank files")
    for path in paths:
        if not Path(path).exists():
            raise InputError(path, broken(Path(path)) or "does not exist",
                             "a run directory, trace files or a folder of rank files")
    return Run(tuple(str(p) for p in paths), max_input_size)


def _steps(steps: Steps) -> str | None:
    """``--steps``' text of ``steps``: "FIRST:LAST" as given, or a (first, last) pair, either end None."""
    if steps is None or isinstance(steps, str):
        return steps
    first, last = steps
    return f"{'' if first is None else first}:{'' if last is None else last}"


class Run:
    """One run's inputs and the tables read of them, analysed by its methods (see ``rnnprof.open``).

    The step selection every trace analysis takes: ``steps`` ("FIRST:LAST" or a pair, the trace's own step
    numbers), ``skip_first`` (leave out the first N selected steps) and ``drop_last`` (leave out the last one).
    """

    def __init__(self, paths: tuple[str, ...], max_input_size: str | None = None):
        self.paths = paths
        self.max_input_size = max_input_size
        self.memo = TableMemo()  # the tables read so far, kept for the next analysis

    def __repr__(self) -> str:
        return f"rnnprof.Run({', '.join(self.paths)})"

    def _analyze(self, module, name: str, paths: Sequence[str] | None = None, **options):
        args = command_args(name, self.paths if paths is None else paths,
                            max_input_size=self.max_input_size, **options)
        with self.memo:
            return module.analyze(args)

    def summary(self) -> "RunSummary":
        """The run at a glance: its audit's findings, each device's time per step, its memory over time and its
        critical path's shares (what rnnprof's tab in TensorBoard shows); a part the input cannot give says why."""
        return run_summary(self)

    def _repr_html_(self) -> str:
        return self.summary()._repr_html_()

    def comm(self, *, per_step: bool = False, comm_patterns: Sequence[str] = (), align: str = "none",
             kernel_wait_us: float | None = None, steps: Steps = None, skip_first: int = 0, drop_last: bool = False,
             jobs: int | None = None, scheduler: str | None = None) -> CommResult:
        """Each device's time split into compute, communication, copies and idle (per step with ``per_step``),
        and the stragglers: ``rnnprof comm``. ``comm_patterns``: regexes of more communication; ``align``: how
        several files share a clock ("none", "start", "collectives"); ``kernel_wait_us``: shorter GPU gaps are
        kernel wait (default 30); ``jobs``/``scheduler``: a job's ranks in worker processes or on Dask."""
        return self._analyze(comm, "comm", per_step=per_step, comm_pattern=list(comm_patterns), align=align,
                             kernel_wait_us=kernel_wait_us, steps=_steps(steps), skip_first=skip_first,
                             drop_last=drop_last, jobs=jobs, scheduler=scheduler)

    def count_ops(self, *, short_kernel_us: float | None = None, steps: Steps = None, skip_first: int = 0,
                  drop_last: bool = False, jobs: int | None = None, scheduler: str | None = None) -> CountOpsResult:
        """Graph operators and kernel invocations per device and step: ``rnnprof count-ops``.
        ``short_kernel_us``: kernels shorter than this count as short (default 10)."""
        return self._analyze(count_ops, "count-ops", short_kernel_us=short_kernel_us, steps=_steps(steps),
                             skip_first=skip_first, drop_last=drop_last, jobs=jobs, scheduler=scheduler)

    def critical_path(self, *, step: int | None = None, comm_patterns: Sequence[str] = (), steps: Steps = None,
                      skip_first: int = 0, drop_last: bool = False, jobs: int | None = None,
                      scheduler: str | None = None) -> CriticalPathResult:
        """Each step's critical path across devices and ranks, its shares by device and class, and what-ifs:
        ``rnnprof critical-path``. ``step``: that step only."""
        return self._analyze(critical_path, "critical-path", step=step, comm_pattern=list(comm_patterns),
                             steps=_steps(steps), skip_first=skip_first, drop_last=drop_last, jobs=jobs,
                             scheduler=scheduler)

    def whatif(self, *, scale: Sequence[str] = (), even_host: Sequence[str] | bool = (),
               even_input: Sequence[str] | bool = (), even_work: Sequence[str] | bool = (),
               delay: Sequence[str] = (), comm: float | None = None, overlap_comm: bool = False,
               no_copies: str | bool | None = None, no_syncs: bool = False, graph_launch: bool = False,
               fix: Sequence[str] = (), comm_patterns: Sequence[str] = (), steps: Steps = None, skip_first: int = 0,
               drop_last: bool = False, jobs: int | None = None, scheduler: str | None = None) -> WhatIfResult:
        """The step time a change would give, each step's graph replayed with the change: ``rnnprof whatif``.
        The changes, together when several, as the flags write them: ``scale=["aten::mm=0.5"]``,
        ``even_host=["rank1"]`` (or True: the latest rank), ``even_input``, ``even_work``,
        ``delay=["rank1=40"]``, ``comm=0.5``, ``overlap_comm``, ``no_copies`` (True, or one kind: "HtoD"),
        ``no_syncs``, ``graph_launch``, ``fix=["PF001"]`` (an audit finding's fix)."""
        def ranks(value):
            return [""] if value is True else list(value or ())
        return self._analyze(whatif, "whatif", scale=list(scale), even_host=ranks(even_host),
                             even_input=ranks(even_input), even_work=ranks(even_work), delay=list(delay), comm=comm,
                             overlap_comm=overlap_comm, no_copies="" if no_copies is True else no_copies or None,
                             no_syncs=no_syncs, graph_launch=graph_launch, fix=list(fix),
                             comm_pattern=list(comm_patterns), steps=_steps(steps), skip_first=skip_first,
                             drop_last=drop_last, jobs=jobs, scheduler=scheduler)

    def memory(self, *, steps: Steps = None, skip_first: int = 0, drop_last: bool = False) -> MemoryResult:
        """Each device's peak memory, what was live then, growth per step and imbalance: ``rnnprof memory``."""
        return self._analyze(memory, "memory", steps=_steps(steps), skip_first=skip_first, drop_last=drop_last)

    def pipeline(self, *, schedule: str | None = None, micro_batches: int | None = None,
                 stages_per_rank: int | None = None, steps: Steps = None, skip_first: int = 0, drop_last: bool = False,
                 jobs: int | None = None, scheduler: str | None = None) -> PipelineResult:
        """A pipeline's bubble per rank (warm-up, cool-down, waiting on a neighbour, transfer) against its schedule's
        theory, and the imbalance between its stages: ``rnnprof pipeline``. ``schedule`` ("1f1b", "gpipe",
        "interleaved-1f1b"), ``micro_batches``, ``stages_per_rank``: what the run's manifest or the trace does not
        tell."""
        return self._analyze(pipeline, "pipeline", schedule=schedule, micro_batches=micro_batches,
                             stages_per_rank=stages_per_rank, steps=_steps(steps), skip_first=skip_first,
                             drop_last=drop_last, jobs=jobs, scheduler=scheduler)

    def roofline(self, *, peak_tflops: float | None = None, peak_tbps: float | None = None, steps: Steps = None,
                 skip_first: int = 0, drop_last: bool = False) -> RooflineResult:
        """FLOPs, bytes and achieved rates per operator, family and step, MFU and the collectives' bus
        bandwidth: ``rnnprof roofline``. ``peak_tflops``/``peak_tbps``: the device's peaks, over the table's."""
        return self._analyze(roofline, "roofline", peak_tflops=peak_tflops, peak_tbps=peak_tbps,
                             steps=_steps(steps), skip_first=skip_first, drop_last=drop_last)

    def audit(self, *, steps: Steps = None, skip_first: int = 0, drop_last: bool = False) -> AuditFindings:
        """What to fix first: findings ranked by the step time each costs, judged against the run's jitter,
        savings from replays of their fixes: ``rnnprof audit``."""
        return self._analyze(audit, "audit", steps=_steps(steps), skip_first=skip_first, drop_last=drop_last)

    def hang(self) -> HangResult:
        """Why the job hung: the rank it waits for, its collective and its line: ``rnnprof hang``."""
        return self._analyze(hang, "hang")

    def diff(self, other: "Run | PathLike | Sequence[PathLike]", *, top: int | None = None, steps: Steps = None,
             skip_first: int = 0, drop_last: bool = False) -> DiffResult:
        """What changed from this run (A) to ``other`` (B, a ``Run`` or its paths): ``rnnprof diff``. ``top``:
        rows per section and list (default 10; 0: all)."""
        theirs = other if isinstance(other, Run) else open(other)
        args = command_args("diff", [], a=list(self.paths), b=list(theirs.paths), json=True, top=top,
                            steps=_steps(steps), skip_first=skip_first, drop_last=drop_last,
                            max_input_size=self.max_input_size)
        with self.memo:
            return diff.analyze(args)
