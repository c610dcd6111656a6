"""What ``analyze_pipeline`` finds: the schedule and its theoretical bubble, each stage's busy time and bubble
(warm-up, cool-down, waiting on a neighbour, other) step by step, who waited on whom, and the imbalance between
stages. Definitions: docs/commands/pipeline.md."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# What a stage's time in a step is, in the stage x time chart and the segments: its work, then its bubble's parts.
FORWARD, BACKWARD, OTHER_WORK = "forward", "backward", "other work"
WARM_UP, COOL_DOWN, NEIGHBOUR, TRANSFER, OTHER_IDLE = ("warm-up", "cool-down", "waiting on a neighbour", "transfer",
                                                      "other idle")
WORK_KINDS = (FORWARD, BACKWARD, OTHER_WORK)
BUBBLE_PARTS = (WARM_UP, COOL_DOWN, NEIGHBOUR, TRANSFER, OTHER_IDLE)


@dataclass(frozen=True)
class PipelineSchedule:
    """How the pipeline ran its micro-batches: ``kind`` (``names.PIPELINE_SCHEDULES``, "" not known), ``ranks`` (p,
    the ranks of one pipeline), ``micro_batches`` (m) and ``stages_per_rank`` (v); ``source`` says where each came
    from (the run's manifest, the flags, or what the trace showed)."""

    kind: str
    ranks: int
    micro_batches: int
    stages_per_rank: int = 1
    source: str = ""

    @property
    def stages(self) -> int:
        return self.ranks * self.stages_per_rank

    @property
    def theory(self) -> float | None:
        """The schedule's bubble fraction with equal stages and free communication: (p-1)/(v*m+p-1) (GPipe and
        1F1B: v = 1); None where p or m is not known."""
        p, m, v = self.ranks, self.micro_batches, max(self.stages_per_rank, 1)
        if p < 1 or m < 1:
            return None
        return (p - 1) / (v * m + p - 1)

    def in_flight(self, position: int) -> int | None:
        """The most micro-batches whose activations the pipeline rank at ``position`` holds at once by the
        schedule: all m under GPipe, min(p - position, m) under 1F1B; None where the schedule does not say."""
        if self.micro_batches < 1 or self.ranks < 1 or not 0 <= position < self.ranks:
            return None
        if self.kind == "gpipe":
            return self.micro_batches
        if self.kind == "1f1b":
            return min(self.ranks - position, self.micro_batches)
        return None

    def as_dict(self) -> dict:
        return {"kind": self.kind or None, "ranks": self.ranks, "micro_batches": self.micro_batches,
                "stages_per_rank": self.stages_per_rank, "stages": self.stages, "source": self.source,
                "theory_bubble_pct": None if self.theory is None else 100 * self.theory}


@dataclass(frozen=True)
class StageStep:
    """One pipeline rank's step: the pipeline's window (its first micro-batch work's start to its last one's end,
    over every rank), the rank's busy time in it and its bubble, split in five (they add up to the bubble)."""

    step: int
    window_us: float
    busy_us: float
    warm_up_us: float  # from the window's start to the rank's first micro-batch work
    cool_down_us: float  # from the rank's last micro-batch work to the window's end
    neighbour_us: float  # between them, in a send or receive whose partner had not been posted yet
    transfer_us: float  # between them, in a send or receive after both sides had posted it (the message in flight)
    other_us: float  # between them, anything else (the schedule's own work, a gap between operators)
    forward_us: float = 0.0  # of busy_us, forward and backward work
    backward_us: float = 0.0

    @property
    def bubble_us(self) -> float:
        return self.warm_up_us + self.cool_down_us + self.neighbour_us + self.transfer_us + self.other_us

    def as_dict(self) -> dict:
        return {"step": self.step, "window_us": self.window_us, "busy_us": self.busy_us, "bubble_us": self.bubble_us,
                "warm_up_us": self.warm_up_us, "cool_down_us": self.cool_down_us,
                "neighbour_us": self.neighbour_us, "transfer_us": self.transfer_us, "other_us": self.other_us,
                "forward_us": self.forward_us,
                "backward_us": self.backward_us}


@dataclass(frozen=True)
class Stage:
    """One rank of the pipeline: its place (``position`` in the pipeline's group; ``stages``: the stage indices it
    runs, several under interleaved schedules), its steps, whom it waited on, and its busy time per stage index."""

    worker: str
    position: int
    stages: tuple[int, ...]
    steps: tuple[StageStep, ...]
    waited_on: dict[str, float] = field(default_factory=dict)  # neighbour (worker) -> µs waited on it, all steps
    stage_busy: dict[int, float] = field(default_factory=dict)  # stage index -> busy µs, all steps

    def total(self, name: str) -> float:
        return float(sum(getattr(s, name) for s in self.steps))

    @property
    def bubble_fraction(self) -> float:
        window = self.total("window_us")
        return self.total("bubble_us") / window if window > 0 else 0.0

    def per_step(self, name: str) -> float:
        """The median over the steps of ``name`` (a ``StageStep`` field)."""
        return float(np.median([getattr(s, name) for s in self.steps])) if self.steps else 0.0

    def as_dict(self) -> dict:
        return {"rank": self.worker, "position": self.position, "stages": list(self.stages),
                "bubble_pct": 100 * self.bubble_fraction,
                **{f"{name}_us": self.total(f"{name}_us") for name in
                   ("window", "busy", "bubble", "warm_up", "cool_down", "neighbour", "transfer", "other", "forward",
                    "backward")},
                "waited_on_us": dict(self.waited_on), "stage_busy_us": {str(k): v for k, v in self.stage_busy.items()},
                "steps": [s.as_dict() for s in self.steps]}


@dataclass(frozen=True)
class StageImbalance:
    """The busiest stage against the others: its busy time per step (median) and theirs, and what balancing them
    could save per step at most: each of the m + p - 1 slots of the schedule's step set by the busiest stage's time
    per micro-batch, less the stages' mean."""

    stage: int  # the stage index (a rank's position where each rank runs one stage)
    worker: str
    busy_us: float  # per step
    others_median_us: float  # the other stages' median busy per step
    mean_us: float  # every stage's mean busy per step
    bound_us: float  # the saving bound per step
    per_step_excess_us: tuple[float, ...] = ()  # the stage's busy less the others' median, step by step

    @property
    def excess_us(self) -> float:
        return self.busy_us - self.others_median_us

    @property
    def share(self) -> float:
        return self.excess_us / self.others_median_us if self.others_median_us > 0 else 0.0

    def as_dict(self) -> dict:
        return {"stage": self.stage, "rank": self.worker, "busy_us": self.busy_us,
                "others_median_us": self.others_median_us, "excess_us": self.excess_us, "excess_pct": 100 * self.share,
                "saving_bound_us": self.bound_us}


@dataclass(frozen=True)
class Segment:
    """A piece of a stage's step for the stage x time chart: work (``WORK_KINDS``) or a bubble part
    (``BUBBLE_PARTS``), on the report's clock."""

    worker: str
    step: int
    kind: str
    start_us: float
    end_us: float
    micro_batch: int = -1  # where the trace names it
    stage: int = -1

    def as_dict(self) -> dict:
        return {"rank": self.worker, "step": self.step, "kind": self.kind, "start_us": self.start_us,
                "end_us": self.end_us, "micro_batch": self.micro_batch, "stage": self.stage}


@dataclass(frozen=True)
class PipelineReport:
    """A pipeline's bubble against its schedule's theory, stage by stage; ``notes``: what was inferred and what was
    left out."""

    schedule: PipelineSchedule
    stages: tuple[Stage, ...]  # by position
    steps: tuple[int, ...]
    imbalance: StageImbalance | None
    segments: tuple[Segment, ...]
    notes: tuple[str, ...] = ()
    time_base_us: float = 0.0

    @property
    def bubble_fraction(self) -> float:
        """Every rank's bubble over every rank's window, all steps."""
        window = sum(s.total("window_us") for s in self.stages)
        return sum(s.total("bubble_us") for s in self.stages) / window if window > 0 else 0.0

    def step_bubble(self, step: int) -> float:
        """The bubble fraction of one step, over every rank."""
        found = [x for s in self.stages for x in s.steps if x.step == step]
        window = sum(x.window_us for x in found)
        return sum(x.bubble_us for x in found) / window if window > 0 else 0.0

    @property
    def excess_bubble_us(self) -> list[float]:
        """Per step, the pipeline's window less the window the theory's bubble would leave around the busiest
        rank's work: the time a bubble at the theory's fraction would save (0 at or below it)."""
        theory = self.schedule.theory
        if theory is None:
            return []
        found = []
        for step in self.steps:
            rows = [x for s in self.stages for x in s.steps if x.step == step]
            window, busy = max(x.window_us for x in rows), max(x.busy_us for x in rows)
            found.append(max(window - busy / (1 - theory), 0.0) if theory < 1 else 0.0)
        return found

    def as_dict(self) -> dict:
        return {"schedule": self.schedule.as_dict(), "steps": list(self.steps),
                "bubble_pct": 100 * self.bubble_fraction,
                "step_bubble_pct": {str(s): 100 * self.step_bubble(s) for s in self.steps},
                "stages": [s.as_dict() for s in self.stages],
                "imbalance": None if self.imbalance is None else self.imbalance.as_dict(),
                "segments": [s.as_dict() for s in self.segments]}
