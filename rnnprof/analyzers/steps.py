"""Step selection: which of a trace's steps an analysis looks at.

A selection keeps the events of the chosen steps and drops the rest, events outside every step
marker included, before any analysis runs. An event's step is the one the loader gave it: a host
event's is the step marker its start falls in, and GPU work's is the step of the runtime call that
launched it, so a kernel launched in the last step and still running after it stays in that step.

The chosen steps are, in order: the steps of the trace within ``FIRST:LAST`` (inclusive, the trace's
own step numbers; either end may be left open), less the first ``skip_first`` of them, less the
last one with ``drop_last``. A selection that leaves no step is an error (``StepSelectionError``),
and so is a selection on a trace without step markers.

HTA's temporal breakdown and overlap (holistictraceanalysis, by default) count the GPU work
launched in every ``ProfilerStep`` but the last, spanned as one window: ``drop_last=True``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from rnnprof.events import EventTable

_RANGE = re.compile(r"^\s*(-?\d+)?\s*:\s*(-?\d+)?\s*$|^\s*(-?\d+)\s*$")


class StepSelectionError(ValueError):
    """A selection that cannot be applied: its text is malformed, or it leaves no step."""


@dataclass(frozen=True)
class StepSelection:
    first: int | None = None  # inclusive; None: from the first step
    last: int | None = None  # inclusive; None: to the last step
    skip_first: int = 0
    drop_last: bool = False

    @property
    def active(self) -> bool:
        return self.first is not None or self.last is not None or self.skip_first > 0 or self.drop_last

    def describe(self) -> str:
        """The selection as the flags that make it ("" when it selects everything)."""
        parts = []
        if self.first is not None or self.last is not None:
            parts.append(f"--steps {'' if self.first is None else self.first}:{'' if self.last is None else self.last}")
        if self.skip_first:
            parts.append(f"--skip-first {self.skip_first}")
        if self.drop_last:
            parts.append("--drop-last")
        return " ".join(parts)


def parse_range(text: str) -> tuple[int | None, int | None]:
    """``FIRST:LAST`` (either end may be omitted) or a single step ``N`` as ``(first, last)``."""
    match = _RANGE.match(text)
    if not match:
        raise StepSelectionError(f"{text!r} is not a step range (expected FIRST:LAST, e.g. 1009:1013, "
                                 "or one step number)")
    if match.group(3) is not None:
        single = int(match.group(3))
        return single, single
    first = int(match.group(1)) if match.group(1) is not None else None
    last = int(match.group(2)) if match.group(2) is not None else None
    if first is not None and last is not None and first > last:
        raise StepSelectionError(f"{text!r}: FIRST is after LAST (expected FIRST <= LAST)")
    return first, last


def chosen_steps(steps: np.ndarray, selection: StepSelection) -> np.ndarray:
    """The step numbers ``selection`` keeps out of ``steps`` (sorted, known step numbers)."""
    steps = np.sort(np.asarray(steps))
    if not selection.active:
        return steps
    if len(steps) == 0:
        raise StepSelectionError(f"{selection.describe()}: the trace has no step markers to select from")
    keep = steps
    if selection.first is not None:
        keep = keep[keep >= selection.first]
    if selection.last is not None:
        keep = keep[keep <= selection.last]
    keep = keep[selection.skip_first:]
    if selection.drop_last:
        keep = keep[:-1]
    if len(keep) == 0:
        shown = f"{steps[0]}" if len(steps) == 1 else f"{steps[0]}..{steps[-1]}"
        raise StepSelectionError(f"{selection.describe()} leaves no step (the trace has {len(steps)} step(s), "
                                 f"{shown})")
    return keep


def select_steps(table: EventTable, selection: StepSelection) -> EventTable:
    """The events of the chosen steps (the whole table when the selection selects everything)."""
    if not selection.active:
        return table
    keep = chosen_steps(table.steps(), selection)
    return table.select(np.isin(table.step, keep))
