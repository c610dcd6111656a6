"""PF005: input pipeline stalls: the training loop waiting for its next batch.

Per rank and step, the time of its data-loading ranges (PyTorch's ``enumerate(DataLoader)#...__next__``,
the loop fetching the next batch; ``INPUT_RANGE``), summed over the step (the range's own step). The rank with
the largest median per step is reported; saving (a bound): that median, what a prefetched input would save
at most. Judged against the run's jitter as a duration the trace times itself (``judge.judged_duration``).
"""

from __future__ import annotations

import re

import numpy as np

from rnnprof.analyzers.placement.inputs import AuditInput, EventsFigure, merged

from . import judge
from .context import AuditContext
from .finding import Finding, NotChecked, Subject

RULE_ID = "PF005"
TITLE = "Input pipeline stalls"
INPUT_RANGE = re.compile(r"^enumerate\(DataLoader\)#.*__next__")


def check(ctx: AuditContext) -> list[Finding] | NotChecked:
    if not ctx.has_events:
        return NotChecked(RULE_ID, "needs a trace")
    ranges = ctx.figure(RANGES)
    if not ranges:
        return NotChecked(RULE_ID, "no data-loading ranges (enumerate(DataLoader)#...__next__) in the steps")
    steps = ctx.placement.steps
    best = None
    for worker in sorted(ranges):
        by_step, fetches = ranges[worker]
        per = [by_step.get(s, 0.0) for s in steps]
        median = float(np.median(per))
        if best is None or median > best[1]:
            best = (worker, median, per, fetches)
    worker, median, per, n = best
    verdict = judge.judged_duration(ctx, per)
    return [Finding(
        rule=RULE_ID, severity=judge.severity(ctx, verdict, median),
        title=f"{worker or 'the loop'} waits {median / 1000:.2f} ms/step for its next batch (DataLoader)",
        subject=Subject(rank=worker or None, op="enumerate(DataLoader)"),
        evidence={"ms_per_step": round(median / 1000, 3), "fetches": n, "steps": len(per),
                  "per_step_ms": {str(s): round(v / 1000, 3) for s, v in zip(steps, per)},
                  "significance": verdict.as_dict()},
        saving_us=median,
        saving_basis="bound: the time fetching the next batch, median per step (prefetching saves at most this)",
        confidence=verdict.confidence,
        fix="prefetch: more DataLoader workers (num_workers), prefetch_factor, pin_memory, persistent_workers",
    )]


def _ranges(inp: AuditInput) -> dict[str, tuple[dict[int, float], int]]:
    """Worker -> (step -> the time of its data-loading ranges of the step, where it had any; how many ranges in
    steps it had)."""
    table = inp.events
    codes = [i for i, s in enumerate(table.strings) if INPUT_RANGE.match(s)]
    rows = np.flatnonzero(np.isin(table.name, codes) & (table.step >= 0)) if codes else np.zeros(0, dtype=int)
    found = {}
    for worker in sorted({table.devices[d].worker for d in np.unique(table.device[rows])}):
        mine = rows[[table.devices[d].worker == worker for d in table.device[rows]]]
        found[worker] = ({int(s): float(table.dur[mine][table.step[mine] == s].sum())
                          for s in np.unique(table.step[mine])}, len(mine))
    return found


RANGES = EventsFigure("input-ranges", _ranges, merged)
