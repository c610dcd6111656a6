"""A capture window's verdict (``WindowVerdict``): the anomalies that opened it, ordered by what they say of the
cause (``result.by_cause``), the window's audit and its comparison with the baseline window (``diff``)."""

from __future__ import annotations

import re
from typing import Sequence

from rnnprof.analyzers.audit import AuditResult, input_stalls, memory_growth, straggler
from rnnprof.analyzers.diff.result import DiffReport

from .result import INPUT_STALL, MEMORY_GROWTH, STRAGGLER, Anomaly, FindingSummary, WindowVerdict, by_cause

TOP_FINDINGS = 5
# The audit's rules whose finding confirms an anomaly of each kind (any rule for the others).
CONFIRMS = {STRAGGLER: {straggler.RULE_ID}, INPUT_STALL: {input_stalls.RULE_ID, straggler.RULE_ID},
            MEMORY_GROWTH: {memory_growth.RULE_ID}}
TOP_GROWN = 3
_RANK = re.compile(r"rank\s*(\d+)")


def finding_summaries(audit: AuditResult | None) -> tuple[FindingSummary, ...]:
    """The audit's findings as the verdict keeps them, costliest first as the audit ranks them."""
    if audit is None:
        return ()
    return tuple(FindingSummary(rule=f.rule, title=f.title, severity=f.severity.label, rank=f.subject.rank,
                                saving_s=None if f.saving_us is None else f.saving_us / 1e6)
                 for f in audit.findings[:TOP_FINDINGS])


def _ranks_of(finding: FindingSummary) -> set[int]:
    found = _RANK.search(finding.rank or "")
    return {int(found.group(1))} if found else set()


def _confirming(headline: Anomaly | None, findings: tuple[FindingSummary, ...]) -> FindingSummary | None:
    """The first finding beyond info of a rule that confirms ``headline``'s kind and names one of its ranks (a
    finding of the whole job names none and confirms any)."""
    if headline is None:
        return None
    rules = CONFIRMS.get(headline.kind)
    for finding in findings:
        ranks = _ranks_of(finding)
        if finding.severity != "info" and (rules is None or finding.rule in rules) and (
                not ranks or ranks & set(headline.ranks)):
            return finding
    return None


def window_verdict(window: str, anomalies: Sequence[Anomaly], audit: AuditResult | None = None,
                   diff: DiffReport | None = None, baseline_window: str | None = None,
                   notes: Sequence[str] = ()) -> WindowVerdict:
    """The verdict on ``window`` (see ``WindowVerdict``); ``audit`` and ``diff`` None where they could not be made
    (``notes`` say why)."""
    ordered = by_cause(anomalies)
    headline = ordered[0] if ordered else None
    findings = finding_summaries(audit)
    agrees = _confirming(headline, findings)
    step = base = None
    grew: tuple = ()
    if diff is not None and diff.time.headline is not None and diff.time.headline.comparable:
        step, base = diff.time.headline.b.us / 1e6, diff.time.headline.a.us / 1e6
    elif audit is not None and audit.noise.median_us:
        step = audit.noise.median_us / 1e6
    if diff is not None and diff.ops.available:
        grew = tuple((op.key, op.time_delta_us / 1e6) for op in diff.ops.gainers[:TOP_GROWN])
    return WindowVerdict(window=window, headline=headline, anomalies=tuple(ordered), findings=findings,
                         agrees=agrees, step_s=step, baseline_step_s=base, baseline_window=baseline_window,
                         grew=grew, notes=tuple(notes))
