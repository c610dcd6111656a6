"""Placement audit: did the graph run where it should have, who is to blame, what it costs.

Each rule is a pure function ``check(AuditInput) -> list[PlacementFinding] | NotChecked`` in its own
module; ``registry.RULES`` lists them and ``audit_placement`` runs them all. ``rnnprof.analyzers.audit`` runs
them too, beside the performance rules, with its own ``Finding`` and ``AuditResult``.
"""

from .finding import NotChecked, PlacementFinding, Severity
from .inputs import AuditInput, KernelList, NodePlacement
from .registry import RULES, PlacementResult, PlacementRule, audit_placement, configured_rules

__all__ = ["AuditInput", "KernelList", "NodePlacement", "NotChecked", "PlacementFinding", "PlacementResult",
           "PlacementRule", "RULES", "Severity", "audit_placement", "configured_rules"]
