"""Every analysis of one input, computed once, for ``rnnprof report``.

``analyze_run`` runs the analyses the other commands run (``comm``, ``count-ops``,
``placement-audit``, ``critical-path``) on inputs read once, plus the top ops by time and one step's
timeline, the kernels' launch statistics (``rnnprof.analyzers.launches``, as count-ops reports them) and the
step times of the trace's step markers and ``rnnprof audit``'s findings (savings from replays of their fixes,
and the step predicted after the top fixes, as audit gives them); the critical path is that of the timeline's
step; the roofline (``roofline``) comes computed, as it needs the operators' shapes. The events are
classified once for all of them (the launch statistics' launch-bound shares come from comm's idle time by
cause). A part that cannot be computed is None with the reason, which the report lists among what it left out.
``run_report`` makes the report of the analyses (``RunAnalyses``), which a whole job's ranks give apart
(``rnnprof.job.report``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from rnnprof.analyzers.audit import AuditResult, Known, audit
from rnnprof.analyzers.classify import classify
from rnnprof.analyzers.comm import CommReport, analyze_comm, device_work_mask
from rnnprof.analyzers.critical_path import CriticalPathReport, Dependencies, analyze_critical_path
from rnnprof.analyzers.launches import LaunchStats, host_wait_share, launch_stats
from rnnprof.analyzers.memory import MemoryReport, analyze_memory
from rnnprof.analyzers.opcount import OpCountReport, count_ops
from rnnprof.analyzers.pipeline import PipelineReport, analyze_pipeline
from rnnprof.analyzers.profiler_cost import RankProfilerCost, profiler_cost
from rnnprof.analyzers.audit.top_fixes import TopFixes
from rnnprof.analyzers.replay.audit_savings import Replays, audit_replayer, replayed_audit
from rnnprof.analyzers.placement import AuditInput, PlacementResult, audit_placement, configured_rules
from rnnprof.analyzers.roofline import RooflineReport
from rnnprof.analyzers.steps import step_marker_periods
from rnnprof.analyzers.timeline import Timeline, step_timeline
from rnnprof.analyzers.topops import TimedOp, top_by_time
from rnnprof.events import EventTable, Kind, Manifest


@dataclass(frozen=True)
class StepTimes:
    """Durations of the trace's host step markers (``ProfilerStep#N`` ranges), one per rank and step."""

    steps: int
    median_us: float
    mad_us: float  # median absolute deviation from the median
    min_us: float
    max_us: float

    @property
    def steps_per_second(self) -> float:
        return 1e6 / self.median_us if self.median_us > 0 else 0.0


def step_times(events: EventTable | None) -> StepTimes | None:
    """The step markers' durations (None when the trace has none, or only empty ones)."""
    return step_times_of(step_marker_periods(events))


def step_times_of(periods: np.ndarray) -> StepTimes | None:
    """``step_times`` of the step markers' durations (``steps.step_marker_periods``; a job's ranks':
    ``steps.marker_periods``)."""
    periods = periods[periods > 0]
    if not len(periods):
        return None
    median = float(np.median(periods))
    return StepTimes(len(periods), median, float(np.median(np.abs(periods - median))), float(periods.min()),
                     float(periods.max()))


NO_MEMORY = "no allocator records (a PyTorch trace recorded with profile_memory=True has them)"


@dataclass(frozen=True)
class RunReport:
    label: str  # the paths as given
    manifest: Manifest | None
    events: int
    source_format: str
    comm: CommReport | None
    comm_reason: str
    opcount: OpCountReport
    placement: PlacementResult | None
    placement_reason: str
    top_device: tuple[TimedOp, ...]
    top_host: tuple[TimedOp, ...]
    top_reason: str
    timeline: Timeline | None
    timeline_reason: str
    critical_path: CriticalPathReport | None = None  # of the timeline's step
    critical_path_reason: str = ""
    roofline: RooflineReport | None = None  # of the input's one process
    roofline_reason: str = "not computed"
    launches: LaunchStats | None = None  # None: no trace events
    step_times: StepTimes | None = None  # None: no step markers with a duration
    findings: AuditResult | None = None  # rnnprof audit's rules on the same input
    findings_reason: str = "the input holds neither graphs nor trace events"
    memory: MemoryReport | None = None  # rnnprof memory's analysis, where the trace holds allocator records
    memory_reason: str = NO_MEMORY
    top_fixes: TopFixes | None = None  # the top findings' fixes replayed together (audit's closing note)
    profiler_cost: dict[str, RankProfilerCost] = field(default_factory=dict)  # PyTorch ranks' profiler cost
    pipeline: PipelineReport | None = None  # rnnprof pipeline's analysis, where the ranks run a pipeline


@dataclass(frozen=True, eq=False)
class RunAnalyses:
    """The analyses of a run's events the report shows beside the audit, of one table (``analyze_run``) or of a
    whole job's ranks read apart (``rnnprof.job.report``): the audit's rules read the same comm and launches
    (``known``: what they are given; ``replays``: the replays of their fixes), ``timeline()`` the timeline of the
    typical step and ``critical_path(step)`` the critical path of one step, each computed when the report asks for
    it, after the replays (a job's ride with their first round)."""

    events: int
    source_format: str
    comm: CommReport
    launches: LaunchStats
    top_device: tuple[TimedOp, ...]
    top_host: tuple[TimedOp, ...]
    timeline: Callable[[], Timeline | None]
    critical_path: Callable[[int], CriticalPathReport]
    step_times: StepTimes | None
    memory: MemoryReport | None
    profiler_cost: dict[str, RankProfilerCost]
    pipeline: PipelineReport | None  # ``analyze_pipeline``'s
    known: Known
    replays: Replays


def analyze_run(label: str, events: EventTable | None, events_reason: str, *, user_graph=None, runtime_graph=None,
                user_reason: str = "", runtime_reason: str = "", audit_input: AuditInput | None = None,
                audit_reason: str = "", manifest: Manifest | None = None, dependencies: Dependencies | None = None,
                roofline: RooflineReport | None = None, roofline_reason: str = "") -> RunReport:
    """All the report's analyses; ``audit_input`` is None when nothing can be audited;
    ``dependencies``: what the input says beyond its events, for the critical path."""
    opcount = count_ops(label, events, user_graph, runtime_graph, user_reason=user_reason,
                        runtime_reason=runtime_reason, events_reason=events_reason, launches=False)
    placement = audit_placement(audit_input, configured_rules()) if audit_input is not None else None
    no_events = events_reason or "the input holds no trace events"
    if events is None or len(events) == 0:
        findings = audit(audit_input, known=Known(placement=placement)) if audit_input is not None else None
        return RunReport(label, manifest, 0, "graph", None, no_events, opcount, placement, audit_reason, (), (),
                         no_events, None, no_events, None, no_events, None, no_events, findings=findings,
                         findings_reason=audit_reason)
    classes = classify(events)
    comm = analyze_comm(events, classes=classes)
    launches = launch_stats(events, host_wait_share=host_wait_share(comm))
    pipeline = analyze_pipeline(events, classes=classes)
    work, _ = device_work_mask(events, classes)
    host = np.array([d.kind == "host" for d in events.devices] or [False], dtype=bool)
    host_ops = np.flatnonzero((events.kind == Kind.HOST_OP) & host[events.device])
    dependencies = dependencies or Dependencies()
    analyses = RunAnalyses(
        len(events), events.source_format, comm, launches, top_by_time(events, np.flatnonzero(work), classes),
        top_by_time(events, host_ops, classes), lambda: step_timeline(events, classes, work),
        lambda step: analyze_critical_path(events, dependencies, steps=[step], classes=classes),
        step_times(events), analyze_memory(events, pipeline=pipeline) if len(events.memory) else None,
        profiler_cost(events, manifest), pipeline, Known(classes=classes, comm=comm, launches=launches),
        audit_replayer(events, dependencies, classes))
    return run_report(label, manifest, opcount, placement, audit_input if audit_input is not None else events,
                      audit_reason, analyses, roofline, roofline_reason)


def run_report(label: str, manifest: Manifest | None, opcount: OpCountReport, placement: PlacementResult | None,
               audit_input, audit_reason: str, analyses: RunAnalyses, roofline: RooflineReport | None,
               roofline_reason: str) -> RunReport:
    """The report of a run with trace events from its analyses (``RunAnalyses``): the audit's rules run on them,
    its fixes replayed, the critical path of the timeline's step."""
    comm = analyses.comm
    findings = audit(audit_input, known=dataclasses.replace(analyses.known, placement=placement, pipeline=analyses.pipeline))
    findings, top_fixes = replayed_audit(findings, analyses.replays)
    comm_reason = ""
    if not comm.devices:
        comm_reason = ("every event is on the host (a CPU-only tf.profiler XSpace, for one, names no device for "
                       "its ops)" if comm.host_only else "no device activity (no kernels, memcpys or ops on a device)")
        comm = None
    timeline = analyses.timeline()
    timeline_reason = "" if timeline else comm_reason or "no device activity"
    critical_path, critical_path_reason = None, timeline_reason
    if timeline is not None:
        critical_path = analyses.critical_path(timeline.step if timeline.step is not None else -1)
        critical_path_reason = "" if critical_path.steps else "no event on a device in the step"
        critical_path = critical_path if critical_path.steps else None
    top_device, top_host = analyses.top_device, analyses.top_host
    return RunReport(label, manifest, analyses.events, analyses.source_format, comm, comm_reason, opcount, placement,
                     audit_reason, top_device, top_host,
                     "" if top_device or top_host else "no device activity and no host operators",
                     timeline, timeline_reason, critical_path, critical_path_reason,
                     launches=analyses.launches, step_times=analyses.step_times, roofline=roofline,
                     roofline_reason=roofline_reason, findings=findings, findings_reason="", memory=analyses.memory,
                     top_fixes=top_fixes, profiler_cost=analyses.profiler_cost, pipeline=analyses.pipeline)
