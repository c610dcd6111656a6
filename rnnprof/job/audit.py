"""``audit`` of a whole job, its ranks read apart: each rank read once, in a worker, into comm's report and its
collectives, the figures the rules read of it (``analyzers.audit.registry.FIGURES``), its memory, its launch
sample and its outline (devices, steps, their spans), with its critical-path part and the events the fixes look
inside kept in the scratch folder (map); those combined with the analyzers' own functions and the rules run on
them (reduce); where a rule asks for the critical path, each step's path from the parts (map); the replays of
the findings' fixes on the sampled steps, every set of changes a round of findings asks for replayed in one
step's task (map), as ``audit`` of the ranks merged into one table gives them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

from rnnprof.analyzers.audit import AuditResult, Known, audit
from rnnprof.analyzers.audit.context import MEMORY
from rnnprof.analyzers.audit.host_overhead import LAUNCHING
from rnnprof.analyzers.audit.registry import FIGURES
from rnnprof.analyzers.critical_path import WHAT_IF_OPS, CriticalPathReport, Dependencies
from rnnprof.analyzers.critical_path.job import RankSummary, job_plan, job_report, rank_part
from rnnprof.analyzers.launches import host_wait_share, launch_sample, launch_stats_of
from rnnprof.analyzers.memory import MemoryReport, combined_memory, rank_memory
from rnnprof.analyzers.noise import combined_spans, step_spans
from rnnprof.analyzers.pipeline import PipelineReport, combine_timelines, rank_timelines
from rnnprof.analyzers.placement.inputs import AuditInput, JobEvents
from rnnprof.analyzers.replay.analysis import (check_changes, latest_rank, needs_latest_rank, step_saving,
                                               unchanged_replay)
from rnnprof.analyzers.replay.audit_savings import replayed_savings, sampled_of, step_events
from rnnprof.analyzers.replay.job import (JobNames, ScannedNames, job_names, job_step_graph, named_events,
                                         replay_plan, window_events)
from rnnprof.analyzers.replay.comm_changes import known_groups, recorded_collectives
from rnnprof.analyzers.replay.result import ChangeError
from rnnprof.analyzers.steps import StepSelection
from rnnprof.events import Device, EventTable, Manifest, TableMetadata, merge_metadata
from rnnprof.job.comm import CommOptions, combine_comm, comm_of_rank
from rnnprof.job.critical_path import PATH, path_of_step
from rnnprof.job.ranks import JobResult, JobRun, map_reduce
from rnnprof.job.whatif import NAMED, replay_of_step
from rnnprof.traces.rank_folder import RankFolder

# the events a fix looks inside: every host operator (PF001's fix removes the operators no other rank runs, PF006's
# scales one operator's host time) and the data-loading ranges
FIX_EVENTS = ScannedNames(host_ops=True)


@dataclass(frozen=True)
class AuditOptions:
    manifest: Manifest | None = None  # the run directory's, whose rank traces the job's are
    host_ops: bool = False  # the launch samples with their host-op executions (the report shows them)


@dataclass(frozen=True)
class RankOutline:
    """What the rules read of one rank's events besides their figures: their count, format, devices, steps, the
    steps' spans on the job's clock and event counts, and the loaders' records the rules read."""

    events: int
    source_format: str
    devices: tuple[Device, ...]
    steps: tuple[int, ...]
    spans: dict
    step_events: dict
    metadata: TableMetadata
    sources: tuple[str, ...]


@dataclass(frozen=True)
class RankAudit:
    """What one rank gives the job's audit (``audit_of_rank``)."""

    outline: RankOutline
    comm: tuple  # ``comm_of_rank``'s
    figures: dict
    memory: MemoryReport | None
    lost_sizes: np.ndarray  # the sizes of the blocks whose frees its allocator records miss
    launches: object  # its ``LaunchSample``, None without linked launches
    summary: RankSummary
    timelines: tuple  # its pipeline timelines (``pipeline.rank_timelines``; none where it sends nothing)
    collectives: tuple  # its process groups and (operation, phase) of its collectives, for the fixes' changes


def _outline(table: EventTable) -> RankOutline:
    meta = table.metadata
    return RankOutline(len(table), table.source_format, table.devices, tuple(int(s) for s in table.steps()),
                       step_spans(table, table.time_base_us), step_events(table),
                       TableMetadata(devices_properties=meta.devices_properties, worker_hosts=meta.worker_hosts,
                                     host_operator_devices=meta.host_operator_devices), table.sources)


def audit_of_rank(table: EventTable, options: AuditOptions):
    """The rank's parts to keep (its critical-path part, the events its fixes look inside) and its ``RankAudit``."""
    inp = rank_input(table, options)
    return audit_parts(inp, options)


def rank_input(table: EventTable, options: AuditOptions) -> AuditInput:
    """The audit input of one rank's table (with the run's manifest, which its memory reads)."""
    if options.manifest is not None:
        table.metadata.manifest = options.manifest  # the rank's memory at the window's start (``analyze_memory``)
    return AuditInput(events=table, manifest=options.manifest)


def audit_parts(inp: AuditInput, options: AuditOptions) -> tuple[dict, RankAudit]:
    """``audit_of_rank`` of a rank's audit input (``rank_input``)."""
    table = inp.events
    comm = comm_of_rank(table, CommOptions(), inp.classes)
    memory, lost = rank_memory(table) if len(table.memory) else (None, np.zeros(0, dtype=np.int64))
    part, summary = rank_part(table, inp.classes)
    figures = {f.name: inp.figure(f) for f in FIGURES}
    launches = launch_sample(table, host_wait_share(comm[0]), host_ops=options.host_ops) if len(table) else None
    rank = RankAudit(_outline(table), comm, figures, memory, lost, launches, summary,
                     tuple(rank_timelines(table, classes=inp.classes)),
                     (known_groups(table.metadata.process_groups, table), recorded_collectives(table)))
    return {PATH: part, NAMED: named_events(table, FIX_EVENTS)}, rank


def memory_of_rank(table: EventTable, options: tuple[Manifest | None, np.ndarray]) -> MemoryReport:
    """The rank's memory report with the job's lost sizes (``rank_memory``)."""
    manifest, sizes = options
    if manifest is not None:
        table.metadata.manifest = manifest
    return rank_memory(table, sizes)[0]


def job_events(ranks: Sequence[RankAudit], memory: MemoryReport | None) -> JobEvents:
    """What the rules know of the job's events, its ranks' combined as of the ranks merged into one table."""
    outlines = [r.outline for r in ranks]
    figures = {f.name: f.combine([r.figures[f.name] for r in ranks]) for f in FIGURES}
    figures[MEMORY.name] = memory
    return JobEvents(events=sum(o.events for o in outlines),
                     source_format="+".join(sorted({o.source_format for o in outlines})),
                     devices=tuple(dict.fromkeys(d for o in outlines for d in o.devices)),
                     steps=tuple(sorted({s for o in outlines for s in o.steps})),
                     spans=combined_spans([o.spans for o in outlines]),
                     metadata=merge_metadata([o.metadata for o in outlines]),
                     comm=combine_comm([r.comm for r in ranks]), figures=figures)


def job_memory(folder: RankFolder, ranks: Sequence[RankAudit], options: AuditOptions,
               selection: StepSelection | None, run: dict, pipeline: PipelineReport | None) -> MemoryReport | None:
    """The ranks' memory reports combined, each made with the sizes of the blocks whose frees any rank's records
    miss: a rank whose own are fewer is read again (in workers) to leave them out of its growth and step peaks
    (``pipeline``: the job's, whose stages are no replicas of each other)."""
    lost = [r.lost_sizes for r in ranks]
    sizes = np.unique(np.concatenate(lost)) if lost else np.zeros(0, dtype=np.int64)
    again = [k for k, r in enumerate(ranks) if r.memory is not None and not np.array_equal(r.lost_sizes, sizes)]
    reports = [r.memory for r in ranks]
    if again:
        subset = RankFolder(folder.path, tuple(folder.files[k] for k in again), folder.notes)
        redone = map_reduce(subset, memory_of_rank, list, (options.manifest, sizes), selection,
                            **{k: v for k, v in run.items() if k != "on_done"}).report
        for k, report in zip(again, redone):
            reports[k] = report
    combined = combined_memory(reports, pipeline)
    sources = ", ".join(s for r in ranks for s in r.outline.sources)
    return replace(combined, source=sources or combined.source) if combined is not None else None


class JobReplays:
    """The ``audit_savings.Replays`` of a job whose ranks were read apart: each round of sets of changes replayed
    at once, every sampled step in a task of its own, from the parts the ranks kept (``JobRun.steps``)."""

    batched = True

    def __init__(self, job: JobRun, ranks: Sequence[RankAudit], names: JobNames, dependencies: Dependencies):
        self.job, self.names, self.dependencies = job, names, dependencies
        counts: dict[int, int] = {}
        for r in ranks:
            for s, n in r.outline.step_events.items():
                counts[s] = counts.get(s, 0) + n
        summaries = [r.summary for r in ranks]
        self.plan = replay_plan(summaries, sampled_of(counts), dependencies)
        self.devices = names.devices
        self.every = len({s for x in summaries for s in x.steps})
        self.steps = list(self.plan.steps)  # each has events in its window: a replay graph (a round says for sure)
        self._rank: str | None = None

    def _latest_rank(self) -> str:
        """The rank that arrives last at the collectives (``Replayer.latest_rank``), found once."""
        if self._rank is None:
            ranks = sorted({d.worker for d in self.devices} - {""})
            self._rank = latest_rank(self.job.steps(replay_of_step, (self.plan, self.dependencies, None, ""),
                                                    self.plan.steps)) if len(ranks) > 1 else "".join(ranks[:1])
        return self._rank

    def savings(self, change_sets: Sequence[tuple]) -> list:
        found: list = []
        asked = []
        for changes in change_sets:
            try:
                check_changes(self.names, changes)
                asked.append((changes, self._latest_rank() if needs_latest_rank(changes) else ""))
                found.append(len(asked) - 1)
            except ChangeError as exc:
                found.append(exc)
        if not asked:
            return found
        per_step = self._per_step(asked)
        self.steps = [s for s, saved in zip(self.plan.steps, per_step) if saved is not None]
        replayed = [saved for saved in per_step if saved is not None]
        return [k if isinstance(k, ChangeError) else [saved[k] for saved in replayed] for k in found]

    def _per_step(self, asked: list) -> list:
        """Each step's ``savings_of_step`` of the sets ``asked``, in one round. Where the steps leave workers idle
        in the round's last wave (3 steps on 2 cores) and no call kept for later fills them, each step of that wave
        is replayed in pieces, each a task with some of the sets (its graph and unchanged replay made in each, the
        same numbers), which the idle workers take."""
        steps, workers = list(self.plan.steps), self.job.workers or 1
        left = len(steps) % workers if len(steps) > 0 else 0
        idle = workers - left - self.job.pending if left else 0
        pieces = min(len(asked), 1 + idle // left) if idle > 0 else 1
        whole, last = (steps[:len(steps) - left], steps[len(steps) - left:]) if pieces > 1 else (steps, [])
        cut = np.linspace(0, len(asked), pieces + 1).round().astype(int).tolist()
        calls = [[self.job.later(savings_of_step, (self.plan, self.dependencies, asked[a:b]), s)
                  for a, b in zip(cut[:-1], cut[1:])] for s in last]
        found = self.job.steps(savings_of_step, (self.plan, self.dependencies, asked), whole)
        for step_calls in calls:
            saved = [c.result() for c in step_calls]
            found.append(None if saved[0] is None else [x for part in saved for x in part])
        return found


def savings_of_step(parts: Sequence[dict], context, step: int) -> list[float] | None:
    """The step's saving of each set of changes asked (``context``: the plan, the dependencies, and each set with
    the rank it is about), from one unchanged replay of it; None where its window holds no event."""
    plan, dependencies, asked = context
    named = [window_events(p[NAMED], plan.windows[step], step) for p in parts]
    sg = job_step_graph([p[PATH] for p in parts], named, plan, step, dependencies)
    if sg is None:
        return None
    base = unchanged_replay(sg)
    return [step_saving(sg, base, changes, rank) for changes, rank in asked]


class JobPaths:
    """The job's critical path, each step's found once whoever asks for it first (a rule every step's, the report
    the typical step's): its task kept for the job's next round (``JobRun.later``) and shared by every later ask with
    the same dependencies (``lacks`` aside: a step's path does not read it), as ``analyze_critical_path`` of the
    ranks merged gives its paths (without the steps' times, which the ranks give apart). A step's path does not
    depend on which other steps are asked with it (``job_plan``'s windows and matched collectives)."""

    def __init__(self, job: JobRun, ranks: Sequence[RankAudit]):
        self.job = job
        self.summaries = [r.summary for r in ranks]
        self.workers = [w for x in self.summaries for w in x.workers]
        self.calls: dict = {}  # (step, dependencies less lacks) -> its ``Later``

    def later(self, steps: Sequence[int] | None = None,
              dependencies: Dependencies = Dependencies()) -> Callable[[], CriticalPathReport]:
        """The function that gives the path over ``steps`` (None: every step) once their tasks ran."""
        plan = job_plan(self.summaries, steps, dependencies)
        same = replace(dependencies, lacks=())
        calls = []
        for s in plan.steps:
            if (s, same) not in self.calls:
                self.calls[(s, same)] = self.job.later(path_of_step, (plan, dependencies, WHAT_IF_OPS), s)
            calls.append(self.calls[(s, same)])
        return lambda: job_report([c.result() for c in calls], self.workers, dependencies)

    def of(self, steps: Sequence[int] | None = None,
           dependencies: Dependencies = Dependencies()) -> CriticalPathReport:
        """The path over ``steps`` (None: every step), its tasks run now where no earlier ask ran them."""
        return self.later(steps, dependencies)()


@dataclass(frozen=True, eq=False)
class AuditedJob:
    """What the audit of a job reads once its ranks are read: its input (``JobEvents``), what the rules are given
    (``known``: the launch statistics, the pipeline, and the critical path when a rule first asks for it) and the
    replays of their fixes (None without events)."""

    input: AuditInput
    known: Known
    replays: JobReplays | None


def audited_job(job: JobRun, ranks: Sequence[RankAudit], options: AuditOptions, dependencies: Dependencies,
                selection: StepSelection | None, run: dict, paths: JobPaths | None = None) -> AuditedJob:
    """The ``AuditedJob`` of the ranks ``job`` read (``audit_parts``; ``run``: ``JobRun``'s, for reading a rank
    again; ``paths``: the job's steps' paths, where another part of a command asks for some of them too)."""
    pipeline = combine_timelines([t for r in ranks for t in r.timelines], options.manifest)
    events = job_events(ranks, job_memory(job.folder, ranks, options, selection, run, pipeline))
    paths = JobPaths(job, ranks) if paths is None else paths
    found: dict = {}

    def critical_path() -> CriticalPathReport:
        if "path" not in found:
            found["path"] = paths.of()
        return found["path"]

    known = Known(launches=launch_stats_of([r.launches for r in ranks]), critical_path=critical_path,
                  pipeline=pipeline)
    names = job_names(_operator_names(events), events.devices, [r.collectives for r in ranks])
    return AuditedJob(AuditInput(manifest=options.manifest, job=events), known,
                      JobReplays(job, ranks, names, dependencies) if events.events else None)


def job_audit(folder: RankFolder, manifest: Manifest | None = None, dependencies: Dependencies = Dependencies(),
              selection: StepSelection | None = None, **run) -> JobResult:
    """``(AuditResult, notes, left_out)`` of every rank in ``folder``: the audit, its savings replayed, as
    ``audit`` and ``replayed_savings`` of the ranks merged into one table give it (``manifest``: the run
    directory's, whose rank traces they are; ``run``: ``JobRun``'s)."""
    options = AuditOptions(manifest)
    with JobRun(folder, **run) as job:
        ranks = job.ranks(audit_of_rank, options, selection, keep=True)
        audited = audited_job(job, ranks, options, dependencies, selection, run)
        result: AuditResult = audit(audited.input, known=audited.known)
        if audited.replays is not None:
            result = replayed_savings(result, audited.replays)
    return JobResult(result, job.notes, job.left_out)


def _operator_names(events: JobEvents):
    """The operators a fix may name (PF006's: those that launched kernels), for ``check_changes``."""
    found = events.figures[LAUNCHING.name]
    return found if not isinstance(found, str) else ()
