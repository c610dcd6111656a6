"""PF014: a pipeline's bubble above its schedule's theory.

The pipeline's bubble (``analyzers.pipeline``: each rank's window less its work, over every rank) against the
schedule's, (p-1)/(m+p-1), (p-1)/(v*m+p-1) interleaved. Per step, what a bubble at the theory's fraction would
save: the window less the busiest rank's work over (1 - the theory). The largest of the bubble's parts (waiting
on a neighbour, transfer, warm-up, cool-down, other) says where the excess sits and what to try.

Saving (a bound), per step: that excess, the median over the steps; judged against the run's jitter and, between
processes, ``noise.CROSS_RANK_FLOOR_US``. No replay gives it: the replay across process groups that would predict a
pipeline's step is not built.
"""

from __future__ import annotations

import numpy as np

from rnnprof.analyzers.noise import CROSS_RANK_FLOOR_US, significance

from . import judge
from .context import AuditContext
from .finding import Finding, NotChecked, Subject

RULE_ID = "PF014"
TITLE = "pipeline bubble above its schedule's theory"
PARTS = (("waiting on a neighbour", "neighbour_us"), ("transfer", "transfer_us"), ("warm-up", "warm_up_us"),
         ("cool-down", "cool_down_us"), ("other idle", "other_us"))
FIXES = {
    "neighbour_us": "the stages wait on each other: balance them (PF015), run more micro-batches (the theory falls "
                    "as m grows) or an interleaved schedule",
    "transfer_us": "the sends and receives themselves take the time: a faster link between the stages, fewer or "
                   "larger messages, or transfers overlapped with compute",
    "warm_up_us": "filling the pipeline takes the time: more micro-batches or an interleaved schedule",
    "cool_down_us": "draining the pipeline takes the time: more micro-batches or an interleaved schedule",
    "other_us": "the ranks idle between micro-batches outside any transfer: the host's work between them (the "
                "schedule's own, the loss)",
}


def check(ctx: AuditContext) -> list[Finding] | NotChecked:
    report = ctx.pipeline
    if report is None:
        return NotChecked(RULE_ID, "needs a pipeline: two ranks or more that send to each other "
                                   "(torch.distributed.pipelining)")
    theory = report.schedule.theory
    if theory is None:
        return NotChecked(RULE_ID, "needs the pipeline's micro-batches per step (the run's manifest, the trace's "
                                   "ranges or the first rank's sends)")
    excess = report.excess_bubble_us
    saving = float(np.median(excess))
    if saving <= 0:
        return []
    verdict = significance(excess, ctx.noise.spread_us, floor_us=CROSS_RANK_FLOOR_US)
    steps = max(len(report.steps), 1)
    parts = {field: sum(s.total(field) for s in report.stages) / steps for _, field in PARTS}
    name, field = max(PARTS, key=lambda p: parts[p[1]])
    worst = max(report.stages, key=lambda s: s.bubble_fraction)
    schedule = report.schedule
    return [Finding(
        rule=RULE_ID, severity=judge.severity(ctx, verdict, saving),
        title=(f"pipeline bubble {100 * report.bubble_fraction:.1f}% of the ranks' time against the schedule's "
               f"theory {100 * theory:.1f}% ({schedule.kind or 'schedule not told'}, {schedule.ranks} ranks, "
               f"{schedule.micro_batches} micro-batches); most of it {name}, {parts[field] / 1000:.2f} ms/step "
               f"over the ranks"),
        subject=Subject(rank=worst.worker),
        evidence={"bubble_pct": round(100 * report.bubble_fraction, 2), "theory_pct": round(100 * theory, 2),
                  "schedule": schedule.as_dict(), "excess_ms_per_step": [round(x / 1000, 3) for x in excess],
                  **{f"{f.removesuffix('_us')}_ms_per_step": round(parts[f] / 1000, 3) for _, f in PARTS},
                  "steps": len(report.steps), "significance": verdict.as_dict()},
        saving_us=saving,
        saving_basis=("bound: the pipeline's window less the busiest rank's work over (1 - the schedule's "
                      "theoretical bubble), median per step: what a bubble at the theory would save; no replay "
                      "across process groups predicts it yet"),
        confidence=verdict.confidence, fix=FIXES[field])]
