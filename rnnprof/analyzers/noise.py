"""A run's own step-to-step jitter, and when a difference is larger than it.

``significance``: a difference measured per step is significant only when its median over the steps exceeds
``K`` (3) times the larger of its own spread and the step time's (``step_noise``), a spread being the scaled
median absolute deviation ``1.4826 * median(|x - median(x)|)``; a duration the trace times itself in every step
(a wait for the next batch) exceeds ``K`` times its own spread and the step time's spread once, or, over
``LEAST_STEPS`` (5) steps or more, the step time's spread in every one of them. With fewer than
``MIN_STEPS`` (3) steps nothing is significant. Between ranks the threshold is at least ``CROSS_RANK_FLOOR_US``
(2 ms), what an operating system's scheduling can cause on a loaded host; a CPU (gloo) rank's lateness at least
``CPU_RANK_FLOOR_US`` (4 ms, a time slice at HZ=250) per collective summed: on 2 busy cores a balanced gloo job's
ranks arrive 1.8-2.9 ms apart (a gloo thread waiting for a core), often at several steps of a run
(docs/commands/audit.md).

Confidence, in [0, 1]: ``1 - threshold / |difference|`` when significant, else 0. A difference within the
run's jitter is never a warning. See docs/commands/audit.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rnnprof.events import EventTable

K = 3.0  # how many robust spreads a difference must exceed
MIN_STEPS = 3  # fewer steps: no spread to measure
LEAST_STEPS = 5  # a duration above the jitter in every one of so many steps is no chance (see above)
CROSS_RANK_FLOOR_US = 2000.0  # the least difference between processes that is called (see above)
CPU_RANK_FLOOR_US = 4000.0  # the least lateness per collective of a CPU rank that is called (see above)
MAD_TO_SIGMA = 1.4826  # MAD of normally distributed values * this = their standard deviation


def robust_spread(values: Sequence[float]) -> float:
    """``1.4826 * MAD`` of ``values`` (0 for fewer than two)."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) < 2:
        return 0.0
    return float(MAD_TO_SIGMA * np.median(np.abs(x - np.median(x))))


@dataclass(frozen=True)
class StepNoise:
    """The run's step times (µs, per step) and their jitter."""

    steps: tuple[int, ...]
    step_us: tuple[float, ...]

    @property
    def median_us(self) -> float:
        return float(np.median(self.step_us)) if self.step_us else 0.0

    @property
    def mad_us(self) -> float:
        """The median absolute deviation (unscaled) of the step times."""
        x = np.asarray(self.step_us, dtype=np.float64)
        return float(np.median(np.abs(x - np.median(x)))) if len(x) else 0.0

    @property
    def spread_us(self) -> float:
        return robust_spread(self.step_us)

    def as_dict(self) -> dict:
        return {"step_ms_median": round(self.median_us / 1000, 3), "step_ms_mad": round(self.mad_us / 1000, 3),
                "steps": len(self.steps)}


def step_noise(table: EventTable) -> StepNoise:
    """Each step's time: from the first start to the last end of the step's events on any device (the
    ranks' slowest), over the table's steps (events of no step left out)."""
    return noise_of_spans(step_spans(table))


def step_spans(table: EventTable, shift_us: float = 0.0) -> dict[int, tuple[float, float]]:
    """Each step's first start and last end over the table's events (``shift_us`` added: a rank's time base, for
    the spans of several ranks on one clock, ``combined_spans``)."""
    keep = table.step >= 0
    if not keep.any():
        return {}
    step = table.step[keep].astype(np.int64)
    steps, inverse = np.unique(step, return_inverse=True)
    start = np.full(len(steps), np.inf)
    end = np.full(len(steps), -np.inf)
    np.minimum.at(start, inverse, table.ts[keep])
    np.maximum.at(end, inverse, table.end[keep])
    return {int(s): (float(a) + shift_us, float(b) + shift_us) for s, a, b in zip(steps, start, end)}


def combined_spans(parts: Sequence[dict[int, tuple[float, float]]]) -> dict[int, tuple[float, float]]:
    """The spans of several tables' steps (``step_spans``) on one clock: each step's earliest start and latest
    end over them."""
    found: dict[int, tuple[float, float]] = {}
    for spans in parts:
        for s, (a, b) in spans.items():
            found[s] = (min(a, found[s][0]), max(b, found[s][1])) if s in found else (a, b)
    return dict(sorted(found.items()))


def noise_of_spans(spans: dict[int, tuple[float, float]]) -> StepNoise:
    """``StepNoise`` of the steps' spans (``step_spans``)."""
    steps = sorted(spans)
    return StepNoise(tuple(steps), tuple(spans[s][1] - spans[s][0] for s in steps))


@dataclass(frozen=True)
class Significance:
    """A per-step difference judged against the run's jitter (see the module docstring)."""

    difference_us: float  # median over the steps
    spread_us: float  # the quantity's own robust spread across the steps
    jitter_us: float  # the step time's robust spread
    threshold_us: float  # max(K * max(spread, jitter), floor)
    steps: int
    significant: bool
    confidence: float
    per: str = "step"  # what one sample is: a step, or a collective where too few steps hold any
    jitter_k: float = K  # how many step-time spreads the difference must exceed
    least_us: float | None = None  # a duration's least value over the steps (None: not judged by it)

    @property
    def by_least(self) -> bool:
        """Significant by its least value only (its median within ``threshold_us``)."""
        return self.significant and abs(self.difference_us) <= self.threshold_us

    def describe(self) -> str:
        if self.steps < MIN_STEPS:
            return f"{self.steps} {self.per}(s): too few to measure the run's jitter (needs {MIN_STEPS})"
        least = ("" if self.least_us is None else f"; the least {self.least_us / 1000:.2f} ms"
                 + (f", above {self.jitter_k:g} x jitter in every {self.per}" if self.by_least else ""))
        return (f"median {self.difference_us / 1000:.2f} ms per {self.per} vs threshold "
                f"{self.threshold_us / 1000:.2f} ms ({self.jitter_k:g} x jitter {self.jitter_us / 1000:.2f} ms, "
                f"{'' if self.jitter_k == K else f'{K:g} x '}spread {self.spread_us / 1000:.2f} ms) over "
                f"{self.steps} {self.per}s{least}")

    def as_dict(self, unit: str = "ms") -> dict:
        """The figures in ms; with ``unit="bytes"``, a judgement of bytes (memory growth, whose figures this type
        carries in its ``_us`` fields) in bytes."""
        scale = 1.0 if unit == "bytes" else 1000.0
        least = {} if self.least_us is None else {f"least_{unit}": round(self.least_us / scale, 3),
                                                  "by_least": self.by_least}
        return {f"difference_{unit}": round(self.difference_us / scale, 3),
                f"spread_{unit}": round(self.spread_us / scale, 3), f"jitter_{unit}": round(self.jitter_us / scale, 3),
                f"threshold_{unit}": round(self.threshold_us / scale, 3),
                "samples": self.steps, "per": self.per, "k": K, "jitter_k": self.jitter_k, **least,
                "significant": self.significant,
                "confidence": round(self.confidence, 3)}


def significance(per_step_us: Sequence[float], jitter_us: float = 0.0, per: str = "step",
                 floor_us: float = 0.0, jitter_k: float = K, every_step: bool = False) -> Significance:
    """Whether the median of ``per_step_us`` (a difference, one value per step) stands out of the jitter:
    ``K`` times the quantity's own spread across the steps and ``jitter_k`` times ``jitter_us``
    (``StepNoise.spread_us``); the threshold is at least ``floor_us`` (``CROSS_RANK_FLOOR_US`` for differences
    between ranks). ``every_step`` (a duration the trace times): also when, over ``LEAST_STEPS`` or more, its
    least value exceeds ``jitter_k`` times ``jitter_us`` and ``floor_us``."""
    x = np.asarray(per_step_us, dtype=np.float64)
    diff = float(np.median(x)) if len(x) else 0.0
    spread = robust_spread(x)
    threshold = max(K * spread, jitter_k * jitter_us, floor_us)
    ok = len(x) >= MIN_STEPS and abs(diff) > threshold
    confidence = (1.0 - threshold / abs(diff)) if ok else 0.0
    least = float(x.min()) if every_step and len(x) else None
    least_threshold = max(jitter_k * jitter_us, floor_us)
    if least is not None and not ok and len(x) >= LEAST_STEPS and least > least_threshold:
        ok, confidence = True, 1.0 - least_threshold / least
    return Significance(diff, spread, jitter_us, threshold, len(x), bool(ok), float(min(max(confidence, 0.0), 1.0)),
                        per, jitter_k, least)
