"""A whole job's rank files analysed one rank per task, in worker processes or on a Dask cluster.

Map: each task loads one rank file and analyses it alone (``analyze_comm``, ``count_kernels``); only
the small result travels back, so memory is bounded by the workers, not the job. Reduce: the
results are combined by the analyzers' own ``combine_*`` functions into what the same analysis of
all ranks merged into one table gives (the tests hold the two equal), wherever each rank was computed.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import msgspec
import numpy as np

from rnnprof import limits
from rnnprof.analyzers.align import NONE, zero_offsets
from rnnprof.analyzers.collectives import collectives_report, instances, shifted
from rnnprof.analyzers.classify import classify
from rnnprof.analyzers.comm import analyze_comm, combine_reports
from rnnprof.analyzers.critical_path import WHAT_IF_OPS, Dependencies, StepPath
from rnnprof.analyzers.critical_path.job import JobPlan, RankPart, job_plan, job_report, job_step_path, rank_part
from rnnprof.analyzers.copies import combine_copies, count_copies
from rnnprof.analyzers.idle import DEFAULT_KERNEL_WAIT_US
from rnnprof.analyzers.launches import DEFAULT_SHORT_KERNEL_US, launch_sample, launch_stats_of
from rnnprof.analyzers.opcount import combine_kernel_counts, count_kernels
from rnnprof.analyzers.step_time import device_step_times
from rnnprof.analyzers.steps import combined_overruns, job_step_times
from rnnprof.analyzers.steps import StepSelection, StepSelectionError, select_steps
from rnnprof.errors import UsageError
from rnnprof.events import Alignment, Device, EventTable, TableMetadata, merge_metadata
from rnnprof.files import atomic_write_bytes
from rnnprof.parallel import Workers, map_items
from rnnprof.traces.rank_folder import RankFile, RankFolder, load_rank, loaded_notes

PART_TABLES = "tables.json"  # a rank part's strings, devices and array headers
# Rank files adding up to less than this are read in this process when --jobs is not given: about half a second
# of reading (8 MB/s of gzipped Kineto JSON on one core), less than starting worker processes costs (each imports
# numpy and rnnprof's analyzers, about 0.4 s of CPU).
SMALL_JOB_BYTES = 4 << 20

OnDone = Callable[[int, int], None]


@dataclass(frozen=True)
class RankTask:
    """One rank file and how to analyse it; picklable, so it can go to another process or machine."""

    rank_file: RankFile
    comm_patterns: tuple[str, ...] = ()
    max_input_bytes: int | None = None  # the reading process' limit, applied in the worker too
    selection: StepSelection | None = None  # the steps to analyse (None: all)
    kernel_wait_us: float = DEFAULT_KERNEL_WAIT_US
    short_kernel_us: float = DEFAULT_SHORT_KERNEL_US

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

    @property
    def step_selection(self) -> str:
        return self.selection.describe() if self.selection is not None and self.selection.active else ""


@dataclass(frozen=True)
class RankResult:
    result: object
    distributed: dict | None  # the file's distributedInfo, wherever in the file it was
    worker: str  # the rank its events name (``rank<r>``)
    left_out: TableMetadata | None = None  # what its loader left out (``left_out``, ``left_out_examples``)


def comm_of_rank(task: RankTask) -> RankResult:
    """The rank's ``CommReport`` and its collectives (``instances``), on its own clock, for matching across ranks."""
    table = task.load()
    report = analyze_comm(table, task.comm_patterns, kernel_wait_us=task.kernel_wait_us,
                          step_selection=task.step_selection)
    return RankResult((report, instances(table), zero_offsets([table])[0]), _info(table), _worker(table),
                      _left_out(table))


def kernels_of_rank(task: RankTask) -> RankResult:
    """The rank's ``KernelCounts``, its ``LaunchSample`` (None without linked launches) and its ``CopyReport``."""
    table = task.load()
    return RankResult((count_kernels(table), launch_sample(table) if len(table) else None, count_copies(table)),
                      _info(table), _worker(table), _left_out(table))


def job_comm(folder: RankFolder, comm_patterns: Sequence[str] = (), jobs: int | None = None,
             scheduler: str | None = None, on_done: OnDone | None = None, selection: StepSelection | None = None,
             kernel_wait_us: float = DEFAULT_KERNEL_WAIT_US):
    """``(CommReport, notes, left_out)`` of every rank in ``folder``, the report as ``analyze_comm`` of them merged gives it
    (each rank's steps selected on its own)."""
    tasks = [RankTask(f, tuple(comm_patterns), limits.max_input_bytes(), selection, kernel_wait_us)
             for f in folder.files]
    results, notes, left_out = _map(comm_of_rank, folder, tasks, jobs, scheduler, on_done)
    return combine_comm(results), notes, left_out


def combine_comm(results):
    """One ``CommReport`` of ``(report, instances, clock offset)`` per rank (``comm_of_rank``): the reports
    combined and the collectives matched across ranks, on the earliest rank's clock, as ``comm`` of the ranks
    merged with ``--align none`` gives them."""
    reports = [report for report, _, _ in results]
    base = min(r.time_base_us for r in reports)
    found: dict = {}
    for report, per_worker, _ in results:
        found.update(shifted(per_worker, report.time_base_us - base))
    combined = combine_reports(reports, collectives_report(found))
    if len(results) < 2:
        return combined
    return replace(combined, alignment=Alignment(NONE, tuple(offset for _, _, offset in results)).as_dict())


def job_kernels(folder: RankFolder, jobs: int | None = None, scheduler: str | None = None,
                on_done: OnDone | None = None, selection: StepSelection | None = None,
                short_kernel_us: float = DEFAULT_SHORT_KERNEL_US):
    """``((KernelCounts, LaunchStats, CopyReport), notes, left_out)`` of every rank in ``folder``, as ``count_kernels``,
    ``launch_stats`` and ``count_copies`` of them merged give them."""
    tasks = [RankTask(f, (), limits.max_input_bytes(), selection, short_kernel_us=short_kernel_us)
             for f in folder.files]
    results, notes, left_out = _map(kernels_of_rank, folder, tasks, jobs, scheduler, on_done)
    kernels = combine_kernel_counts([k for k, _, _ in results])
    return (kernels, launch_stats_of([s for _, s, _ in results], short_kernel_us),
            combine_copies([c for _, _, c in results])), notes, left_out


@dataclass(frozen=True)
class PartTask:
    """One rank for the critical path: its part is saved under ``scratch`` (a folder every worker reaches)."""

    rank: RankTask
    scratch: str


@dataclass(frozen=True)
class StepTask:
    """One step's path over the ranks' parts saved in ``scratch`` (one folder per rank, in rank order)."""

    scratch: tuple[str, ...]
    plan: JobPlan
    step: int
    dependencies: Dependencies
    what_if_ops: int


def path_part_of_rank(task: PartTask) -> RankResult:
    """The rank's ``RankSummary``; its ``RankPart`` saved under ``task.scratch`` (``critical_path.job``)."""
    table = task.rank.load()
    classes = classify(table, task.rank.comm_patterns)
    part, summary = rank_part(table, classes)
    save_part(part, Path(task.scratch))
    times, overruns = device_step_times(table, classes)  # the steps' times, and what ran past them, for the report
    return RankResult((summary, times, overruns), _info(table), _worker(table), _left_out(table))


def path_of_step(task: StepTask) -> StepPath | None:
    return job_step_path([open_part(Path(d)) for d in task.scratch], task.plan, task.step, task.dependencies,
                         task.what_if_ops)


def save_part(part: RankPart, folder: Path) -> None:
    """Each array in a ``.npy`` file of its own; the strings, devices and the arrays' headers in one JSON file
    (plain data: nothing in a scratch folder is unpickled)."""
    _save(part.arrays, part.strings, part.devices, folder)


def open_part(folder: Path) -> RankPart:
    """A part ``save_part`` wrote, its arrays read from the files as they are indexed (a step reads the rows of
    its window only)."""
    return RankPart(*_open(folder))


def save_arrays(arrays: dict, folder: Path) -> dict:
    """``arrays`` (name -> array) each saved by ``numpy.save`` in ``folder``; their headers, as plain data."""
    headers = {}
    for name, values in arrays.items():
        np.save(folder / f"{name}.npy", np.asarray(values))
        shape, dtype, offset = StoredArray(folder / f"{name}.npy").header
        headers[name] = [list(shape), dtype.str, offset]
    return headers


def open_arrays(folder: Path, headers: dict) -> dict:
    """The arrays ``save_arrays`` saved, each a ``StoredArray`` read as it is indexed."""
    return {name: StoredArray(folder / f"{name}.npy", (tuple(shape), np.dtype(dtype), offset))
            for name, (shape, dtype, offset) in headers.items()}


def save_table(table: EventTable, folder: Path) -> None:
    """An event table's columns, strings and devices (not its metadata or memory records) in ``folder``."""
    _save({c: getattr(table, c) for c in EventTable.COLUMNS}, table.strings, table.devices, folder)


def open_table_rows(folder: Path, select: Callable[[dict], np.ndarray]) -> EventTable:
    """The rows of the table ``save_table`` saved that ``select(columns)`` picks (its columns read as indexed):
    only those rows' bytes of each column are kept."""
    arrays, strings, devices = _open(folder)
    rows = select(arrays)
    return EventTable(**{c: arrays[c][rows] for c in EventTable.COLUMNS}, strings=strings, devices=devices)


def _save(arrays: dict, strings, devices, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    headers = save_arrays(arrays, folder)
    atomic_write_bytes(folder / PART_TABLES, msgspec.json.encode(
        {"strings": list(strings), "devices": [[d.kind, d.index, d.worker] for d in devices], "headers": headers}))


def _open(folder: Path) -> tuple[dict, tuple[str, ...], tuple[Device, ...]]:
    tables = msgspec.json.decode((folder / PART_TABLES).read_bytes())
    return (open_arrays(folder, tables["headers"]), tuple(tables["strings"]),
            tuple(Device(kind, index, worker) for kind, index, worker in tables["devices"]))


class StoredArray:
    """An array saved by ``numpy.save``, read piece by piece: an item, a slice or a set of rows reads only the
    bytes from the first to the last (a memory map would map far more than that: the kernel reads ahead and
    maps the pages around each fault, so a binary search alone mapped most of a file)."""

    def __init__(self, path: Path, header: tuple | None = None):
        self.path = path
        if header is None:  # (shape, dtype, where the data starts), read from the file's header
            with open(path, "rb") as f:
                version = np.lib.format.read_magic(f)
                read = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                    np.lib.format.read_array_header_2_0
                shape, _, dtype = read(f)
                header = (shape, dtype, f.tell())
        self.header = header
        self.shape, self.dtype, self.offset = header

    def __len__(self) -> int:
        return self.shape[0]

    def _read(self, start: int, count: int) -> np.ndarray:
        return np.fromfile(self.path, dtype=self.dtype, count=max(count, 0),
                           offset=self.offset + start * self.dtype.itemsize)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        values = self._read(0, int(np.prod(self.shape))).reshape(self.shape)
        return values if dtype is None else values.astype(dtype)

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            return self._read(start, stop - start)[::step]
        if isinstance(key, (int, np.integer)):
            return self._read(int(key) % len(self), 1)[0]
        rows = np.asarray(key, dtype=np.int64)
        if not len(rows):
            return np.zeros(0, dtype=self.dtype)
        lo = int(rows.min())
        return self._read(lo, int(rows.max()) + 1 - lo)[rows - lo]


def job_critical_path(folder: RankFolder, comm_patterns: Sequence[str] = (), jobs: int | None = None,
                      scheduler: str | None = None, on_done: OnDone | None = None,
                      dependencies: Dependencies = Dependencies(), choose: Callable | None = None,
                      what_if_ops: int | None = None):
    """``(CriticalPathReport, notes, left_out)`` of every rank in ``folder``, the report as
    ``analyze_critical_path`` of them merged gives it. Each rank is read once, in a worker, into a part saved
    in a scratch folder (``tempfile``'s, removed at the end: with ``scheduler``, every worker must reach it at
    the same path); then each step's path is found in a worker from the parts' rows in its window.
    ``choose(steps)``: the steps to analyse of the job's sorted steps (None: every step)."""
    with tempfile.TemporaryDirectory(prefix="rnnprof-paths-") as scratch:
        dirs = tuple(str(Path(scratch) / f"rank{k}") for k in range(len(folder.files)))
        tasks = [PartTask(RankTask(f, tuple(comm_patterns), limits.max_input_bytes()), d)
                 for f, d in zip(folder.files, dirs)]
        with Workers(local_jobs(folder, jobs, scheduler), scheduler, len(tasks)) as workers:
            outcomes = workers.map(path_part_of_rank, tasks, on_done)
            results, notes, left_out = _results(folder, outcomes)
            summaries = [summary for summary, _, _ in results]
            known = sorted({s for summary in summaries for s in summary.steps})
            plan = job_plan(summaries, choose(known) if choose is not None else None, dependencies)
            ops = WHAT_IF_OPS if what_if_ops is None else what_if_ops
            paths = workers.map(path_of_step, [StepTask(dirs, plan, s, dependencies, ops) for s in plan.steps])
    report = job_report(paths, [w for summary in summaries for w in summary.workers], dependencies)
    return report.with_step_time(job_step_times([times for _, times, _ in results]),
                                 combined_overruns([overruns for _, _, overruns in results])), notes, left_out


def _map(function, folder: RankFolder, tasks, jobs, scheduler, on_done) -> tuple[list, list[str], TableMetadata]:
    """The ranks' results, the folder's notes, and what the ranks' loaders left out (their records merged)."""
    return _results(folder, map_items(function, tasks, local_jobs(folder, jobs, scheduler), scheduler, on_done))


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


def _results(folder: RankFolder, outcomes: list[RankResult]) -> tuple[list, list[str], TableMetadata]:
    notes = [*folder.notes, *loaded_notes(folder, [o.distributed for o in outcomes], [o.worker for o in outcomes])]
    return [o.result for o in outcomes], notes, merge_metadata([o.left_out or TableMetadata() for o in outcomes])


def _left_out(table: EventTable) -> TableMetadata:
    return TableMetadata(left_out=dict(table.metadata.left_out), left_out_examples=table.metadata.left_out_examples)


def _info(table: EventTable) -> dict | None:
    return table.metadata.distributed[0] if table.metadata.distributed else None


def _worker(table: EventTable) -> str:
    return ",".join(sorted({d.worker for d in table.devices}))
