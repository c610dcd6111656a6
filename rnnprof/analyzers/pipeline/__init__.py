"""A pipeline's bubble against its schedule's theory, stage by stage: ``analyze_pipeline`` of a table (every rank
on one clock), or ``combine_timelines`` of its ranks' ``rank_timelines`` found apart (a job's rank files).

The modules: ``timeline`` (one rank's work and transfers), ``schedule`` (the schedule: the run's manifest, the
user's flags or the trace), ``bubble`` (the steps' windows, bubbles, waits and the imbalance), ``result``.
Definitions: docs/commands/pipeline.md.
"""

from __future__ import annotations

import numpy as np

from rnnprof.events import EventTable, Manifest

from .bubble import pipeline_report, positions
from .result import (BACKWARD, BUBBLE_PARTS, COOL_DOWN, FORWARD, NEIGHBOUR, OTHER_IDLE, OTHER_WORK, TRANSFER,
                     WARM_UP, WORK_KINDS, PipelineReport, PipelineSchedule, Segment, Stage, StageImbalance, StageStep)
from .schedule import Given, infer_schedule, manifest_members, manifest_schedule
from .timeline import RankTimeline, rank_timelines

__all__ = ["BACKWARD", "BUBBLE_PARTS", "COOL_DOWN", "FORWARD", "Given", "NEIGHBOUR", "OTHER_IDLE", "OTHER_WORK",
           "PipelineReport", "RankTimeline", "PipelineSchedule", "Segment", "Stage", "StageImbalance", "StageStep",
           "TRANSFER", "WARM_UP", "WORK_KINDS", "analyze_pipeline", "combine_timelines", "pipeline_places",
           "rank_timelines"]


def analyze_pipeline(table: EventTable, given: Given = Given(),
                     classes: np.ndarray | None = None) -> PipelineReport | None:
    """The pipeline of ``table``'s ranks; None where no two ranks send to each other (``classes``: the table's
    ``classify``, when the caller has it)."""
    return combine_timelines(rank_timelines(table, classes=classes), table.metadata.manifest, given)


def combine_timelines(timelines: list[RankTimeline], manifest: Manifest | None = None,
                      given: Given = Given()) -> PipelineReport | None:
    """The pipeline of ranks found apart (``rank_timelines`` of each), as ``analyze_pipeline`` of them on one
    clock gives it; None with fewer than two ranks that send or receive, or no step they all work in."""
    found = _placed(timelines, manifest, given)
    if found is None:
        return None
    timelines, schedule, place, steps, partial = found
    notes = []
    if partial:
        notes.append(f"{len(partial)} step(s) left out: some ranks recorded no micro-batch work in them "
                     f"(steps {', '.join(map(str, partial))})")
    told = sorted({t.ranges for t in timelines})
    notes.append("micro-batches told apart by " + ("; ".join(t or "none" for t in told) if any(told) else
                                                  "no ranges: forward is the work outside autograd's backward "
                                                  "functions and the optimizer"))
    return pipeline_report(timelines, schedule, place, steps, notes)


def _placed(timelines: list[RankTimeline], manifest: Manifest | None, given: Given):
    """The ranks that work in micro-batches, their schedule, their places, the steps they all work in and those
    only some work in; None where fewer than two ranks do or they share no step."""
    timelines = [t for t in timelines if t.work.pipelined.any()]
    if len(timelines) < 2:
        return None
    place = positions(timelines, manifest_members(manifest))
    each = [{int(s) for s in np.unique(t.work.step[t.work.pipelined]) if s >= 0} for t in timelines]
    steps = sorted(set.intersection(*each))
    if not steps:
        return None
    partial = sorted(set.union(*each) - set(steps))
    recorded = manifest_schedule(manifest)
    if recorded is not None and all(v is None for v in (given.kind, given.micro_batches, given.stages_per_rank)):
        return timelines, recorded, place, steps, partial
    return timelines, infer_schedule(timelines, place, steps, given), place, steps, partial


def pipeline_places(table: EventTable) -> tuple[PipelineSchedule, dict[str, int]] | None:
    """The table's pipeline schedule and each pipeline rank's place in it (``worker -> position``), from the run's
    manifest or the trace's sends and receives; None where the table holds no pipeline."""
    found = _placed(rank_timelines(table), table.metadata.manifest, Given())
    return None if found is None else (found[1], found[2])
