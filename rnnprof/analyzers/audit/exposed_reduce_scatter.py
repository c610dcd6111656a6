"""PF012: reduce-scatters exposed.

Per rank and step, the exposed time (``collective_exposure``: what compute did not hide, less the waits for the
last member) of its reduce-scatters (FSDP's gradients, gloo's all-reduces that carry them out included); the rank
with the largest median. Judged against the run's jitter and the floor between ranks.

Saving (a bound): that exposed time, median per step; replayed, ``--overlap-comm reduce-scatter`` (``whatif``: no
thread waits for a reduce-scatter but the step's end).
"""

from __future__ import annotations

import numpy as np

from rnnprof.events.names import REDUCE_SCATTER

from . import judge
from .collective_exposure import exposure, worst
from .context import AuditContext
from .finding import Finding, NotChecked, Subject

RULE_ID = "PF012"
TITLE = "Exposed reduce-scatters"


def check(ctx: AuditContext) -> list[Finding] | NotChecked:
    found = exposure(ctx)
    if found is None:
        return NotChecked(RULE_ID, "needs collective records (a PyTorch job's trace)")
    mine = (found.collective == REDUCE_SCATTER) & (found.step >= 0)
    if not mine.any():
        return NotChecked(RULE_ID, "no reduce-scatter in the steps (FSDP's, of its gradients)")
    best = worst(ctx, found, mine)
    if best is None:
        ctx.notes.append(f"{RULE_ID}: every reduce-scatter was hidden behind compute")
        return []
    worker, exposed, saving, verdict = best.worker, best.exposed, best.saving_us, best.verdict
    total = found.per_step(mine, found.dur_us)[worker]
    return [Finding(
        rule=RULE_ID, severity=judge.severity(ctx, verdict, saving),
        title=f"{worker}: {saving / 1000:.2f} ms/step of reduce-scatters not hidden behind compute",
        subject=Subject(rank=worker),
        evidence={"exposed_ms_per_step": round(saving / 1000, 3),
                  "reduce_scatter_ms_per_step": round(float(np.median(list(total.values()))) / 1000, 3),
                  "steps": len(exposed), "significance": verdict.as_dict()},
        saving_us=saving,
        saving_basis="bound: the reduce-scatters' exposed time (not counting waits for late ranks), median per step",
        confidence=verdict.confidence,
        fix="let the reduce-scatters run beside the backward that follows them: no wait on them before the optimizer "
            "(FSDP2 reduce-scatters on its own stream on a GPU), fewer and larger ones (fully_shard larger units), "
            "or reduce in lower precision (MixedPrecisionPolicy(reduce_dtype=torch.bfloat16))",
    )]
