"""The measurement protocol: warm-up batches first, untimed; then timed batches.

Warm-up absorbs graph optimization, memory allocation and first-touch costs,
which would otherwise inflate the first steps. ``Measurement.with_warmup`` keeps
the biased figure for comparison (``--include-warmup``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from rnnprof.analyzers.throughput import Step, TimingSummary, summarize
from rnnprof.training.cpu_clock import CpuTimes


@dataclass(frozen=True)
class StepResult:
    """One training step of any framework's run."""

    seconds: float  # wall time of the step (a TF session.run call; on N ranks, the slowest rank's)
    words: int  # as the workload defines words, summed over towers or ranks
    loss: float  # mean over towers or ranks
    cpu: CpuTimes | None = None  # CPU time during the step (a TF session.run call); None: not measured


@dataclass(frozen=True)
class Measurement:
    warmup_steps: tuple
    timed_steps: tuple

    @property
    def timed(self) -> TimingSummary:
        return summarize(self.timed_steps)

    @property
    def with_warmup(self) -> TimingSummary:
        """The biased figure: warm-up and timed batches together."""
        return summarize(self.warmup_steps + self.timed_steps)


class Runnable(Protocol):
    def step(self) -> Step: ...


# on_step(phase, index, step): phase is "warmup" or "timed"; index counts from 0 in the phase.
StepCallback = Callable[[str, int, Step], None]


def measure(run: Runnable, warmup: int, batches: int, on_step: StepCallback | None = None) -> Measurement:
    """Run ``warmup`` untimed then ``batches`` timed steps and keep every step's record."""
    if batches < 1:
        raise ValueError("measure needs at least one timed batch")
    phases = {"warmup": [], "timed": []}
    for phase, count in (("warmup", warmup), ("timed", batches)):
        for index in range(count):
            step = run.step()
            phases[phase].append(step)
            if on_step is not None:
                on_step(phase, index, step)
    return Measurement(warmup_steps=tuple(phases["warmup"]), timed_steps=tuple(phases["timed"]))
