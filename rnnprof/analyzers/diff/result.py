"""What ``diff`` compares and finds: the two ``Side``s, each section's figures and changes (time per device, ops
and kernels, graphs, configuration, copies and graph launches, achieved rates), the ``DiffReport`` and its
definitions."""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx

from rnnprof.analyzers import copies as copy_counts
from rnnprof.analyzers.roofline import RooflineReport
from rnnprof.events import EventTable, Manifest

DEFINITIONS = {
    "Δ, ratio": "Δ = B − A and ratio = B ÷ A: A is the reference, B the input compared with it",
    "per step": "a figure over the steps a side traced divided by their number (a trace without step "
                "markers is one step); A and B may have traced different steps",
    "step time": "the headline: the mean period of the compared steps on each side, by the first basis both "
                 "sides have: the host step markers (the mean duration of the ProfilerStep#N ranges of the "
                 "compared steps, over every rank the side holds), else the step time the run recorded (a run "
                 "directory's manifest: median of its timed steps), else the span of all device activity per "
                 "step; ratio = B ÷ A of these periods",
    "paired by role": "where the two sides name their devices differently (rank 3 of 8 against rank 1 of 2), "
                      "devices with the same label are compared first, then the rest by role: host against "
                      "host and the k-th GPU (CPU) of one side, in rank and index order, against the k-th of "
                      "the other; shown as A's device ~ B's device",
    "device time": "comm's per-device breakdown (see rnnprof comm), mean per step: step = span from the "
                   "device's first to its last activity in the step; all devices · activity span: from the "
                   "first start to the last end over the devices (steps whose GPU work runs past their end "
                   "overlap, so this can exceed the step time)",
    "ops and kernels": "the events count-ops counts as CPU and GPU kernels, grouped by name or op type; "
                       "time = their summed durations, a host op's by its self time",
    "self time": "a host op's duration less the time of the host ops nested in it on the same thread (its "
                 "direct children, each cut to the op's end), so nested operators (aten::item around "
                 "aten::_local_scalar_dense) do not count the same time twice",
    "normalized name": "template arguments become <…> and argument lists are dropped, so variants of "
                       "one templated kernel group together",
    "achieved rates": "per op family, rnnprof roofline's achieved TFLOP/s (FLOPs / kernel time; a CPU or "
                      "TensorFlow run's: the operators' own time) and TB/s on each side; ratio = B ÷ A; only where "
                      "each side is one process whose operators' shapes are recorded",
    "appeared / vanished": "a name or op type that runs only in B / only in A",
    "moved": "a graph node on both sides whose device differs: the device it was assigned (partition graphs, "
             "else the one its events ran on) on both sides, or, where neither side assigned it (a user graph "
             "alone, a node optimized away), the device it requested",
}



@dataclass(frozen=True, eq=False)
class Side:
    """One side of a diff: what was read from its paths (each part None when absent, with why)."""

    label: str
    events: EventTable | None = None
    events_reason: str = ""
    user_graph: networkx.DiGraph | None = None
    user_reason: str = ""
    runtime_graph: networkx.DiGraph | None = None
    runtime_reason: str = ""
    graph: networkx.DiGraph | None = None  # user graph with assigned devices joined in (placements)
    manifest: Manifest | None = None
    roofline: RooflineReport | None = None  # of a one-process side
    roofline_reason: str = "not computed"

    @property
    def kind(self) -> str:
        """"run", "trace", "graph" or "trace and graph" (a RunMetadata: step stats and partition graphs)."""
        if self.manifest is not None:
            return "run"
        has_graph = self.user_graph is not None or self.runtime_graph is not None
        if self.events is None:
            return "graph"
        return "trace and graph" if has_graph else "trace"

    @property
    def has_graph(self) -> bool:
        return self.user_graph is not None or self.runtime_graph is not None



@dataclass(frozen=True)
class PairedFigure:
    """One figure on both sides (None where a side lacks it)."""

    key: str
    a: float | None
    b: float | None

    @property
    def delta(self) -> float | None:
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def ratio(self) -> float | None:
        return None if self.a is None or self.b is None or self.a == 0 else self.b / self.a

    @property
    def changed(self) -> bool:
        return self.a != self.b



@dataclass(frozen=True)
class DeviceFigure:
    device: str  # a device label, "A's ~ B's" for devices paired by role, "all devices", or "run"
    metric: str
    a: float | None  # µs per step
    b: float | None
    device_a: str = ""  # the device on each side ("" where the side lacks it)
    device_b: str = ""

    @property
    def delta(self) -> float | None:
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def changed(self) -> bool:
        return self.a != self.b



@dataclass(frozen=True)
class StepTime:
    """One side's step period (see ``DEFINITIONS["step time"]``)."""

    us: float | None  # mean µs per step; None when the side has no basis
    basis: str  # "step markers", "run record", "activity span", or "" with ``us`` None
    detail: str = ""  # what exactly was measured, in words
    steps: int = 0  # periods averaged (markers: one per rank and step)



STEP_BASES = ("step markers", "run record", "activity span")



@dataclass(frozen=True)
class Headline:
    a: StepTime
    b: StepTime

    @property
    def comparable(self) -> bool:
        """Both sides measured, on one basis."""
        return self.a.us is not None and self.b.us is not None and self.a.basis == self.b.basis

    @property
    def ratio(self) -> float | None:
        return self.b.us / self.a.us if self.comparable and self.a.us else None

    @property
    def delta(self) -> float | None:
        return self.b.us - self.a.us if self.comparable else None



@dataclass(frozen=True)
class TimeSection:
    available: bool
    reason: str = ""
    steps_a: tuple[int, ...] = ()
    steps_b: tuple[int, ...] = ()
    rows: tuple[DeviceFigure, ...] = ()
    headline: Headline | None = None
    paired_by_role: tuple[tuple[str, str], ...] = ()  # (A's device, B's device) paired although labels differ

    @property
    def changed(self) -> bool:
        return any(r.changed for r in self.rows)



@dataclass(frozen=True)
class OpChange:
    """One name or op type: kernels per step and µs per step on each side."""

    key: str
    count_a: float
    count_b: float
    time_a_us: float
    time_b_us: float

    @property
    def status(self) -> str:
        if self.count_a == 0 and self.count_b:
            return "appeared"
        if self.count_b == 0 and self.count_a:
            return "vanished"
        return "changed" if (self.count_a, self.time_a_us) != (self.count_b, self.time_b_us) else "same"

    @property
    def time_delta_us(self) -> float:
        return self.time_b_us - self.time_a_us

    @property
    def count_delta(self) -> float:
        return self.count_b - self.count_a



@dataclass(frozen=True)
class OpsSection:
    available: bool
    reason: str = ""
    counts: tuple[PairedFigure, ...] = ()  # opcount.compare's figures (graph sizes, kernels per step)
    by_name: tuple[OpChange, ...] = ()  # largest |Δ time| first
    by_type: tuple[OpChange, ...] = ()

    @property
    def changed(self) -> bool:
        return (any(f.changed for f in self.counts)
                or any(r.status != "same" for r in (*self.by_name, *self.by_type)))

    def of_status(self, status: str, rows: str = "by_name") -> tuple[OpChange, ...]:
        return tuple(r for r in getattr(self, rows) if r.status == status)

    @property
    def gainers(self) -> tuple[OpChange, ...]:
        """Names that take more time per step in B, most first."""
        return tuple(sorted((r for r in self.by_name if r.time_delta_us > 0), key=lambda r: -r.time_delta_us))

    @property
    def losers(self) -> tuple[OpChange, ...]:
        """Names that take less time per step in B, most first."""
        return tuple(sorted((r for r in self.by_name if r.time_delta_us < 0), key=lambda r: r.time_delta_us))



@dataclass(frozen=True)
class GraphOpChange:
    view: str  # "user" | "runtime"
    device: str
    op_type: str  # "" = all types on the device
    a: int
    b: int

    @property
    def delta(self) -> int:
        return self.b - self.a



@dataclass(frozen=True)
class MovedOp:
    name: str
    op: str
    tower: int | None
    scope: str  # the node's first name scopes (placement.scopes.group_scope)
    device_a: str
    device_b: str
    basis: str = "assigned"  # "assigned" on both sides, or "requested" where neither side assigned it



@dataclass(frozen=True)
class GraphSection:
    available: bool
    reason: str = ""
    counts: tuple[GraphOpChange, ...] = ()  # only what differs, largest |Δ| first
    placement_available: bool = False
    placement_reason: str = ""
    moved: tuple[MovedOp, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.counts or self.moved)

    @property
    def moved_by_scope(self) -> tuple[tuple[str, str, str, int], ...]:
        """``(scope, device A, device B, ops)`` for the moved ops, most first."""
        groups: dict[tuple[str, str, str], int] = {}
        for op in self.moved:
            key = (op.scope, op.device_a, op.device_b)
            groups[key] = groups.get(key, 0) + 1
        return tuple((*k, n) for k, n in sorted(groups.items(), key=lambda kv: (-kv[1], kv[0])))



@dataclass(frozen=True)
class ConfigChange:
    key: str
    a: str | None  # None: not recorded on that side
    b: str | None



@dataclass(frozen=True)
class ConfigSection:
    available: bool
    reason: str = ""
    changes: tuple[ConfigChange, ...] = ()
    compared: int = 0  # settings recorded on at least one side

    @property
    def changed(self) -> bool:
        return bool(self.changes)



# A copy or graph figure changed "a lot": one side at least this many times the other ...
NOTABLE_RATIO = 2.0
# ... by at least this much per step (a copy or graph-launched kernel count, or µs of their time).
NOTABLE_COUNT = 10.0
NOTABLE_US = 1000.0


def _notable(a: float, b: float, floor: float) -> bool:
    low, high = sorted((a, b))
    return high - low >= floor and (low == 0 or high >= NOTABLE_RATIO * low)



@dataclass(frozen=True)
class CopyKindChange:
    """One copy kind: copies, µs and bytes per step on each side."""

    kind: str
    count_a: float
    count_b: float
    time_a_us: float
    time_b_us: float
    bytes_a: float
    bytes_b: float

    @property
    def notable(self) -> bool:
        return (_notable(self.count_a, self.count_b, NOTABLE_COUNT)
                or _notable(self.time_a_us, self.time_b_us, NOTABLE_US))

    @property
    def changed(self) -> bool:
        return (self.count_a, self.time_a_us, self.bytes_a) != (self.count_b, self.time_b_us, self.bytes_b)

    @property
    def impact_us(self) -> float:
        return abs(self.time_b_us - self.time_a_us)



@dataclass(frozen=True)
class GraphLaunchChange:
    """Graph launches and the GPU kernels they launched, per step on each side; their share is of every GPU kernel in the same steps."""

    launches_a: float
    launches_b: float
    kernels_a: float
    kernels_b: float
    kernel_a_us: float
    kernel_b_us: float
    share_a: float | None
    share_b: float | None
    names: tuple[str, ...] = ()

    @property
    def notable(self) -> bool:
        return ((self.launches_a == 0) != (self.launches_b == 0)
                or _notable(self.kernels_a, self.kernels_b, NOTABLE_COUNT)
                or _notable(self.kernel_a_us, self.kernel_b_us, NOTABLE_US))

    @property
    def changed(self) -> bool:
        return (self.launches_a, self.kernels_a, self.kernel_a_us) != (self.launches_b, self.kernels_b,
                                                                       self.kernel_b_us)

    @property
    def impact_us(self) -> float:
        return abs(self.kernel_b_us - self.kernel_a_us)



@dataclass(frozen=True)
class CopiesSection:
    available: bool
    reason: str = ""
    kinds: tuple[CopyKindChange, ...] = ()  # in COPY_KINDS order
    graphs: GraphLaunchChange | None = None
    a: copy_counts.CopyReport | None = None
    b: copy_counts.CopyReport | None = None

    @property
    def changed(self) -> bool:
        return any(k.changed for k in self.kinds) or (self.graphs is not None and self.graphs.changed)

    @property
    def notable(self) -> tuple[CopyKindChange | GraphLaunchChange, ...]:
        """The copy kinds and graph launches that changed a lot (``NOTABLE_*``), the largest change in time first."""
        rows = [k for k in self.kinds if k.notable] + ([self.graphs] if self.graphs and self.graphs.notable else [])
        return tuple(sorted(rows, key=lambda r: -r.impact_us))



@dataclass(frozen=True)
class RateChange:
    """One op family's achieved rates on each side (``rnnprof roofline``'s figures; None: not run there)."""

    family: str
    tflops_a: float | None
    tflops_b: float | None
    tbps_a: float | None
    tbps_b: float | None
    kernel_us_a: float  # over the traced steps (roofline's figure)
    kernel_us_b: float
    flops_a: float
    flops_b: float
    steps_a: int = 1  # the traced steps the figures cover (a trace without step markers: one)
    steps_b: int = 1

    @property
    def kernel_us_per_step_a(self) -> float:
        return self.kernel_us_a / max(self.steps_a, 1)

    @property
    def kernel_us_per_step_b(self) -> float:
        return self.kernel_us_b / max(self.steps_b, 1)

    @property
    def ratio(self) -> float | None:
        a, b = self.tflops_a, self.tflops_b
        return b / a if a and b is not None else None



@dataclass(frozen=True)
class RatesSection:
    available: bool
    reason: str = ""
    rows: tuple[RateChange, ...] = ()  # the families of either side, most kernel time (A + B) first

    @property
    def changed(self) -> bool:
        return any(r.tflops_a != r.tflops_b or r.flops_a != r.flops_b for r in self.rows)



@dataclass(frozen=True)
class DiffReport:
    a: str
    b: str
    kind_a: str
    kind_b: str
    time: TimeSection
    ops: OpsSection
    graphs: GraphSection
    config: ConfigSection
    copies: CopiesSection = CopiesSection(available=False)
    rates: RatesSection = RatesSection(available=False)
    definitions: dict[str, str] = field(default_factory=lambda: {**DEFINITIONS, **copy_counts.DEFINITIONS})

    @property
    def identical(self) -> bool:
        """No section found a difference."""
        return not any(s.changed for s in (self.time, self.ops, self.graphs, self.config, self.copies, self.rates))



class IncompatibleSides(ValueError):
    """The two sides hold nothing comparable (a graph against a trace)."""

