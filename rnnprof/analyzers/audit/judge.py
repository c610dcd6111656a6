"""Judging a per-step figure, for the performance rules: against the run's jitter (significant or not), and the
severity of its saving as a share of the step time."""

from __future__ import annotations

from rnnprof.analyzers.noise import Significance, significance

from .context import AuditContext
from .finding import Severity

WARNING_PCT = 5.0  # a significant saving above this share of the step is a warning
ERROR_PCT = 25.0  # and above this one an error


def judged(ctx: AuditContext, per_step_us: list[float]) -> Significance:
    return significance(per_step_us, ctx.noise.spread_us)


def judged_duration(ctx: AuditContext, per_step_us: list[float]) -> Significance:
    """A range's own duration in each step (the loop's wait for its batch): no difference of two noisy times,
    so the step's jitter cannot make it; it must exceed ``K`` times its own spread and the step time's spread
    once, or the step time's spread in every step (``noise.LEAST_STEPS`` or more; a saving within the jitter
    stays info)."""
    return significance(per_step_us, ctx.noise.spread_us, jitter_k=1.0, every_step=True)


def severity(ctx: AuditContext, verdict: Significance, saving_us: float) -> Severity:
    """Info unless the figure is significant against the jitter; then by its share of the step time."""
    if not verdict.significant or ctx.step_us <= 0:
        return Severity.INFO
    pct = 100 * saving_us / ctx.step_us
    return Severity.ERROR if pct >= ERROR_PCT else Severity.WARNING if pct >= WARNING_PCT else Severity.INFO
