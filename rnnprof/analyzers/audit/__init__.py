"""rnnprof audit: what to fix first. One registry of rules (placement PA001-PA008, performance PF001-...);
each finding names its rank/device/op, estimates the step time it costs and says how sure it is against the
run's own jitter (``rnnprof.analyzers.noise``)."""

from .context import AuditContext, Known
from .finding import Finding, NotChecked, Severity, Subject
from .registry import PERFORMANCE, PLACEMENT, RULES, AuditResult, Rule, audit, from_placement

__all__ = ["AuditContext", "AuditResult", "Finding", "Known", "NotChecked", "PERFORMANCE", "PLACEMENT", "RULES", "Rule",
           "Severity", "Subject", "audit", "from_placement"]
