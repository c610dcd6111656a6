"""The critical path's inputs beyond the events (``Dependencies``: graph inputs, arrows) and its results (a
``StepPath`` per step, of ``Link``s and ``WhatIf``s), with the names of the edge kinds and the path's classes."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from rnnprof.analyzers.classify import EventClass
from rnnprof.analyzers.steps import JobStepTimes, Overrun, measured_apart
from rnnprof.events import Device

EDGE_LANE = "lane"
EDGE_LAUNCH = "launch"
EDGE_DATA = "data"
EDGE_TRANSFER = "transfer"
EDGE_COLLECTIVE = "collective"
EDGE_ENQUEUE = "enqueue"
EDGE_COMPLETE = "complete"
EDGE_KINDS = (EDGE_LANE, EDGE_LAUNCH, EDGE_DATA, EDGE_TRANSFER, EDGE_COLLECTIVE, EDGE_ENQUEUE, EDGE_COMPLETE)

CLASS_NAMES = {EventClass.COMPUTE: "compute", EventClass.COMMUNICATION: "comm", EventClass.MEMCPY: "copy",
               EventClass.MEMSET: "copy", EventClass.HOST: "host"}
WAIT = "wait"
OTHER_LANES = "other lanes"  # a wait in which the device ran other events (other streams, other threads)
UNTRACED = "untraced"  # a host thread's time outside every traced operator
PREVIOUS_STEP = "previous-step work"
NEXT_STEP = "next-step work"
NO_STEP = "work of no step"
UNTRACED_LINK_US = 10.0  # untraced host time this long or longer is a link of its own; shorter, a wait before
# the next event (a few µs of Python between two operators), still counted as untraced
WHAT_IF_OPS = 10  # the longest ops of the path get a what-if estimate


@dataclass(frozen=True)
class FlowEnd:
    device: Device
    lane: str
    ts: float


@dataclass(frozen=True)
class Flow:
    """An arrow of a Chrome trace: ``kind`` is a ``transfer``, ``data`` or ``collective`` edge; the ends are
    bound to the events of that lane enclosing their timestamps."""

    kind: str
    source: FlowEnd
    target: FlowEnd


@dataclass(frozen=True)
class Dependencies:
    """What the input says beyond the events: graph inputs by node name, arrows, and what it lacks."""

    node_inputs: tuple[tuple[str, str], ...] = ()  # (producer node, consumer node)
    flows: tuple[Flow, ...] = ()
    match_ranks: bool = True  # join the collectives of different workers (ranks) as ``collectives`` matches them
    lacks: tuple[str, ...] = ()


@dataclass(slots=True)  # not frozen: a path has thousands of them, and a frozen dataclass is slow to build
class Link:
    """One event of the path; ``edge`` is the kind of the edge to the next one ("" for the last). An untraced
    stretch of a host thread is a link of its own (``event_class`` ``untraced``, ``event`` -1)."""

    name: str
    op_type: str
    device: str
    lane: str
    start_us: float  # from the step's window start
    dur_us: float  # within the window
    event_class: str
    edge: str
    wait_us: float  # wait before this event on the path (after its predecessor ended; negative: overlap)
    ts_us: float  # absolute start (within the window), on the table's clock
    event: int  # row in the table; -1 for untraced host time
    of_step: int = 0  # the event's own step (another step's: work the device did in this step's window)


@dataclass(frozen=True)
class WhatIf:
    name: str
    device: str
    dur_us: float
    saving_us: float  # estimate


@dataclass(frozen=True)
class StepPath:
    step: int
    length_us: float
    span_us: float  # the step's window: its start to its last event's end
    links: tuple[Link, ...]
    by_device: dict[str, float]
    by_class: dict[str, float]
    what_if: tuple[WhatIf, ...]
    events: int
    edges: dict[str, int]
    window_us: tuple[float, float] = (0.0, 0.0)  # the window, absolute, on the table's clock
    wait_by_device: dict[str, float] = field(default_factory=dict)  # the class ``wait`` by the device it is on


# How the critical path measures a step (``StepPath.span_us``), where it is set beside the step's time
WINDOW = "the path's window (from the step's first event, or the end of an earlier step's work in it, to its last end)"


@dataclass(frozen=True)
class CriticalPathReport:
    steps: tuple[StepPath, ...]
    lacks: tuple[str, ...] = ()
    workers: tuple[str, ...] = ()
    step_time: JobStepTimes | None = None  # the steps' times as every command gives them
    notes: tuple[str, ...] = ()  # the steps whose window is apart from their step time, and why

    def with_step_time(self, times: JobStepTimes, overruns: dict[int, Overrun]) -> "CriticalPathReport":
        """The report with the steps' times (``step_time.device_step_times``), and a note for each step whose
        window is apart from its time, with why (``overruns``: ``steps.step_overruns``)."""
        times = times.only(s.step for s in self.steps)
        apart = measured_apart(WINDOW, {s.step: s.span_us for s in self.steps}, times, overruns)
        return replace(self, step_time=times, notes=(*self.notes, *apart))

