"""``count-ops`` of a whole job: each rank's kernel counts, launch sample and copies (map), combined as
``count_kernels``, ``launch_stats`` and ``count_copies`` of the ranks merged give them (reduce)."""

from __future__ import annotations

from rnnprof.analyzers.copies import combine_copies, count_copies
from rnnprof.analyzers.launches import DEFAULT_SHORT_KERNEL_US, launch_sample, launch_stats_of
from rnnprof.analyzers.opcount import combine_kernel_counts, count_kernels
from rnnprof.analyzers.steps import StepSelection
from rnnprof.events import EventTable
from rnnprof.job.ranks import JobResult, map_reduce
from rnnprof.traces.rank_folder import RankFolder


def kernels_of_rank(table: EventTable, options: None = None):
    """The rank's ``KernelCounts``, its ``LaunchSample`` (None without linked launches) and its ``CopyReport``."""
    return count_kernels(table), launch_sample(table) if len(table) else None, count_copies(table)


def job_kernels(folder: RankFolder, selection: StepSelection | None = None,
                short_kernel_us: float = DEFAULT_SHORT_KERNEL_US, **run) -> JobResult:
    """``((KernelCounts, LaunchStats, CopyReport), notes, left_out)`` of every rank in ``folder``, as
    ``count_kernels``, ``launch_stats`` and ``count_copies`` of them merged give them (``run``: ``JobRun``'s)."""
    def combine(results):
        return (combine_kernel_counts([k for k, _, _ in results]),
                launch_stats_of([s for _, s, _ in results], short_kernel_us),
                combine_copies([c for _, _, c in results]))

    return map_reduce(folder, kernels_of_rank, combine, None, selection, **run)
