"""PF007: CUDA (HIP) graphs not used where launch overhead dominates.

A GPU whose work no graph launch ran (``rnnprof.analyzers.copies``: no ``cudaGraphLaunch``/``hipGraphLaunch``
launched any of its work) and whose kernels are mostly short (``rnnprof.analyzers.launches``: at least
``SHORT_SHARE`` of them shorter than its short-kernel threshold), where launch overhead dominates: idle time
waiting on the host plus short gaps between back-to-back kernels (``rnnprof.analyzers.idle``), median per
step, is at least ``DOMINANT_SHARE`` of the median step time. Saving (a bound):
that overhead, median per step, what replaying the step's kernels from a graph could remove at most. Judged
against the run's jitter (``rnnprof.analyzers.noise``). A GPU that already runs graphs is not reported (a note
says how many of its kernels they launch).
"""

from __future__ import annotations

import numpy as np

from . import judge
from .context import AuditContext
from .finding import Finding, NotChecked, Subject

RULE_ID = "PF007"
TITLE = "CUDA graphs not used where launch overhead dominates"
SHORT_SHARE = 0.5
DOMINANT_SHARE = 0.5  # as launches.LAUNCH_BOUND_SHARE


def check(ctx: AuditContext) -> list[Finding] | NotChecked:
    if not ctx.has_events or not ctx.comm.devices:
        return NotChecked(RULE_ID, "needs a trace with GPU work")
    gpus = ctx.idle_gpus
    launches = ctx.launches
    if not gpus or not launches.available:
        return NotChecked(RULE_ID, "needs GPU kernels with their launches in the trace")
    copies = ctx.comm.copies
    graphs = {d.device: d.graphs for d in copies.devices} if copies is not None and copies.available else {}
    found = []
    for d in gpus:
        graph = graphs.get(d.device.label)
        if graph is not None and graph.launches:
            share = graph.kernel_share
            ctx.notes.append(f"{RULE_ID}: {d.device.label} already runs graphs ({graph.launches} launches"
                             + (f", {share:.0%} of its kernels)" if share is not None else ")"))
            continue
        if launches.short_share < SHORT_SHARE:
            continue
        per = [c.host_wait_us + c.kernel_wait_us for c in d.idle.steps.values()]
        median = float(np.median(per))
        if ctx.step_us <= 0 or median < DOMINANT_SHARE * ctx.step_us:
            continue
        verdict = judge.judged(ctx, per)
        found.append(Finding(
            rule=RULE_ID, severity=judge.severity(ctx, verdict, median),
            title=(f"{d.device.label}: {launches.short_share:.0%} of kernels are short and launch overhead idles "
                   f"it {median / 1000:.2f} ms/step, with no CUDA graph"),
            subject=Subject(rank=d.device.worker or None, device=d.device.label),
            evidence={"short_kernel_share": round(launches.short_share, 3),
                      "short_kernel_us": launches.short_kernel_us, "kernels": launches.kernels,
                      "launch_delay_median_us": launches.delay_median_us,
                      "overhead_ms_per_step": round(median / 1000, 3), "graph_launches": 0,
                      "significance": verdict.as_dict()},
            saving_us=median,
            saving_basis="bound: host-wait plus kernel-wait idle time, median per step (a graph removes at most this)",
            confidence=verdict.confidence,
            fix="capture the step's kernels in a CUDA graph (torch.cuda.graphs, torch.compile mode='reduce-overhead')",
        ))
    return found
