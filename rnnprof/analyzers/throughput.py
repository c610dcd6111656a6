"""Throughput of a run from its steps' records: total words over total seconds, and step-time statistics."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Protocol, Sequence


class Step(Protocol):
    seconds: float
    words: int
    loss: float


@dataclass(frozen=True)
class TimingSummary:
    steps: int
    total_seconds: float
    words: int
    words_per_second: float  # total words / total seconds, not a mean of per-step rates
    mean_step_seconds: float
    median_step_seconds: float
    std_step_seconds: float  # population standard deviation; 0 for one step


def summarize(steps: Sequence[Step]) -> TimingSummary:
    if not steps:
        raise ValueError("summarize needs at least one step")
    seconds = [s.seconds for s in steps]
    total = sum(seconds)
    words = sum(s.words for s in steps)
    return TimingSummary(
        steps=len(steps),
        total_seconds=total,
        words=words,
        words_per_second=words / total if total > 0 else float("inf"),
        mean_step_seconds=statistics.fmean(seconds),
        median_step_seconds=statistics.median(seconds),
        std_step_seconds=statistics.pstdev(seconds),
    )


def is_seconds(value, zero: bool = False) -> bool:
    """A finite duration in seconds: a positive number (or zero, with ``zero``), not a bool."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and (value >= 0 if zero else value > 0))
