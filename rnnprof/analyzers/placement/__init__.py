"""Placement audit: did the graph run where it should have, who is to blame, what it costs.

Each rule is a pure function ``check(AuditInput) -> list[Finding] | NotChecked`` in its own
module; ``registry.RULES`` lists them and ``audit`` runs them all.
"""

from .finding import Finding, NotChecked, Severity
from .inputs import AuditInput, NodePlacement
from .registry import RULES, AuditResult, Rule, audit, configured_rules, rule_by_id

__all__ = ["AuditInput", "AuditResult", "Finding", "NodePlacement", "NotChecked", "RULES", "Rule",
           "Severity", "audit", "configured_rules", "rule_by_id"]
