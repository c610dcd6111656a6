"""``--fail-on SEVERITY`` of the commands that report findings (audit, placement-audit): exit 1 naming the rules."""

from __future__ import annotations

import argparse

from rnnprof.errors import FindingsError
from rnnprof.analyzers.placement.finding import Severity


def add_arguments(parser: argparse.ArgumentParser, levels: tuple[str, ...]) -> None:
    """``--fail-on`` with the severities ``levels`` (``never`` last), error by default."""
    parser.add_argument("--fail-on", choices=levels, default="error",
                        help="exit with status 1 when a finding is at or above this severity (default: error)")


def raise_if_failing(result, fail_on: str, rule_of) -> None:
    """Raise ``FindingsError`` when ``result`` has findings at or above ``fail_on`` (``never``: never);
    ``rule_of(finding)`` is the id the message names."""
    if fail_on == "never":
        return

    failing = result.at_or_above(Severity.parse(fail_on))
    if failing:
        raise FindingsError(f"{len(failing)} finding(s) at or above {fail_on} "
                            f"({', '.join(sorted({rule_of(f) for f in failing}))}): exit status 1, as --fail-on "
                            f"{fail_on} asks (--fail-on never: 0)")
