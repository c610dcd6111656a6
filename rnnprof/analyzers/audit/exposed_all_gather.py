"""PF011: FSDP's forward all-gathers exposed because no prefetch issued them early.

Per rank and step, its forward all-gathers (``collective_exposure``) in order; the first ``FSDP_UNPREFETCHED``
(the root's, the first block's) no block can prefetch; of the rest, those beyond the step's
``FSDP::forward_prefetch`` ranges on the rank (each a block's prefetch of a later one) were issued as their
block's forward began. Their exposed time (what compute did not hide, less the waits for the last member) per
step; the rank with the largest median. Judged against the run's jitter and the floor between ranks.

Saving (a bound): that exposed time, median per step; replayed, ``--prefetch`` (``whatif``: each of them issued
where the block before issued its own). On a CPU rank FSDP2 waits for a prefetched all-gather as soon as it
issues it unless its unshard is asynchronous (``--unshard-async``): the fix says so.
"""

from __future__ import annotations

import numpy as np

from rnnprof.events.names import ALL_GATHER, FORWARD, FSDP_UNPREFETCHED

from . import judge
from .collective_exposure import exposure, worst
from .context import AuditContext
from .finding import Finding, NotChecked, Subject

RULE_ID = "PF011"
TITLE = "All-gathers not prefetched"


def check(ctx: AuditContext) -> list[Finding] | NotChecked:
    found = exposure(ctx)
    if found is None:
        return NotChecked(RULE_ID, "needs collective records (a PyTorch job's trace)")
    forward = (found.collective == ALL_GATHER) & (found.phase == FORWARD) & (found.step >= 0)
    if not forward.any():
        return NotChecked(RULE_ID, "no all-gather in a forward phase (FSDP's, whose blocks gather their parameters)")
    late = _not_prefetched(ctx, found, forward)
    best = worst(ctx, found, late)
    if best is None:
        ctx.notes.append(f"{RULE_ID}: every forward all-gather a block could prefetch was prefetched, or hidden")
        return []
    worker, exposed, saving, verdict = best.worker, best.exposed, best.saving_us, best.verdict
    severity = judge.severity(ctx, verdict, saving)
    mine = late & (found.worker == worker)
    per_step_calls = np.bincount(found.step[mine]).max(initial=0) if mine.any() else 0
    return [Finding(
        rule=RULE_ID, severity=severity,
        title=f"{worker}: {saving / 1000:.2f} ms/step of forward all-gathers not prefetched and not hidden",
        subject=Subject(rank=worker),
        evidence={"exposed_ms_per_step": round(saving / 1000, 3), "all_gathers_per_step": int(per_step_calls),
                  "their_ms_per_step": round(float(np.median(list(found.per_step(mine, found.dur_us)[worker]
                                                                   .values()))) / 1000, 3),
                  "steps": len(exposed), "significance": verdict.as_dict()},
        saving_us=saving,
        saving_basis="bound: the exposed time of the forward all-gathers no prefetch issued, median per step",
        confidence=verdict.confidence,
        fix="prefetch each block's all-gather from the block before: set_modules_to_forward_prefetch([next block]) "
            "(trace --forward-prefetch 1); on CPU ranks FSDP2 then waits for it at once unless its unshard is "
            "asynchronous (_set_unshard_async_op(True), trace --unshard-async)",
    )]


def _not_prefetched(ctx: AuditContext, found, forward: np.ndarray) -> np.ndarray:
    """Of ``forward`` (the forward all-gathers), per rank and step those from the ``FSDP_UNPREFETCHED``-th on that
    the rank's prefetch ranges of the step do not account for (the latest ones first)."""
    prefetches = found.prefetches
    late = np.zeros(len(found.row), dtype=bool)
    for w in np.unique(found.worker[forward]).tolist():
        for s in np.unique(found.step[forward & (found.worker == w)]).tolist():
            mine = np.flatnonzero(forward & (found.worker == w) & (found.step == s))
            mine = mine[np.argsort(found.start_us[mine], kind="stable")][FSDP_UNPREFETCHED:]
            late[mine[:max(len(mine) - prefetches.get((w, s), 0), 0)]] = True
    return late
