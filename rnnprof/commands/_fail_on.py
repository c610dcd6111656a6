"""``--fail-on SEVERITY`` of the commands that report findings (audit, placement-audit): exit 1 naming the rules."""

from __future__ import annotations

from rnnprof.errors import FindingsError


def raise_if_failing(result, fail_on: str, rule_of) -> None:
    """Raise ``FindingsError`` when ``result`` has findings at or above ``fail_on`` (``never``: never);
    ``rule_of(finding)`` is the id the message names."""
    if fail_on == "never":
        return
    from rnnprof.analyzers.placement.finding import Severity

    failing = result.at_or_above(Severity.parse(fail_on))
    if failing:
        raise FindingsError(f"{len(failing)} finding(s) at or above {fail_on} "
                            f"({', '.join(sorted({rule_of(f) for f in failing}))})")
