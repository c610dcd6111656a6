"""PF013: tensor parallelism's collectives on the step's path.

A tensor-parallel group is a process group whose all-reduces run in the forward phase (a row-split layer's output,
every block; data parallelism all-reduces gradients, in backward). Per rank and step, the exposed time
(``collective_exposure``: what compute did not hide, less the waits for the last member) of that group's
collectives, forward and backward: inside every layer, with nothing to hide behind, they sit on the step's
critical path. The rank with the largest median; judged against the run's jitter and the floor between ranks;
its severity by the share of the step.

Saving (a bound): that exposed time, median per step; replayed, ``--overlap-comm GROUP`` (``whatif``: no thread
waits for the group's collectives, what asynchronous tensor parallelism would give at best).
"""

from __future__ import annotations

import numpy as np

from rnnprof.events.names import ALL_REDUCE, FORWARD

from . import judge
from .collective_exposure import exposure, worst
from .context import AuditContext
from .finding import Finding, NotChecked, Subject

RULE_ID = "PF013"
TITLE = "Tensor-parallel collectives on the step's path"


def check(ctx: AuditContext) -> list[Finding] | NotChecked:
    found = exposure(ctx)
    if found is None:
        return NotChecked(RULE_ID, "needs collective records (a PyTorch job's trace)")
    groups = sorted(set(found.group[(found.collective == ALL_REDUCE) & (found.phase == FORWARD)].tolist()))
    if not groups:
        return NotChecked(RULE_ID, "no all-reduce in a forward phase: no tensor-parallel group")
    findings = []
    for group in groups:
        mine = (found.group == group) & (found.step >= 0) & (found.collective == ALL_REDUCE)
        best = worst(ctx, found, mine)
        if best is None:
            continue
        worker, exposed, saving, verdict = best.worker, best.exposed, best.saving_us, best.verdict
        calls = np.bincount(found.step[mine & (found.worker == worker)]).max(initial=0)
        share = 100 * saving / ctx.step_us if ctx.step_us > 0 else 0.0
        named = f"process group {group}" if group else "its tensor-parallel group (not named by the trace)"
        findings.append(Finding(
            rule=RULE_ID, severity=judge.severity(ctx, verdict, saving),
            title=f"{worker}: {saving / 1000:.2f} ms/step ({share:.0f} % of the step) of tensor-parallel all-reduces "
                  f"in {named}, nothing to hide behind",
            subject=Subject(rank=worker, op=group or None),
            evidence={"group": group or None, "exposed_ms_per_step": round(saving / 1000, 3),
                      "share_of_step_pct": round(share, 1), "all_reduces_per_step": int(calls),
                      "steps": len(exposed), "significance": verdict.as_dict()},
            saving_us=saving,
            saving_basis="bound: the exposed time of the tensor-parallel group's all-reduces, median per step",
            confidence=verdict.confidence,
            fix="keep tensor parallelism within the fastest links (a node's GPUs), a smaller tensor-parallel degree "
                "with more data parallelism, sequence parallelism (SequenceParallel: reduce-scatter and all-gather in "
                "place of the all-reduce), or asynchronous tensor parallelism (torch's async TP, collective matmul)",
        ))
    return findings or []
