"""PF003: GPU idle time by cause (``rnnprof.analyzers.idle``): host-bound, launch-bound or waiting.

Per GPU and step: idle time split into host wait (the launch came after the GPU ran dry: host-bound),
kernel wait (short gaps between back-to-back kernels: launch-bound, many short kernels) and other (waiting
on an event, another stream or a dependency). The GPU and cause with the largest median per step is
reported; saving (a bound): that median, the idle time removing the cause would fill at most. Judged against
the run's jitter (``rnnprof.analyzers.noise``).
"""

from __future__ import annotations

import numpy as np

from . import judge
from .context import AuditContext
from .finding import Finding, NotChecked, Subject

RULE_ID = "PF003"
TITLE = "GPU idle by cause"
CAUSES = {"host_wait_us": "host-bound (launches come late)",
          "kernel_wait_us": "launch-bound (gaps between short back-to-back kernels)",
          "other_us": "waiting on events, other streams or dependencies"}
FIXES = {"host_wait_us": "take work off the host thread (larger batches, fewer Python ops, torch.compile, "
                         "CUDA graphs) or move input preparation to DataLoader workers",
         "kernel_wait_us": "fuse small kernels (torch.compile) or capture them in a CUDA graph",
         "other_us": "look for synchronizations (cudaStreamSynchronize, .item(), event waits) between streams"}


def check(ctx: AuditContext) -> list[Finding] | NotChecked:
    if not ctx.has_events or not ctx.comm.devices:
        return NotChecked(RULE_ID, "needs a trace with device activity")
    gpus = ctx.idle_gpus
    if not gpus:
        return NotChecked(RULE_ID, "needs GPU work with its launches in the trace")
    best = None
    for d in gpus:
        for cause in CAUSES:
            per = [getattr(c, cause) for c in d.idle.steps.values()]
            median = float(np.median(per))
            if best is None or median > best[2]:
                best = (d, cause, median, per)
    device, cause, median, per = best
    verdict = judge.judged(ctx, per)
    severity = judge.severity(ctx, verdict, median)
    idle = float(np.median([c.idle_us for c in device.idle.steps.values()]))
    return [Finding(
        rule=RULE_ID, severity=severity,
        title=f"{device.device.label} idle {median / 1000:.2f} ms/step, {CAUSES[cause]}",
        subject=Subject(rank=device.device.worker or None, device=device.device.label),
        evidence={"cause": cause.removesuffix("_us"), "cause_ms_per_step": round(median / 1000, 3),
                  "cause_ms_total": round(sum(per) / 1000, 3),
                  "idle_ms_per_step": round(idle / 1000, 3), "steps": len(per),
                  "significance": verdict.as_dict()},
        saving_us=median,
        saving_basis="bound: idle time of that cause, median per step (removing the cause fills at most this)",
        confidence=verdict.confidence,
        fix=FIXES[cause],
    )]
