"""What a placement rule reports: findings, or why it could not check."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Severity(enum.IntEnum):
    INFO = 0
    WARNING = 1
    ERROR = 2

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> "Severity":
        return cls[text.upper()]


@dataclass(frozen=True)
class PlacementFinding:
    """One problem a placement rule found, with the numbers behind it and how to fix it (``rnnprof audit`` turns
    it into its own ``Finding``: ``rnnprof.analyzers.audit.from_placement``).

    ``cost_us_per_step`` is the rule's estimate of step time lost (None when the
    input holds no trace to time it); ``cost_basis`` says how it was estimated.
    ``evidence`` holds plain numbers and short strings, ready for JSON.
    """

    rule_id: str
    severity: Severity
    title: str
    devices: tuple[str, ...] = ()
    ops: tuple[str, ...] = ()
    evidence: dict = field(default_factory=dict)
    cost_us_per_step: float | None = None
    cost_basis: str = ""
    fix: str = ""


@dataclass(frozen=True)
class NotChecked:
    """A rule that could not run on this input, and why."""

    rule_id: str
    reason: str


def run_checks(rules, subject) -> tuple[list, list[NotChecked], list[str]]:
    """Each rule's ``check(subject)``: the findings of those that ran, the ``NotChecked`` of those that could
    not, and the ids of those that ran, in the rules' order."""
    findings, not_checked, checked = [], [], []
    for rule in rules:
        outcome = rule.check(subject)
        if isinstance(outcome, NotChecked):
            not_checked.append(outcome)
        else:
            checked.append(rule.id)
            findings.extend(outcome)
    return findings, not_checked, checked
