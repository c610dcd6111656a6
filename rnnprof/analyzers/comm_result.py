"""What ``analyze_comm`` finds: per device (and per device and step) a ``Breakdown`` of its time, the
stragglers, the communication ops, the collectives across ranks; ``CommReport.as_dict`` is ``comm --json``."""

from __future__ import annotations

from dataclasses import dataclass, field

from rnnprof.analyzers.collectives import CollectivesReport
from rnnprof.analyzers.copies import CopyReport
from rnnprof.analyzers.groups import GroupsReport, GroupStraggler, group_stragglers
from rnnprof.analyzers.idle import DEFAULT_KERNEL_WAIT_US, DeviceIdle
from rnnprof.analyzers.noise import Significance, StepNoise
from rnnprof.analyzers.steps import JobStepTimes, window_step_times
from rnnprof.events import Device
from rnnprof.events.names import UNKNOWN_COLLECTIVE


@dataclass(frozen=True)
class Breakdown:
    """Times in µs for one device over the whole trace or one step."""

    start_us: float
    end_us: float
    busy_us: float
    compute_us: float
    communication_us: float
    memcpy_us: float
    memset_us: float
    overlap_us: float  # communication running while compute runs
    events: int
    first_comm_us: float | None = None  # start of its first communication (stragglers compare these)
    last_work_us: float | None = None  # end of its last activity in [start, end) (None: end_us; stragglers)

    @property
    def work_end_us(self) -> float:
        """When its last activity ends: ``end_us`` for a whole trace, the last busy moment of a step's window."""
        return self.end_us if self.last_work_us is None else self.last_work_us

    @property
    def span_us(self) -> float:
        return self.end_us - self.start_us

    @property
    def idle_us(self) -> float:
        return max(self.span_us - self.busy_us, 0.0)

    @property
    def non_compute_us(self) -> float:
        return max(self.busy_us - self.compute_us, 0.0)

    def pct(self, value_us: float) -> float:
        """``value_us`` as a percentage of the span."""
        return 100.0 * value_us / self.span_us if self.span_us > 0 else 0.0

    @property
    def overlap_pct(self) -> float | None:
        """Share of communication time overlapped by compute; None without communication."""
        return 100.0 * self.overlap_us / self.communication_us if self.communication_us > 0 else None

    def as_dict(self) -> dict:
        return {
            "start_us": self.start_us,
            "end_us": self.end_us,
            "span_us": self.span_us,
            "busy_us": self.busy_us,
            "idle_us": self.idle_us,
            "compute_us": self.compute_us,
            "non_compute_us": self.non_compute_us,
            "communication_us": self.communication_us,
            "memcpy_us": self.memcpy_us,
            "memset_us": self.memset_us,
            "overlap_us": self.overlap_us,
            "idle_pct": self.pct(self.idle_us),
            "compute_pct": self.pct(self.compute_us),
            "non_compute_pct": self.pct(self.non_compute_us),
            "communication_pct": self.pct(self.communication_us),
            "overlap_pct": self.overlap_pct,
            "events": self.events,
            "work_end_us": self.work_end_us,
        }


@dataclass(frozen=True)
class DeviceComm:
    device: Device
    total: Breakdown
    steps: dict[int, Breakdown]
    # what counts as its activity: "streams", "executor ops" (GPU fallback), "ops", "host operators" (CPU rank)
    basis: str = "streams"
    idle: DeviceIdle | None = None  # idle time by cause; None without launches in the trace (analyzers.idle)


@dataclass(frozen=True)
class Straggler:
    """One step (None: the whole trace when no steps are known) across devices."""

    step: int | None
    devices: int
    last_to_finish: Device
    finish_lag_vs_median_us: float
    finish_lag_vs_earliest_us: float
    last_comm_start: Device | None
    comm_start_lag_vs_median_us: float | None
    comm_start_lag_vs_earliest_us: float | None

    def as_dict(self) -> dict:
        return {
            "step": self.step,
            "devices": self.devices,
            "last_to_finish": self.last_to_finish.label,
            "finish_lag_vs_median_us": self.finish_lag_vs_median_us,
            "finish_lag_vs_earliest_us": self.finish_lag_vs_earliest_us,
            "last_comm_start": self.last_comm_start.label if self.last_comm_start else None,
            "comm_start_lag_vs_median_us": self.comm_start_lag_vs_median_us,
            "comm_start_lag_vs_earliest_us": self.comm_start_lag_vs_earliest_us,
        }


@dataclass(frozen=True)
class CommOp:
    """One communication op (events with the same name) on the devices: what the communication time is."""

    name: str
    op_type: str
    events: int
    devices: int
    total_us: float  # summed durations over its events (not a union: instances on two devices both count)
    # collective type (rnnprof.events.names.COLLECTIVE_TYPES) -> events of that type (one name may run several: RCCL)
    collective_types: tuple[tuple[str, int], ...] = ()

    @property
    def collective_type(self) -> str:
        """Its events' collective type; the types joined by "+" when they differ."""
        return "+".join(t for t, _ in self.collective_types) or UNKNOWN_COLLECTIVE

    def as_dict(self) -> dict:
        return {"name": self.name, "op_type": self.op_type, "events": self.events, "devices": self.devices,
                "total_us": self.total_us, "collective_type": self.collective_type,
                "collective_types": dict(self.collective_types)}


@dataclass(frozen=True)
class CommReport:
    devices: tuple[DeviceComm, ...]
    stragglers: tuple[Straggler, ...]
    steps: tuple[int, ...]
    extra_patterns: tuple[str, ...]
    comm_event_names: tuple[str, ...]  # distinct names counted as communication on devices
    comm_ops: tuple[CommOp, ...] = ()  # by summed time, longest first
    source_format: str = ""
    sources: tuple[str, ...] = ()
    host_only: bool = False  # the trace has events, all of them on hosts (so no device to report)
    time_base_us: float = 0.0  # the clock the times are relative to (the table's)
    collectives: CollectivesReport | None = None  # across ranks; None with fewer than two ranks
    alignment: dict | None = None  # {"method", "offsets"} when several traces were put on one clock
    kernel_wait_us: float = DEFAULT_KERNEL_WAIT_US  # idle gaps shorter than this (and not host wait) are kernel wait
    step_selection: str = ""  # the flags that selected the steps analysed ("": the whole trace)
    copies: CopyReport | None = None  # copies by kind and graph launches per device and step (analyzers.copies)
    # GPU events in no step, by reason (``rnnprof.events.OUTSIDE_REASONS``), as the loaders counted them
    outside_steps: dict[str, int] = field(default_factory=dict)
    groups: GroupsReport | None = None  # per process group, collective and phase (analyzers.groups)

    @property
    def group_stragglers(self) -> tuple[GroupStraggler, ...]:
        """Per process group, the member that arrived last at its collectives most often."""
        return group_stragglers(self.collectives)

    @property
    def step_time(self) -> JobStepTimes:
        """Each step's time as every command gives it (``steps.window_step_times``): the longest of its windows
        over the devices."""
        return window_step_times({(k, s): b.span_us for k, d in enumerate(self.devices) for s, b in d.steps.items()})

    @property
    def step_noise(self) -> StepNoise:
        """Each step's time (``step_time``) and their jitter."""
        times = self.step_time
        return StepNoise(times.steps, times.us)

    @property
    def straggler_significance(self) -> Significance | None:
        """The straggler rank's lateness at collectives against the run's jitter (``rnnprof.analyzers.noise``);
        None without collectives matched across ranks."""
        if self.collectives is None:
            return None
        return self.collectives.straggler_significance(self.step_noise.spread_us)

    def as_dict(self) -> dict:
        extra = {}
        if self.copies is not None:
            extra["copies"] = self.copies.as_dict()
        if self.groups is not None:
            extra["process_groups"] = self.groups.as_dict(self.group_stragglers)
        if self.alignment is not None:
            extra["alignment"] = self.alignment
        if self.collectives is not None:
            extra["collectives"] = self.collectives.as_dict()
            verdict = self.straggler_significance
            extra["collectives"]["straggler_significance"] = None if verdict is None else verdict.as_dict()
            if verdict is not None and not verdict.significant:
                extra["collectives"]["straggler_beyond_jitter"] = None
            else:
                extra["collectives"]["straggler_beyond_jitter"] = self.collectives.straggler
        return {
            "source_format": self.source_format,
            "sources": list(self.sources),
            "extra_comm_patterns": list(self.extra_patterns),
            "steps": list(self.steps),
            "step_time": self.step_time.as_dict(),
            "step_selection": self.step_selection or None,
            "outside_steps": {"gpu_events": sum(self.outside_steps.values()), "by_reason": dict(self.outside_steps)},
            "kernel_wait_us": self.kernel_wait_us,
            "devices": [
                {
                    "device": d.device.label,
                    "worker": d.device.worker,
                    "basis": d.basis,
                    "total": d.total.as_dict(),
                    "steps": {str(s): b.as_dict() for s, b in d.steps.items()},
                    "idle_by_cause": _idle_document(d.idle),
                }
                for d in self.devices
            ],
            "stragglers": [s.as_dict() for s in self.stragglers],
            "communication_events": list(self.comm_event_names),
            "communication_ops": [op.as_dict() for op in self.comm_ops],
            **extra,
        }


def _idle_document(idle: DeviceIdle | None) -> dict | None:
    if idle is None:
        return None
    return {"total": idle.total.as_dict(), "steps": {str(s): c.as_dict() for s, c in idle.steps.items()},
            "streams": [s.as_dict() for s in idle.streams]}

