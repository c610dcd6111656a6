"""``report`` of a whole job, its ranks read apart: each rank read once, in a worker, into what its audit needs
(``job.audit``) and what the report shows beside it: its kernel and copy counts, its operators' summed times, its
step markers and step times, its device work cut at its step windows (kept for the timeline's step) (map); those
combined with the analyzers' own functions, the audit run and its fixes replayed as ``job.audit`` does; the
timeline and the critical path of the typical step from every rank's parts, in the replays' first round (map);
all into one ``RunReport``, as ``analyze_run`` of the ranks merged into one table gives it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np

from rnnprof.analyzers.audit.context import HOST_OPS, MEMORY
from rnnprof.analyzers.copies import CopyReport, combine_copies
from rnnprof.analyzers.critical_path import CriticalPathReport, Dependencies
from rnnprof.analyzers.device_work import device_work_mask
from rnnprof.analyzers.noise import combined_spans
from rnnprof.analyzers.opcount import KernelCounts, combine_kernel_counts, count_kernels, op_count_report
from rnnprof.analyzers.placement import audit_placement, configured_rules
from rnnprof.analyzers.profiler_cost import profiler_cost_of
from rnnprof.analyzers.run_report import RunAnalyses, RunReport, run_report, step_times_of
from rnnprof.analyzers.step_time import device_step_times
from rnnprof.analyzers.steps import StepSelection, combined_overruns, job_step_times, marker_periods, step_markers
from rnnprof.analyzers.timeline import Timeline, chosen_step, timeline_of, work_pieces
from rnnprof.analyzers.topops import NameTimes, name_times, top_of
from rnnprof.events import EventTable, Kind, Manifest, StringTable
from rnnprof.job.audit import AuditOptions, JobPaths, RankAudit, audit_parts, audited_job, rank_input
from rnnprof.job.ranks import JobResult, JobRun
from rnnprof.traces.rank_folder import RankFolder

TIMELINE = "timeline"  # the part of a rank kept for the timeline: its device work cut at its step windows


class JobReport(NamedTuple):
    """A job's ``RunReport`` and the steps its events hold (those a step selection left)."""

    report: RunReport
    steps: tuple[int, ...]


@dataclass(frozen=True)
class RankReport:
    """What one rank gives the job's report (``report_of_rank``)."""

    audit: RankAudit
    kernels: KernelCounts
    copies: CopyReport | None
    top_device: NameTimes  # its device work's operators
    top_host: NameTimes  # its host operators
    spans: dict  # each step's span over its devices' step windows (``timeline.work_pieces``)
    markers: tuple  # its step markers (``steps.step_markers``)
    step_times: tuple  # its steps' times and overruns (``step_time.device_step_times``)
    strings: tuple[str, ...]


def report_of_rank(table: EventTable, options: AuditOptions):
    """The rank's parts to keep (its audit's, and its work for the timeline) and its ``RankReport``."""
    inp = rank_input(table, options)
    parts, audit = audit_parts(inp, options)
    classes = inp.classes
    work, _ = device_work_mask(table, classes)
    host = np.array([d.kind == "host" for d in table.devices] or [False], dtype=bool)
    host_ops = np.flatnonzero((table.kind == Kind.HOST_OP) & host[table.device])
    pieces = work_pieces(table, classes, work, table.time_base_us)
    parts[TIMELINE] = pieces.part
    copies = audit.comm[0].copies if len(table) else None  # comm's ``count_copies`` of the same table
    return parts, RankReport(audit, count_kernels(table), copies,
                             name_times(table, np.flatnonzero(work), classes), name_times(table, host_ops, classes),
                             pieces.spans, step_markers(table) if len(table) else (np.zeros(0), np.zeros(0)),
                             device_step_times(table, classes), table.strings)


def timeline_of_step(parts: Sequence[dict], spans: dict, step: int) -> Timeline | None:
    """The timeline of the job's typical step from every rank's work (``timeline.timeline_of``)."""
    return timeline_of([p[TIMELINE] for p in parts], spans)


def _string_codes(ranks: Sequence[RankReport]) -> dict[str, int]:
    """Each string's code in the table of the ranks merged (``events.concat``'s), which breaks ties in rankings."""
    strings = StringTable()
    for r in ranks:
        for text in r.strings:
            strings.code(text)
    return {text: k for k, text in enumerate(strings.values)}


def job_run_report(folder: RankFolder, label: str, manifest: Manifest | None = None,
                   dependencies: Dependencies = Dependencies(), selection: StepSelection | None = None,
                   user_reason: str = "", runtime_reason: str = "", roofline_reason: str = "", **run) -> JobResult:
    """``(JobReport, notes, left_out)`` of every rank in ``folder``, the report as ``analyze_run`` of the ranks merged
    into one table gives it (``label``: the input's, as the report names it; the ``*_reason``: why it has no graph and
    no roofline; ``run``: ``JobRun``'s)."""
    options = AuditOptions(manifest, host_ops=True)
    with JobRun(folder, **run) as job:
        ranks = job.ranks(report_of_rank, options, selection, keep=True)
        audits = [r.audit for r in ranks]
        paths = JobPaths(job, audits)
        audited = audited_job(job, audits, options, dependencies, selection, run, paths)
        events = audited.input.job
        spans = combined_spans([r.spans for r in ranks])
        chosen = chosen_step(spans)
        codes = _string_codes(ranks)
        # the critical path of the typical step (the timeline's, which the report asks for) and its timeline ride
        # with the first round of the replays, in the worker its third step leaves idle; the longer first. A rule
        # that reads every step's path (PF001's cause) takes the typical step's from the same task (``JobPaths``)
        if chosen is not None:
            paths.later([chosen], dependencies)
        timeline = job.later(timeline_of_step, spans, -1 if chosen is None else chosen)

        def critical_path(step: int) -> CriticalPathReport:
            return paths.of([step], dependencies).with_step_time(job_step_times([r.step_times[0] for r in ranks]),
                                                                 combined_overruns([r.step_times[1] for r in ranks]))

        analyses = RunAnalyses(
            events.events, events.source_format, events.comm, audited.known.launches,
            top_of([r.top_device for r in ranks], order=codes), top_of([r.top_host for r in ranks], order=codes),
            timeline.result, critical_path,
            step_times_of(marker_periods([r.markers for r in ranks], np.array(events.steps, dtype=np.int64))),
            events.figures[MEMORY.name], profiler_cost_of(events.figures[HOST_OPS.name], manifest),
            audited.known.pipeline, audited.known, audited.replays)
        opcount = op_count_report(label, events.source_format, None, None,
                                  combine_kernel_counts([r.kernels for r in ranks]), None,
                                  combine_copies([r.copies for r in ranks if r.copies is not None]),
                                  user_reason, runtime_reason)
        placement = audit_placement(audited.input, configured_rules())
        report: RunReport = run_report(label, manifest, opcount, placement, audited.input, "", analyses, None,
                                       roofline_reason)
    return JobResult(JobReport(report, events.steps), job.notes, job.left_out)
