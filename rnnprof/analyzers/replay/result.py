"""What a replay is asked (``Change``s) and what it gives: per step the measured, replayed and predicted step
times, the chain critical after the change and each rank's waits, before and after."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace

from rnnprof.analyzers.steps import JobStepTimes, Overrun, measured_apart

SCALE = "scale"  # an operator's or kernel's time (host side and the kernels it launched) times ``factor``
SCALE_HOST = "scale-host"  # an operator's host-side time only (not its kernels, not its launch calls)
FAMILY = "family"  # every operator of a kernel family (``flops.FAMILIES``)
EVEN_HOST = "even-host"  # a rank's untraced host time set to the other ranks' median, gap by gap
EVEN_INPUT = "even-input"  # a rank's data loading set to the other ranks' median (one rank: prefetched, none)
EVEN_WORK = "even-work"  # a rank's operators that no other rank runs in the step take no time
COMM = "comm"  # communication's transfer times times ``factor`` (``subject``: of one collective type alone)
COMM_GROUP = "comm-group"  # the transfer times of one process group's collectives (``subject``: its names) times ``factor``
PREFETCH = "prefetch"  # FSDP forward prefetch: each block's all-gather issued where the block before it issued its own
MICRO_BATCHES = "micro-batches"  # a pipeline's micro-batches per step (``factor``: how many)
MOVE_LAYER = "move-layer"  # a pipeline's layers moved between its stages (``subject``: FROM:TO, each stage's layers)
OVERLAP = "overlap"  # communication moved off compute's dependencies (no thread or stream waits for it)
NO_COPIES = "no-copies"  # device copies (and their launch calls) take no time
NO_SYNCS = "no-syncs"  # synchronizing calls neither wait nor take time
GRAPH_LAUNCH = "graph-launch"  # kernels no longer wait for their launch calls, which take no time
DELAY = "delay"  # host time added to a rank's step (``delay_ms``), at its start or before an operator (``before``)
CHANGE_KINDS = (SCALE, SCALE_HOST, FAMILY, EVEN_HOST, EVEN_INPUT, EVEN_WORK, COMM, COMM_GROUP, PREFETCH,
                MICRO_BATCHES, MOVE_LAYER, OVERLAP, NO_COPIES, NO_SYNCS, GRAPH_LAUNCH, DELAY)

# What a replay cannot express, and why: asked for, each is refused with this line.
INEXPRESSIBLE = {
    "fuse": "fusing operators: the fused kernel's time is in no trace",
    "threads": "a different thread count: how the host's work would share out is in no trace",
    "devices": "more or fewer devices: the other devices' work and communication are in no trace",
}


class ChangeError(ValueError):
    """A change that cannot be replayed on this input (its message says why, in one line)."""


class Inexpressible(ChangeError):
    """A change the replay cannot express at all (its message says which and why)."""


@dataclass(frozen=True)
class Change:
    kind: str
    subject: str = ""  # an operator, a family, a rank or a copy kind
    factor: float = 1.0
    delay_ms: float = 0.0  # a delay's host time, ms
    before: str = ""  # a delay's place: before the step's first event matching this regex on the rank (re.search)

    def describe(self) -> str:
        if self.kind == DELAY:
            return (f"{self.subject}: +{self.delay_ms:g} ms of host time "
                    + (f"before {self.before!r}" if self.before else "at its step's start"))
        if self.kind in (SCALE, SCALE_HOST, FAMILY):
            what = f"family:{self.subject}" if self.kind == FAMILY else self.subject
            return f"{what} x{self.factor:g}" + (" (host side)" if self.kind == SCALE_HOST else "")
        if self.kind == COMM:
            return f"{self.subject or 'communication'} x{self.factor:g}"
        if self.kind == COMM_GROUP:
            return f"process group {self.subject} x{self.factor:g}"
        if self.kind == MICRO_BATCHES:
            return f"{self.factor:g} micro-batches per step (the pipeline's schedule replayed)"
        if self.kind == MOVE_LAYER:
            return f"the pipeline's stages holding {self.subject.replace(':', ' layers -> ')} layers"
        if self.kind == NO_COPIES and self.subject:
            return f"{self.subject} copies removed"
        if self.kind == OVERLAP and self.subject:
            what = self.subject.replace("group:", "process group ", 1)
            return f"{what} communication overlapped with compute"
        return {EVEN_HOST: f"{self.subject or 'the latest rank'}'s untraced host time at the others' median",
                EVEN_INPUT: f"{self.subject or 'the latest rank'}'s data loading at the others' median",
                EVEN_WORK: f"{self.subject or 'the latest rank'}'s operators that no other rank runs removed",
                OVERLAP: "communication overlapped with compute", NO_COPIES: "device copies removed",
                PREFETCH: "each forward all-gather issued one block earlier (FSDP prefetch)",
                NO_SYNCS: "synchronizing calls removed",
                GRAPH_LAUNCH: "kernels launched by a graph launch"}[self.kind]


@dataclass(frozen=True)
class ChainLink:
    """A node of the critical chain after the change: its own work (``dur_us``) and the host work before it."""

    name: str
    device: str
    node: str  # event, arrival, done (a collective's transfer) or sync end
    dur_us: float
    pre_us: float
    start_us: float  # replayed, from the window's start


@dataclass(frozen=True)
class RankWaits:
    """A rank's time waiting for the last member of its collectives and for the GPU at synchronizing calls."""

    rank: str
    measured_us: float
    predicted_us: float


# How a replay measures a step (``StepReplay.measured_us``), where it is set beside the step's time
MEASURED = "the replay's measure (from the step's first event to its last own event's end)"


@dataclass(frozen=True)
class StepReplay:
    step: int
    measured_us: float  # from the window's start (or an earlier step's last end in it) to its last own event's end
    replayed_us: float  # the replay without the change (the model's own error, against measured_us)
    predicted_us: float  # the replay with the change
    chain: tuple[ChainLink, ...]  # the longest links of the chain critical after the change
    chain_links: int  # how many nodes that chain has
    chain_by_device: dict[str, float]
    waits: tuple[RankWaits, ...]
    reasons: tuple[str, ...] = ()  # why the unchanged replay differs from the measured step, where it does

    @property
    def change_us(self) -> float:
        return self.predicted_us - self.measured_us

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.replayed_us - self.measured_us) / self.measured_us if self.measured_us else 0.0


@dataclass(frozen=True)
class WhatIfReport:
    changes: tuple[Change, ...]
    steps: tuple[StepReplay, ...]
    changed: dict[str, int] = field(default_factory=dict)  # per change: the nodes it changed over every step
    notes: tuple[str, ...] = ()
    lacks: tuple[str, ...] = ()
    step_time: JobStepTimes | None = None  # the steps' times as every command gives them

    def with_step_time(self, times: JobStepTimes, overruns: dict[int, Overrun]) -> "WhatIfReport":
        """The report with the steps' times (``step_time.device_step_times``, over its steps), and a note for each
        step the replay measures apart from its time, with why (``overruns``: ``steps.step_overruns``)."""
        times = times.only(r.step for r in self.steps)
        apart = measured_apart(MEASURED, {s.step: s.measured_us for s in self.steps}, times, overruns)
        return replace(self, step_time=times, notes=(*self.notes, *apart))

    def median(self, attribute: str) -> float:
        values = [getattr(s, attribute) for s in self.steps]
        return float(statistics.median(values)) if values else 0.0
