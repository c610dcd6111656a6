"""PF015: one pipeline stage busier than the others, setting the pipeline's pace.

The busiest stage (``analyzers.pipeline``'s imbalance: a stage index where ranks run several, else a pipeline
position), its busy time per step against the other stages' median, step by step. In a pipeline every micro-batch
passes every stage, so the slowest stage's time per micro-batch sets each of the schedule's v*m + p - 1 slots.

Saving (a bound), per step: (v*m + p - 1)/m times the stage's busy time less the stages' mean: the slots at the mean
stage's pace; judged on the step-by-step excess against the run's jitter and, between processes,
``noise.CROSS_RANK_FLOOR_US``. No replay gives it: the replay across process groups that would predict a pipeline's
step with a layer moved is not built.
"""

from __future__ import annotations

from rnnprof.analyzers.noise import CROSS_RANK_FLOOR_US, significance

from . import judge
from .context import AuditContext
from .finding import Finding, NotChecked, Subject

RULE_ID = "PF015"
TITLE = "pipeline stage busier than the others"


def check(ctx: AuditContext) -> list[Finding] | NotChecked:
    report = ctx.pipeline
    if report is None or report.imbalance is None:
        return NotChecked(RULE_ID, "needs a pipeline of two stages or more (torch.distributed.pipelining)")
    found = report.imbalance
    if found.excess_us <= 0 or found.bound_us <= 0:
        return []
    verdict = significance(list(found.per_step_excess_us), ctx.noise.spread_us, floor_us=CROSS_RANK_FLOOR_US)
    schedule = report.schedule
    waited = sum(s.waited_on.get(found.worker, 0.0) for s in report.stages) / max(len(report.steps), 1)
    return [Finding(
        rule=RULE_ID, severity=judge.severity(ctx, verdict, found.bound_us),
        title=(f"stage {found.stage} ({found.worker}) busy {found.busy_us / 1000:.2f} ms/step, "
               f"{100 * found.share:+.0f}% against the other stages' median ({found.others_median_us / 1000:.2f} "
               f"ms); the other ranks waited {waited / 1000:.2f} ms/step on it"),
        subject=Subject(rank=found.worker),
        evidence={**found.as_dict(), "others_waited_on_it_ms_per_step": round(waited / 1000, 3),
                  "excess_ms_per_step": [round(x / 1000, 3) for x in found.per_step_excess_us],
                  "micro_batches": schedule.micro_batches, "ranks": schedule.ranks,
                  "stages_per_rank": schedule.stages_per_rank, "significance": verdict.as_dict()},
        saving_us=found.bound_us,
        saving_basis=("bound: (v*m+p-1)/m x (the stage's busy time per step - the stages' mean): the schedule's "
                      "slots at the mean stage's pace, median; no replay across process groups predicts it yet"),
        confidence=verdict.confidence,
        fix=(f"move work from stage {found.stage} to the others: split the model at another layer "
             f"(PipelineStage's split; rnnprof's --stage-layers)"))]
