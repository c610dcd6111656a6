"""Where a pipeline's schedule comes from: the run's manifest (``parallel``, what ``trace --parallel pp`` ran), what
the user says (``pipeline --schedule/--micro-batches/--stages-per-rank``), else what the trace shows: the ranks
of the group the sends and receives run in, the stage indices torch's interleaved runtime names (``PP:2F0``), the
micro-batches each stage forwards in a step (its ranges, else the first stage's sends), and whether a stage ran a
backward before its last forward (1F1B) or not (GPipe). Each figure's source is said (``PipelineSchedule.source``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rnnprof.events import Manifest
from rnnprof.events.names import GPIPE, INTERLEAVED_1F1B, ONE_F_ONE_B, PIPELINE_SCHEDULES

from .result import PipelineSchedule
from .timeline import BACKWARD_WORK, FORWARD_WORK, RankTimeline

MANIFEST = "the run's manifest"
FLAGS = "given"
PIPELINE_DIM = "pp"  # the mesh dimension and process group of a run's pipeline (``parallel.mesh_dims``)


@dataclass(frozen=True)
class Given:
    """What the user says of the schedule (None: not said; the trace or the manifest tells)."""

    kind: str | None = None
    micro_batches: int | None = None
    stages_per_rank: int | None = None


def manifest_schedule(manifest: Manifest | None) -> PipelineSchedule | None:
    """The schedule a run of ``trace --parallel pp|pp+dp`` recorded in its manifest; None for any other run."""
    layout = manifest.extra.get("parallel") if manifest is not None else None
    if not isinstance(layout, dict) or layout.get("schedule") not in PIPELINE_SCHEDULES:
        return None
    per_rank = _count(layout.get("stages_per_rank")) or 1
    stages, micro = _count(layout.get("stages")), _count(layout.get("micro_batches"))
    if not stages or not micro:
        return None
    return PipelineSchedule(layout["schedule"], stages // per_rank, micro, per_rank, MANIFEST)


def manifest_members(manifest: Manifest | None) -> dict[str, tuple[int, ...]]:
    """Each rank's pipeline group members (``rank<r>`` -> global ranks in stage order) as the manifest records its
    process groups; {} where it records none."""
    found = {}
    for entry in manifest.ranks if manifest is not None else ():
        group = (entry.get("process_groups") or {}).get(PIPELINE_DIM) if isinstance(entry, dict) else None
        ranks = group.get("ranks") if isinstance(group, dict) else None
        if isinstance(entry.get("rank"), int) and isinstance(ranks, list) and all(isinstance(r, int) for r in ranks):
            found[f"rank{entry['rank']}"] = tuple(ranks)
    return found


def _count(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def infer_schedule(timelines: list[RankTimeline], positions: dict[str, int], steps: list[int],
                   given: Given) -> PipelineSchedule:
    """The schedule as the user gives it, each figure not given told by the trace (see the module docstring)."""
    ranks = len(set(positions.values()))
    told = []
    per_rank = given.stages_per_rank
    if per_rank is None:
        per_rank = max((len(t.stages_seen) for t in timelines), default=0) or 1
        told.append("stages per rank: the stage indices its ranges name" if per_rank > 1 else "")
    micro = given.micro_batches
    if micro is None:
        micro, how = _micro_batches(timelines, positions, steps, per_rank)
        told.append(f"micro-batches: {how}")
    kind = given.kind
    if kind is None:
        kind, how = _kind(timelines, steps, per_rank)
        told.append(f"schedule: {how}")
    told = [t for t in told if t]
    named = [flag for flag, value in (("--schedule", given.kind), ("--micro-batches", given.micro_batches),
                                      ("--stages-per-rank", given.stages_per_rank)) if value is not None]
    source = "; ".join([*([f"{FLAGS}: {', '.join(named)}"] if named else []),
                        *([f"inferred from the trace: {'; '.join(told)}"] if told else [])])
    return PipelineSchedule(kind, ranks, micro, per_rank, source)


def _micro_batches(timelines: list[RankTimeline], positions: dict[str, int], steps: list[int],
                   per_rank: int) -> tuple[int, str]:
    """The micro-batches a step runs: the forward micro-batches the ranges name, per stage index; else the sends
    of the pipeline's first rank per step (one per micro-batch and stage index it hands on)."""
    counts = [c for t in timelines for s, c in t.micro_batches.items() if s in steps and c > 0]
    if counts:
        return int(np.median(counts)), "the forward ranges of each stage per step"
    first = [t for t in timelines if positions.get(t.worker) == 0]
    sends = [sum(1 for x in t.transfers if x.step == s and x.send in (1, 2)) for t in first for s in steps]
    sends = [n for n in sends if n > 0]
    if sends:
        return max(int(np.median(sends)) // per_rank, 1), "the first rank's sends per step"
    return 0, "not told (no ranges and no sends of the first rank)"


def _kind(timelines: list[RankTimeline], steps: list[int], per_rank: int) -> tuple[str, str]:
    """Interleaved where a rank runs several stages; else 1F1B where a rank started a backward before its last
    forward of a step, GPipe where every rank ran all its forwards first."""
    if per_rank > 1:
        return INTERLEAVED_1F1B, "several stages on each rank"
    labelled = False
    for t in timelines:
        w = t.work
        for step in steps:
            forward = w.start[(w.step == step) & (w.kind == FORWARD_WORK)]
            backward = w.start[(w.step == step) & (w.kind == BACKWARD_WORK)]
            if len(forward) and len(backward):
                labelled = True
                if backward.min() < forward.max():
                    return ONE_F_ONE_B, f"{t.worker} ran a backward before its last forward of step {step}"
    if labelled:
        return GPIPE, "every rank ran all its forwards before its first backward"
    return "", "not told (no forward and backward work told apart)"
