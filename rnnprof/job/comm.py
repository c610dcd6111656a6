"""``comm`` of a whole job: each rank's ``CommReport`` and collectives (map), combined on one clock with the
collectives matched across ranks (reduce), as ``comm`` of the ranks merged with ``--align none`` gives them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from rnnprof.analyzers.align import NONE, zero_offsets
from rnnprof.analyzers.collectives import collectives_report, instances, shifted
from rnnprof.analyzers.comm import analyze_comm, combine_reports
from rnnprof.analyzers.idle import DEFAULT_KERNEL_WAIT_US
from rnnprof.analyzers.steps import StepSelection
from rnnprof.events import Alignment, EventTable
from rnnprof.job.ranks import JobResult, map_reduce
from rnnprof.traces.rank_folder import RankFolder


@dataclass(frozen=True)
class CommOptions:
    comm_patterns: tuple[str, ...] = ()
    kernel_wait_us: float = DEFAULT_KERNEL_WAIT_US
    step_selection: str = ""  # the selection, as the report describes it


def comm_of_rank(table: EventTable, options: CommOptions, classes=None):
    """The rank's ``CommReport``, its collectives (``instances``) and its clock offset, for matching across ranks
    (``classes``: ``classify`` of the table with the options' patterns, where the caller has it)."""
    report = analyze_comm(table, options.comm_patterns, kernel_wait_us=options.kernel_wait_us,
                          step_selection=options.step_selection, classes=classes)
    return report, instances(table), zero_offsets([table])[0]


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


def job_comm(folder: RankFolder, comm_patterns: Sequence[str] = (), selection: StepSelection | None = None,
             kernel_wait_us: float = DEFAULT_KERNEL_WAIT_US, **run) -> JobResult:
    """``(CommReport, notes, left_out)`` of every rank in ``folder``, the report as ``analyze_comm`` of them merged
    gives it (each rank's steps selected on its own; ``run``: ``JobRun``'s)."""
    described = selection.describe() if selection is not None and selection.active else ""
    return map_reduce(folder, comm_of_rank, combine_comm, CommOptions(tuple(comm_patterns), kernel_wait_us, described),
                      selection, **run)
