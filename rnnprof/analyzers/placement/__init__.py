"""Placement audit: did the graph run where it should have, who is to blame, what it costs.

Each rule is a pure function ``check(AuditInput) -> list[Finding] | NotChecked`` in its own
module; ``registry.RULES`` lists them and ``audit`` runs them all.
"""

from .finding import Finding, NotChecked, Severity
from .inputs import AuditInput, KernelList, NodePlacement
from .registry import RULES, AuditResult, Rule, audit, configured_rules

__all__ = ["AuditInput", "AuditResult", "Finding", "KernelList", "NodePlacement", "NotChecked", "RULES", "Rule",
           "Severity", "audit", "configured_rules"]
