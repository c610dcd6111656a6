"""The placement rules, in report order, and the function that runs them."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Callable

from . import (frameworks, imbalance, inter_op_threads, missing_kernels, ps_balance, replica_pinning, soft_placement,
               transfers, update_placement)
from .finding import NotChecked, PlacementFinding, Severity, run_checks
from .inputs import AuditInput


@dataclass(frozen=True)
class PlacementRule:
    """A placement rule: its id (e.g. ``PA004-device-imbalance``), title and check."""

    id: str
    title: str
    check: Callable[[AuditInput], "list[PlacementFinding] | NotChecked"]


RULES: tuple[PlacementRule, ...] = tuple(
    PlacementRule(module.RULE_ID, module.TITLE, module.check)
    for module in (soft_placement, replica_pinning, update_placement, imbalance, transfers,
                   inter_op_threads, missing_kernels, ps_balance)
)


def configured_rules(imbalance_threshold: float = imbalance.WARNING_SPREAD) -> tuple[PlacementRule, ...]:
    """``RULES`` with their thresholds set: ``imbalance_threshold`` is PA004's spread, a fraction."""
    return tuple(replace(rule, check=functools.partial(imbalance.check, threshold=imbalance_threshold))
                 if rule.id == imbalance.RULE_ID else rule for rule in RULES)


@dataclass(frozen=True)
class PlacementResult:
    """What the placement rules found on one input, worst first, and which rules ran, could not, or do not apply
    (``rnnprof placement-audit``'s result)."""

    findings: tuple[PlacementFinding, ...]
    not_checked: tuple[NotChecked, ...]
    checked: tuple[str, ...]  # ids of rules that ran
    rules: tuple[PlacementRule, ...] = field(default=RULES, repr=False)
    framework: str = frameworks.TENSORFLOW  # what the input was recorded from
    not_applicable: tuple[NotChecked, ...] = ()  # rules that cannot apply to that framework, and why

    def at_or_above(self, severity: Severity) -> list[PlacementFinding]:
        return [f for f in self.findings if f.severity >= severity]

    @property
    def worst(self) -> Severity | None:
        return max((f.severity for f in self.findings), default=None)


def audit_placement(inp: AuditInput, rules: tuple[PlacementRule, ...] = RULES) -> PlacementResult:
    """Run every rule that applies to the input's framework; findings sorted worst first, then by estimated cost."""
    excluded = frameworks.not_applicable(inp)
    skipped = [NotChecked(rule.id, excluded[rule.id]) for rule in rules if rule.id in excluded]
    findings, not_checked, checked = run_checks([rule for rule in rules if rule.id not in excluded], inp)
    findings.sort(key=lambda f: (-int(f.severity), -(f.cost_us_per_step or 0.0), f.rule_id))
    return PlacementResult(tuple(findings), tuple(not_checked), tuple(checked), rules, frameworks.framework(inp),
                           tuple(skipped))
