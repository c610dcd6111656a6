"""A pipeline's steps, rank by rank: the window, each rank's busy time and its bubble in four parts, whom it waited
on, its busy time per stage index, and the imbalance between stages (``pipeline_report``).

Per step, the window runs from the first micro-batch work of any rank to the last one's end. A rank's bubble is
the window less its work: warm-up before its first micro-batch work, cool-down after its last, and between them
the time it spent in a send or a receive whose partner (the same transfer on the other rank, ``PeerTransfer.key``) had
not started yet (waiting on a neighbour), and the rest (other). Definitions: docs/commands/pipeline.md.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from rnnprof.analyzers.intervals import merge, subtract, union_length

from .result import (BACKWARD, BUBBLE_PARTS, COOL_DOWN, FORWARD, NEIGHBOUR, OTHER_IDLE, OTHER_WORK, TRANSFER, WARM_UP,
                     PipelineReport, PipelineSchedule, Segment, Stage, StageImbalance, StageStep)
from .timeline import BACKWARD_WORK, FORWARD_WORK, RankTimeline, PeerTransfer

_KIND_NAMES = {FORWARD_WORK: FORWARD, BACKWARD_WORK: BACKWARD}


def positions(timelines: list[RankTimeline], members: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """Each rank's place in its pipeline: its index among its group's members (``members``: the run's record by
    worker, else the trace's), else its order among the ranks."""
    found = {}
    for n, t in enumerate(sorted(timelines, key=lambda t: (t.rank, t.worker))):
        group = members.get(t.worker) or t.members
        found[t.worker] = group.index(t.rank) if t.rank in group else n
    return found


def _shifted(timelines: list[RankTimeline]) -> tuple[list[RankTimeline], float]:
    """The timelines on the earliest one's clock, and that clock's base."""
    base = min(t.time_base_us for t in timelines)
    moved = []
    for t in timelines:
        d = t.time_base_us - base
        if d:
            w = t.work
            t = replace(t, work=replace(w, start=w.start + d, end=w.end + d), time_base_us=base,
                        transfers=tuple(replace(x, start_us=x.start_us + d, end_us=x.end_us + d)
                                        for x in t.transfers))
        moved.append(t)
    return moved, base


def _waits(timelines: list[RankTimeline]) -> tuple[dict[str, list], dict[str, list], int]:
    """Per worker, its waits on a partner, ``(start, end, partner)``: from a send's or a receive's posting to its
    partner's; its transfers, ``(start, end)``: from the later of the two postings to its own end; and how many
    sends and receives found no partner."""
    by_key: dict[tuple, list[tuple[str, PeerTransfer]]] = {}
    for t in timelines:
        for x in t.transfers:
            by_key.setdefault(x.key, []).append((t.worker, x))
    waits: dict[str, list] = {t.worker: [] for t in timelines}
    moving: dict[str, list] = {t.worker: [] for t in timelines}
    unmatched = 0
    for pair in by_key.values():
        if len(pair) != 2 or pair[0][0] == pair[1][0]:
            unmatched += len(pair)
            continue
        (a, x), (b, y) = sorted(pair, key=lambda m: m[1].start_us)
        if y.start_us > x.start_us:
            waits[a].append((x.start_us, min(y.start_us, x.end_us), b))
        for worker, own in ((a, x), (b, y)):
            moving[worker].append((y.start_us, own.end_us))
    return waits, moving, unmatched


def _step_of(t: RankTimeline, step: int, window: tuple[float, float], waits: list, moving: list,
             stage_busy: dict) -> tuple:
    """One rank's ``StageStep`` and segments in one step's window; ``stage_busy`` gathers its busy time per stage
    index."""
    w = t.work
    lo, hi = window
    mine = w.step == step
    s, e = np.clip(w.start[mine], lo, hi), np.clip(w.end[mine], lo, hi)
    kind, stage, micro = w.kind[mine], w.stage[mine], w.micro_batch[mine]
    busy_s, busy_e = merge(s, e)
    pipelined = kind != 2
    first, last = float(s[pipelined].min()), float(e[pipelined].max())
    mid_s, mid_e, _ = subtract(np.array([first]), np.array([last]), busy_s, busy_e)
    warm_s, warm_e, _ = subtract(np.array([lo]), np.array([first]), busy_s, busy_e)  # other work may run then
    cool_s, cool_e, _ = subtract(np.array([last]), np.array([hi]), busy_s, busy_e)
    wait_s = np.array([a for a, _, _ in waits]), np.array([b for _, b, _ in waits])
    waited = _covered_pieces(mid_s, mid_e, *merge(*wait_s))
    rest_s, rest_e, _ = subtract(mid_s, mid_e, *waited)
    flying = _covered_pieces(rest_s, rest_e, *merge(np.array([a for a, _ in moving]),
                                                    np.array([b for _, b in moving])))
    other_s, other_e, _ = subtract(rest_s, rest_e, *flying)
    figures = StageStep(step, hi - lo, float((busy_e - busy_s).sum()), float((warm_e - warm_s).sum()),
                        float((cool_e - cool_s).sum()),
                        float((waited[1] - waited[0]).sum()), float((flying[1] - flying[0]).sum()),
                        float((other_e - other_s).sum()),
                        union_length(s[kind == FORWARD_WORK], e[kind == FORWARD_WORK]),
                        union_length(s[kind == BACKWARD_WORK], e[kind == BACKWARD_WORK]))
    for k in np.unique(stage).tolist():
        stage_busy.setdefault(k, {})[step] = union_length(s[stage == k], e[stage == k])
    segments = [Segment(t.worker, step, _KIND_NAMES.get(int(k), OTHER_WORK), a, b, int(m), int(g))
                for a, b, k, m, g in zip(s.tolist(), e.tolist(), kind.tolist(), micro.tolist(), stage.tolist())
                if b > a]
    parts = ((WARM_UP, (warm_s, warm_e)), (COOL_DOWN, (cool_s, cool_e)), (NEIGHBOUR, waited), (TRANSFER, flying),
             (OTHER_IDLE, (other_s, other_e)))
    segments += [Segment(t.worker, step, part, a, b) for part, (starts, ends) in parts
                 for a, b in zip(np.asarray(starts).tolist(), np.asarray(ends).tolist()) if b > a]
    return figures, segments, _by_partner(mid_s, mid_e, waits)


def _covered_pieces(starts, ends, cover_s, cover_e) -> tuple[np.ndarray, np.ndarray]:
    """The pieces of the intervals that the (sorted, disjoint) cover holds."""
    outside_s, outside_e, _ = subtract(starts, ends, cover_s, cover_e)
    return subtract(starts, ends, outside_s, outside_e)[:2]


def _by_partner(mid_s, mid_e, waits: list) -> dict[str, float]:
    """The waiting between the first and last work, by the partner waited on (each moment counted once: given to
    the partner whose wait started first)."""
    found: dict[str, float] = {}
    counted_s, counted_e = np.zeros(0), np.zeros(0)
    for a, b, partner in sorted(waits):
        s, e = _covered_pieces(mid_s, mid_e, np.array([a]), np.array([b]))
        s, e, _ = subtract(s, e, *merge(counted_s, counted_e))
        if len(s):
            found[partner] = found.get(partner, 0.0) + float((e - s).sum())
            counted_s, counted_e = np.concatenate([counted_s, s]), np.concatenate([counted_e, e])
    return found


def pipeline_report(timelines: list[RankTimeline], schedule: PipelineSchedule, place: dict[str, int], steps: list[int],
                    notes: list[str]) -> PipelineReport:
    """The pipeline's report over ``steps`` (each with micro-batch work on every rank)."""
    timelines, base = _shifted(timelines)
    waits, moving, unmatched = _waits(timelines)
    if unmatched:
        notes = [*notes, f"{unmatched} send(s) or receive(s) matched no partner on another rank; their waits are "
                         f"counted as other idle"]
    windows = {}
    for step in steps:
        pieces = [(t.work.start[m].min(), t.work.end[m].max()) for t in timelines
                  for m in [(t.work.step == step) & t.work.pipelined]]
        windows[step] = (float(min(a for a, _ in pieces)), float(max(b for _, b in pieces)))
    stages, segments, stage_steps = [], {}, {}
    for t in sorted(timelines, key=lambda t: (place[t.worker], t.rank, t.worker)):
        rows, partners, stage_busy = [], {}, {}
        for step in steps:
            lo, hi = windows[step]
            mine = [x for x in waits[t.worker] if x[1] > lo and x[0] < hi]
            flying = [x for x in moving[t.worker] if x[1] > lo and x[0] < hi]
            figures, pieces, by_partner = _step_of(t, step, windows[step], mine, flying, stage_busy)
            rows.append(figures)
            segments.setdefault(step, []).extend(pieces)
            for p, v in by_partner.items():
                partners[p] = partners.get(p, 0.0) + v
        named = {k: v for k, v in stage_busy.items() if k >= 0}
        for k, by_step in named.items():
            stage_steps.setdefault(k, {}).update(by_step)
        stage = Stage(t.worker, place[t.worker], tuple(sorted(named)) or (place[t.worker],), tuple(rows), partners)
        stages.append(replace(stage, stage_busy={k: float(sum(v.values())) for k, v in named.items()}
                              or {place[t.worker]: stage.total("busy_us")}))
    shown = _median_step(stages, steps)
    imbalance = _imbalance(*_units(stages, stage_steps), schedule, steps)
    return PipelineReport(schedule, tuple(stages), tuple(steps), imbalance,
                          tuple(sorted(segments.get(shown, []), key=lambda s: (place[s.worker], s.start_us))),
                          tuple(notes), base)


def _median_step(stages: list[Stage], steps: list[int]) -> int:
    """The step whose bubble is the median (the lower of two): the one the chart shows."""
    if not steps:
        return -1
    fractions = []
    for step in steps:
        rows = [x for s in stages for x in s.steps if x.step == step]
        window = sum(x.window_us for x in rows)
        fractions.append((sum(x.bubble_us for x in rows) / window if window else 0.0, step))
    fractions.sort()
    return fractions[(len(fractions) - 1) // 2][1]


def _units(stages: list[Stage], stage_steps: dict[int, dict[int, float]]) -> tuple[dict, dict]:
    """What the imbalance compares, by step: the stage indices where a rank runs several (their busy time), else
    the pipeline's positions (the median over the ranks at a position, as pp+dp runs several pipelines); and the
    rank that runs each."""
    owner: dict[int, str] = {}
    if any(len(s.stages) > 1 for s in stages):
        for s in stages:
            for k in s.stages:
                owner.setdefault(k, s.worker)
        return {k: dict(v) for k, v in stage_steps.items() if k in owner}, owner
    per: dict[int, dict[int, list[float]]] = {}
    for s in stages:
        owner.setdefault(s.position, s.worker)
        for x in s.steps:
            per.setdefault(s.position, {}).setdefault(x.step, []).append(x.busy_us)
    return {k: {step: float(np.median(v)) for step, v in by.items()} for k, by in per.items()}, owner


def _imbalance(busy: dict[int, dict[int, float]], owner: dict[int, str], schedule: PipelineSchedule,
               steps: list[int]) -> StageImbalance | None:
    """The busiest stage against the others, with the saving bound of ``StageImbalance``."""
    if len(busy) < 2:
        return None
    median = {k: float(np.median(list(v.values()))) for k, v in busy.items() if v}
    worst = max(median, key=lambda k: (median[k], -k))
    others = [median[k] for k in median if k != worst]
    excess = []
    for step in steps:
        theirs = [busy[k][step] for k in busy if k != worst and step in busy[k]]
        if step in busy[worst] and theirs:
            excess.append(busy[worst][step] - float(np.median(theirs)))
    m = max(schedule.micro_batches, 1)
    slots = max(schedule.stages_per_rank, 1) * m + max(schedule.ranks, 1) - 1
    mean = float(np.mean(list(median.values())))
    return StageImbalance(worst, owner[worst], median[worst], float(np.median(others)), mean,
                          max(slots * (median[worst] - mean) / m, 0.0), tuple(excess))


__all__ = ["BUBBLE_PARTS", "pipeline_report", "positions"]
