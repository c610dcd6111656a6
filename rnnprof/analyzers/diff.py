"""What changed from one input (A) to another (B): device time, ops and kernels, graphs, configuration.

Every figure comes from the analysis that defines it, run once on each side: time per device or rank from
``comm.analyze_comm`` (mean per step); ops and kernels as ``opcount`` counts them (``count-ops B --vs A``);
graph op counts from ``opcount.count_graph`` and moved ops from the placements; achieved rates from
``roofline.analyze_roofline``; configuration from a run's manifest or what a trace records.
``Δ = B − A`` and ``ratio = B ÷ A`` throughout. See docs/commands/diff.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from rnnprof.analyzers import copies as copy_counts
from rnnprof.analyzers import opcount
from rnnprof.analyzers.comm import CommReport, analyze_comm
from rnnprof.analyzers.placement import AuditInput
from rnnprof.analyzers.placement import scopes
from rnnprof.analyzers.launches import host_self_time
from rnnprof.events import Device, EventTable, Kind, Manifest

if TYPE_CHECKING:
    import networkx

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

# Manifest fields that say what was run and where; the rest (paths, times, results) differ on every run.
_MANIFEST_FIELDS = ("config", "session_config", "versions", "machine", "host", "devices")


@dataclass(frozen=True, eq=False)
class Side:
    """One side of a diff: what was read from its paths (each part None when absent, with why)."""

    label: str
    events: EventTable | None = None
    events_reason: str = ""
    user_graph: "networkx.DiGraph | None" = None
    user_reason: str = ""
    runtime_graph: "networkx.DiGraph | None" = None
    runtime_reason: str = ""
    graph: "networkx.DiGraph | None" = None  # user graph with assigned devices joined in (placements)
    manifest: Manifest | None = None
    roofline: object | None = None  # roofline.RooflineReport of a one-process side
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
    """Graph launches and the GPU kernels they launched, per step on each side; share = of all GPU kernels."""

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
    a: "copy_counts.CopyReport | None" = None
    b: "copy_counts.CopyReport | None" = None

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
    kernel_us_a: float
    kernel_us_b: float
    flops_a: float
    flops_b: float

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


def diff_rates(a: Side, b: Side) -> RatesSection:
    """Achieved TFLOP/s and TB/s per op family, A against B, where each side is one process with shapes."""
    ra, rb = a.roofline, b.roofline
    if ra is None or rb is None:
        reasons = [f"{side.label}: {side.roofline_reason}" for side, r in ((a, ra), (b, rb)) if r is None]
        return RatesSection(available=False, reason="; ".join(reasons))
    rows = []
    for family in dict.fromkeys([*ra.families, *rb.families]):
        fa, fb = ra.families.get(family), rb.families.get(family)
        rows.append(RateChange(family, fa.rates.tflops_per_s if fa else None, fb.rates.tflops_per_s if fb else None,
                               fa.rates.tb_per_s if fa else None, fb.rates.tb_per_s if fb else None,
                               fa.rates.kernel_us if fa else 0.0, fb.rates.kernel_us if fb else 0.0,
                               fa.rates.flops if fa else 0.0, fb.rates.flops if fb else 0.0))
    rows.sort(key=lambda r: -(r.kernel_us_a + r.kernel_us_b))
    return RatesSection(available=True, rows=tuple(rows))


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


def diff(a: Side, b: Side) -> DiffReport:
    """Compare ``b`` with ``a``; raises ``IncompatibleSides`` when they share neither events nor a graph."""
    if not ((a.events is not None and b.events is not None) or (a.has_graph and b.has_graph)):
        raise IncompatibleSides(f"A is a {a.kind} and B is a {b.kind}: they share neither trace events nor a graph")
    ca, cb = _comm(a), _comm(b)
    return DiffReport(a=a.label, b=b.label, kind_a=a.kind, kind_b=b.kind, time=diff_time(a, b, ca, cb),
                      ops=diff_ops(a, b), graphs=diff_graphs(a, b), config=diff_config(a, b),
                      copies=diff_copies(a, b, ca[0], cb[0]), rates=diff_rates(a, b))


# -- copies and graph launches --------------------------------------------------------------------------------

def _copies_of(side: Side, report: CommReport | None) -> "copy_counts.CopyReport | None":
    if report is not None and report.copies is not None:
        return report.copies
    return copy_counts.count_copies(side.events) if side.events is not None else None


def diff_copies(a: Side, b: Side, ca: CommReport | None = None, cb: CommReport | None = None) -> CopiesSection:
    """Copies by kind and graph launches per step on both sides (``analyzers.copies``)."""
    ra, rb = _copies_of(a, ca), _copies_of(b, cb)
    if ra is None or rb is None or not (ra.available and rb.available):
        reasons = [_no_events(side) if r is None else r.reason for side, r in ((a, ra), (b, rb))
                   if r is None or not r.available]
        return CopiesSection(available=False, reason=_reasons(*reasons), a=ra, b=rb)
    kinds = []
    for kind in copy_counts.COPY_KINDS:
        if kind not in ra.copies and kind not in rb.copies:
            continue
        kinds.append(CopyKindChange(kind, ra.per_step_figure("copies", kind), rb.per_step_figure("copies", kind),
                                    ra.per_step_figure("copies_us", kind), rb.per_step_figure("copies_us", kind),
                                    ra.per_step_figure("copies_bytes", kind), rb.per_step_figure("copies_bytes", kind)))
    ga, gb = ra.graphs, rb.graphs
    graphs = GraphLaunchChange(ga.launches / ra.n_steps, gb.launches / rb.n_steps, ga.kernels / ra.n_steps,
                               gb.kernels / rb.n_steps, ga.kernel_us / ra.n_steps, gb.kernel_us / rb.n_steps,
                               ga.kernel_share, gb.kernel_share,
                               tuple(sorted(set(ra.graph_launch_names) | set(rb.graph_launch_names))))
    return CopiesSection(available=True, kinds=tuple(kinds), graphs=graphs, a=ra, b=rb)


# -- time per device ------------------------------------------------------------------------------------------

_BREAKDOWN = (("step", "span_us"), ("busy", "busy_us"), ("compute", "compute_us"),
              ("communication", "communication_us"), ("copies", "memcpy_us"), ("memset", "memset_us"),
              ("idle", "idle_us"), ("overlap", "overlap_us"))


def _no_events(side: Side) -> str:
    if side.kind == "graph":
        return f"{side.label} is a graph, without trace events"
    return side.events_reason or f"{side.label} holds no trace events"


def _comm(side: Side) -> tuple[CommReport | None, str]:
    if side.events is None:
        return None, _no_events(side)
    report = analyze_comm(side.events)
    if not report.devices:
        return None, f"{side.label} has no device activity"
    return report, ""


def _per_step(report: CommReport) -> dict[tuple[str, str], float]:
    """(device, metric) -> mean µs per step; the whole trace where a device has no step."""
    out: dict[tuple[str, str], float] = {}
    for d in report.devices:
        parts = list(d.steps.values()) or [d.total]
        for metric, attr in _BREAKDOWN:
            out[(d.device.label, metric)] = float(np.mean([getattr(p, attr) for p in parts]))
    out[("all devices", "activity span")] = _activity_span(report)
    return out


def _activity_span(report: CommReport) -> float:
    """Mean over steps of the span from the first start to the last end of any device's activity."""
    if report.steps:
        spans = [max(d.steps[s].end_us for d in report.devices if s in d.steps)
                 - min(d.steps[s].start_us for d in report.devices if s in d.steps) for s in report.steps]
    else:
        spans = [max(d.total.end_us for d in report.devices) - min(d.total.start_us for d in report.devices)]
    return float(np.mean(spans))


def _timed_step_us(manifest: Manifest | None) -> float | None:
    seconds = manifest.median_step_seconds if manifest is not None else None
    return seconds * 1e6 if seconds is not None else None


STEP_MARKER = re.compile(r"^ProfilerStep#(\d{1,9})$")


def step_marker_periods(table: EventTable | None) -> np.ndarray:
    """Durations (µs) of the host step markers (``ProfilerStep#N`` annotations) of the table's steps, one per
    rank and step: the steps left after a step selection, every marker when the events carry no step."""
    if table is None or not len(table):
        return np.zeros(0)
    numbers = np.full(len(table.strings), -1, dtype=np.int64)
    for code, text in enumerate(table.strings):
        match = STEP_MARKER.match(text) if text.startswith("ProfilerStep#") else None
        if match:
            numbers[code] = int(match.group(1))
    step_of = numbers[table.name]
    rows = (step_of >= 0) & (table.kind == Kind.ANNOTATION)
    known = table.steps()
    if len(known):
        rows &= np.isin(step_of, known)
    return table.dur[rows].astype(float)


def step_time(side: Side, report: CommReport | None, basis: str) -> StepTime:
    """``side``'s step period on ``basis`` (one of ``STEP_BASES``); ``us`` None when it has none."""
    if basis == "step markers":
        periods = step_marker_periods(side.events)
        if len(periods):
            return StepTime(float(periods.mean()), basis, "mean duration of the ProfilerStep#N ranges of the "
                                                          "compared steps", len(periods))
    elif basis == "run record":
        timed = _timed_step_us(side.manifest)
        if timed is not None:
            return StepTime(timed, basis, "median of the run's timed steps (manifest)", 1)
    elif basis == "activity span" and report is not None:
        return StepTime(_activity_span(report), basis, "mean span of all device activity per step",
                        max(1, len(report.steps)))
    return StepTime(None, "")


def headline(a: Side, b: Side, ca: CommReport | None, cb: CommReport | None) -> Headline:
    """Both sides' step periods on the first basis of ``STEP_BASES`` both have (else each on its own first)."""
    for basis in STEP_BASES:
        ta, tb = step_time(a, ca, basis), step_time(b, cb, basis)
        if ta.us is not None and tb.us is not None:
            return Headline(ta, tb)

    def first(side, report):
        return next((t for t in (step_time(side, report, x) for x in STEP_BASES) if t.us is not None),
                    StepTime(None, ""))

    return Headline(first(a, ca), first(b, cb))


def _worker_order(device: Device) -> tuple:
    digits = re.findall(r"\d+", device.worker)
    return (int(digits[-1]) if digits else -1, device.worker, device.index)


def pair_devices(devices_a: list[Device], devices_b: list[Device]) -> list[tuple[Device | None, Device | None]]:
    """Devices of A and B compared with each other: the same label first, then the rest by role (host with
    host, the k-th GPU with the k-th GPU, in rank and index order); a device left over is alone (None)."""
    labels_b = {d.label: d for d in devices_b}
    pairs: list[tuple[Device | None, Device | None]] = [(d, labels_b[d.label]) for d in devices_a
                                                         if d.label in labels_b]
    paired = {d.label for d, _ in pairs}
    rest_a = [d for d in devices_a if d.label not in paired]
    rest_b = [d for d in devices_b if d.label not in paired]
    for kind in sorted({d.kind for d in rest_a} | {d.kind for d in rest_b}):
        of_a = sorted((d for d in rest_a if d.kind == kind), key=_worker_order)
        of_b = sorted((d for d in rest_b if d.kind == kind), key=_worker_order)
        pairs += list(zip(of_a, of_b))
        pairs += [(d, None) for d in of_a[len(of_b):]] + [(None, d) for d in of_b[len(of_a):]]
    return pairs


def _pair_label(da: Device | None, db: Device | None) -> str:
    if da is None or db is None:
        return (da or db).label
    return da.label if da.label == db.label else f"{da.label} ~ {db.label}"


def diff_time(a: Side, b: Side, comm_a: tuple[CommReport | None, str] | None = None,
              comm_b: tuple[CommReport | None, str] | None = None) -> TimeSection:
    (ca, why_a), (cb, why_b) = comm_a or _comm(a), comm_b or _comm(b)
    if ca is None or cb is None:
        top = headline(a, b, ca, cb)
        return TimeSection(available=False, reason=_reasons(why_a, why_b),
                           headline=top if top.a.us is not None or top.b.us is not None else None)
    fa, fb = _per_step(ca), _per_step(cb)
    pairs = pair_devices([d.device for d in ca.devices], [d.device for d in cb.devices])
    order = [m for m, _ in _BREAKDOWN]
    rows = [DeviceFigure("all devices", "activity span", fa[("all devices", "activity span")],
                         fb[("all devices", "activity span")], "all devices", "all devices")]
    for da, db in sorted(pairs, key=lambda p: _pair_label(*p)):
        label = _pair_label(da, db)
        rows += [DeviceFigure(label, metric, fa.get((da.label, metric)) if da else None,
                              fb.get((db.label, metric)) if db else None,
                              da.label if da else "", db.label if db else "") for metric in order]
    timed_a, timed_b = _timed_step_us(a.manifest), _timed_step_us(b.manifest)
    if timed_a is not None or timed_b is not None:
        rows.insert(0, DeviceFigure("run", "timed step (median)", timed_a, timed_b))
    by_role = tuple((da.label, db.label) for da, db in pairs if da and db and da.label != db.label)
    return TimeSection(available=True, steps_a=ca.steps, steps_b=cb.steps, rows=tuple(rows),
                       headline=headline(a, b, ca, cb), paired_by_role=by_role)


# -- ops and kernels ------------------------------------------------------------------------------------------

def fold_brackets(text: str, opening: str, closing: str) -> str | None:
    """``text`` with every outermost ``opening…closing`` group's content replaced by one ellipsis (``f<int, 2>(x)``
    -> ``f<…>(x)``); None when the brackets do not balance."""
    out, depth = [], 0
    for ch in text:
        if ch == opening:
            if depth == 0:
                out.append(opening + "…" + closing)
            depth += 1
        elif ch == closing and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return None if depth else "".join(out)


def normalize_name(name: str) -> str:
    """A kernel or op name with template arguments folded to ``<…>`` and the argument list dropped.

    ``void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, ...>(int, ...)``
    becomes ``at::native::vectorized_elementwise_kernel<…>``; names without templates or arguments
    (TF node names, ``aten::mm``) are kept as they are.
    """
    text = name[5:] if name.startswith("void ") else name
    folded = fold_brackets(text, "<", ">")
    if folded is None:
        return name  # unbalanced brackets: not a template, keep the name
    folded = folded.strip()
    if folded.endswith(")"):  # drop the argument list: the last top-level (...) group
        depth = 0
        for i in range(len(folded) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(folded[i], 0)
            if depth == 0:
                folded = folded[:i].strip() if folded[:i].strip() else folded
                break
    return folded or name


def _grouped(table: EventTable, column: np.ndarray, normalize: bool) -> dict[str, tuple[float, float]]:
    """key -> (kernels per step, µs per step) over the events count-ops counts as kernels."""
    cpu, gpu = opcount.kernel_masks(table)
    steps, in_steps = opcount.counted_steps(table)
    rows = (cpu | gpu) & in_steps
    time = np.maximum(table.dur, 0.0)
    host = np.flatnonzero(cpu)
    time[host] = host_self_time(table, host)  # a host op's own time, its nested host ops' taken out
    codes, inverse = np.unique(column[rows], return_inverse=True)
    counts = np.bincount(inverse, minlength=len(codes))
    times = np.bincount(inverse, weights=time[rows], minlength=len(codes))
    out: dict[str, list[float]] = {}
    for code, n, t in zip(codes.tolist(), counts.tolist(), times.tolist()):
        text = table.strings[code]
        key = normalize_name(text) if normalize else text
        entry = out.setdefault(key, [0.0, 0.0])
        entry[0] += n
        entry[1] += t
    n_steps = len(steps)
    return {k: (n / n_steps, t / n_steps) for k, (n, t) in out.items()}


def _changes(fa: dict[str, tuple[float, float]], fb: dict[str, tuple[float, float]]) -> tuple[OpChange, ...]:
    rows = [OpChange(key, *_pair(fa.get(key), fb.get(key))) for key in set(fa) | set(fb)]
    return tuple(sorted(rows, key=lambda r: (-abs(r.time_delta_us), -abs(r.count_delta), r.key)))


def _pair(a, b) -> tuple[float, float, float, float]:
    a, b = a or (0.0, 0.0), b or (0.0, 0.0)
    return a[0], b[0], a[1], b[1]


def _counts(side: Side) -> opcount.OpCountReport:
    return opcount.count_ops(side.label, side.events, side.user_graph, side.runtime_graph,
                             user_reason=side.user_reason, runtime_reason=side.runtime_reason,
                             events_reason=_no_events(side) if side.events is None else side.events_reason)


def diff_ops(a: Side, b: Side) -> OpsSection:
    counts_a, counts_b = _counts(a), _counts(b)
    # compare(left, right) is left ÷ right: B first gives B ÷ A, the figures of ``count-ops B --vs A``.
    figures = tuple(PairedFigure(r.metric, r.right, r.left) for r in opcount.compare(counts_b, counts_a).ratios)
    if not (counts_a.kernels.available and counts_b.kernels.available):
        reasons = [k.reason for k in (counts_a.kernels, counts_b.kernels) if not k.available]
        return OpsSection(available=False, reason=_reasons(*reasons), counts=figures)
    by_name = _changes(_grouped(a.events, a.events.name, True), _grouped(b.events, b.events.name, True))
    by_type = _changes(_grouped(a.events, a.events.op_type, False), _grouped(b.events, b.events.op_type, False))
    return OpsSection(available=True, counts=figures, by_name=by_name, by_type=by_type)


# -- graphs ---------------------------------------------------------------------------------------------------

def _graph_counts(view: str, ga: opcount.GraphOpCounts, gb: opcount.GraphOpCounts) -> list[GraphOpChange]:
    rows = []
    for device in sorted(set(ga.by_device) | set(gb.by_device)):
        rows.append(GraphOpChange(view, device, "", ga.by_device.get(device, 0), gb.by_device.get(device, 0)))
        types_a, types_b = ga.by_device_type.get(device, {}), gb.by_device_type.get(device, {})
        rows += [GraphOpChange(view, device, op, types_a.get(op, 0), types_b.get(op, 0))
                 for op in sorted(set(types_a) | set(types_b))]
    return [r for r in rows if r.delta]


def _names_nodes(events: EventTable | None) -> bool:
    """Whether events are named after graph nodes (``name`` and op type differ, as in TF traces), rather
    than after the operator itself (PyTorch's ``aten::mm``, a kernel's name)."""
    return events is not None and bool((events.name != events.op_type).any())


def _placements(side: Side):
    if side.graph is None and not _names_nodes(side.events):
        return None
    return AuditInput(graph=side.graph, events=side.events).placements


def _reasons(*texts: str) -> str:
    return "; ".join(dict.fromkeys(t for t in texts if t))  # each once, in order


def diff_graphs(a: Side, b: Side) -> GraphSection:
    views = []
    reasons = []
    for view, attr in (("user", "user_graph"), ("runtime", "runtime_graph")):
        ga = opcount.count_graph(getattr(a, attr), getattr(a, f"{view}_reason"))
        gb = opcount.count_graph(getattr(b, attr), getattr(b, f"{view}_reason"))
        if ga.available and gb.available:
            views += _graph_counts(view, ga, gb)
        else:
            reasons.append(f"{view} graph: " + _reasons(*(g.reason for g in (ga, gb) if not g.available)))
    available = len(reasons) < 2
    counts = tuple(sorted(views, key=lambda r: (-abs(r.delta), r.view, r.device, r.op_type)))
    pa, pb = _placements(a), _placements(b)
    if pa is None or pb is None:
        return GraphSection(available=available, reason="; ".join(reasons), counts=counts,
                            placement_reason="a side has neither a graph nor trace events named after graph "
                                             "nodes; PyTorch operators and kernels are not graph nodes")
    moved = []
    for name, node_a in pa.items():
        node_b = pb.get(name)
        if node_b is None:
            continue
        basis = ("assigned" if node_a.assigned is not None and node_b.assigned is not None else
                 "requested" if node_a.assigned is None and node_b.assigned is None else None)
        device_a, device_b = ((node_a.assigned, node_b.assigned) if basis == "assigned" else
                              (node_a.requested_device, node_b.requested_device) if basis else (None, None))
        if device_a is None or device_b is None or device_a == device_b:
            continue
        moved.append(MovedOp(name=name, op=node_a.op or node_b.op, tower=scopes.tower_of(name),
                             scope=scopes.group_scope(name, depth=2), device_a=device_a.label,
                             device_b=device_b.label, basis=basis))
    return GraphSection(available=available, reason="; ".join(reasons), counts=counts, placement_available=True,
                        moved=tuple(sorted(moved, key=lambda m: m.name)))


# -- configuration --------------------------------------------------------------------------------------------

def _flatten(value, prefix: str, out: dict[str, str]) -> None:
    """Nested settings as ``a.b.c -> text``; a list of named entries (the manifest's devices) by their names."""
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(item, f"{prefix}.{key}", out)
    elif isinstance(value, list):
        out[prefix] = ", ".join(str(v.get("name", v)) if isinstance(v, dict) else str(v) for v in value)
    else:
        out[prefix] = value if isinstance(value, str) else repr(value)


def _trace_metadata(table: EventTable) -> list[dict]:
    found, pending = [], [table.metadata]
    while pending:
        metadata = pending.pop(0)
        found.append(metadata)
        pending.extend(p for p in metadata.get("parts", ()) if isinstance(p, dict))
    return found


def settings(side: Side) -> dict[str, str]:
    """What a side records about how it ran, flattened to ``key -> text``."""
    out: dict[str, str] = {}
    if side.manifest is not None:
        recorded = side.manifest.as_dict()
        for key in _MANIFEST_FIELDS:
            if key in recorded:
                _flatten(recorded[key], key, out)
    if side.events is not None:
        parts = _trace_metadata(side.events)
        distributed = [p["distributed"] for p in parts if isinstance(p.get("distributed"), dict) and p["distributed"]]
        for key in ("world_size", "backend"):
            values = sorted({str(d[key]) for d in distributed if key in d})
            if values:
                out[f"distributed.{key}"] = ", ".join(values)
        ranks = {d["rank"] if isinstance(d["rank"], int) else str(d["rank"]) for d in distributed if "rank" in d}
        if ranks:
            out["distributed.ranks"] = ", ".join(
                str(r) for r in sorted(ranks, key=lambda r: (0, r, "") if isinstance(r, int) else (1, 0, str(r))))
        models = sorted({str(g["name"]) for p in parts if isinstance(p.get("devices_properties"), list)
                         for g in p["devices_properties"] if isinstance(g, dict) and "name" in g})
        if models:
            out["gpu model"] = ", ".join(models)
        out["trace format"] = side.events.source_format
        out["trace devices"] = ", ".join(d.label for d in sorted(side.events.devices))
    return out


def diff_config(a: Side, b: Side) -> ConfigSection:
    sa, sb = settings(a), settings(b)
    if not sa and not sb:
        return ConfigSection(available=False, reason="neither side records its configuration")
    changes = tuple(ConfigChange(k, sa.get(k), sb.get(k)) for k in sorted(set(sa) | set(sb)) if sa.get(k) != sb.get(k))
    return ConfigSection(available=True, changes=changes, compared=len(set(sa) | set(sb)))


__all__ = ["ConfigChange", "ConfigSection", "CopiesSection", "CopyKindChange", "GraphLaunchChange", "DeviceFigure", "DiffReport", "PairedFigure", "GraphOpChange", "GraphSection",
           "Headline", "IncompatibleSides", "MovedOp", "OpChange", "OpsSection", "STEP_BASES", "Side", "StepTime",
           "TimeSection", "diff", "diff_copies", "fold_brackets", "headline", "normalize_name", "pair_devices", "settings", "step_marker_periods"]
