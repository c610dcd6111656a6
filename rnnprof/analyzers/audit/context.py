"""What the audit rules read: one table of events (all ranks on one clock), the placement input, and the
analyses several rules share, each computed once on first use."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from rnnprof.analyzers.comm_result import CommReport, DeviceComm
from rnnprof.analyzers.critical_path import CriticalPathReport, analyze_critical_path
from rnnprof.analyzers.launches import LaunchStats, host_wait_share, launch_stats
from rnnprof.analyzers.memory import MemoryReport, analyze_memory
from rnnprof.analyzers.noise import StepNoise, step_noise
from rnnprof.analyzers.pipeline import PipelineReport, analyze_pipeline
from rnnprof.analyzers.profiler_cost import RankProfilerCost, profiler_cost
from rnnprof.analyzers.placement.inputs import AuditInput
from rnnprof.analyzers.placement.registry import PlacementResult
from rnnprof.events import EventTable


@dataclass(frozen=True, eq=False)
class Known:
    """Analyses of the same table a caller has already computed (``rnnprof report``'s), so that the audit reads
    them rather than computing them again: the events' ``classify``, ``analyze_comm`` and ``launch_stats``, the
    placement rules' result and ``analyze_pipeline``'s."""
    classes: np.ndarray | None = None
    comm: CommReport | None = None
    launches: LaunchStats | None = None
    placement: PlacementResult | None = None  # of the default rules on the same input
    pipeline: PipelineReport | None | str = "not given"  # ``analyze_pipeline``'s (None: the input holds none)


@dataclass(frozen=True, eq=False)
class AuditContext:
    placement: AuditInput
    notes: list = field(default_factory=list)  # what the rules say beyond their findings
    # findings a rule held back as within the run's jitter, which a replay may bring out: a fault that hides
    # another (``replay.audit_savings``)
    held_back: list = field(default_factory=list)
    known: Known = Known()
    shared: dict = field(default_factory=dict, repr=False)  # what several rules compute of the table, kept once

    @property
    def table(self) -> EventTable | None:
        return self.placement.events

    @property
    def classes(self) -> np.ndarray:
        """``classify`` of the table, once (the caller's, or the placement input's, which its rules share)."""
        return self.known.classes if self.known.classes is not None else self.placement.classes

    @property
    def comm(self) -> CommReport:
        """``analyze_comm`` of the table, once (the caller's, or the placement input's)."""
        return self.known.comm if self.known.comm is not None else self.placement.comm

    @property
    def idle_gpus(self) -> list[DeviceComm]:
        """comm's GPU devices whose idle time has causes per step (``comm.DeviceComm`` with ``idle.steps``)."""
        if self.table is None or not len(self.table):
            return []
        return [d for d in self.comm.devices if d.device.kind == "gpu" and d.idle is not None and d.idle.steps]

    @cached_property
    def noise(self) -> StepNoise:
        """The run's step times and jitter (``noise.StepNoise``): the comm windows' longest span per step."""
        if self.table is None or not len(self.table):
            return StepNoise((), ())
        found = self.comm.step_noise if self.comm.devices else StepNoise((), ())
        return found if found.steps else step_noise(self.table)

    @cached_property
    def critical_path(self) -> CriticalPathReport:
        """``critical_path.analyze_critical_path`` of the table (ranks joined at their collectives)."""
        return analyze_critical_path(self.table, classes=self.classes)

    @cached_property
    def launches(self) -> LaunchStats:
        if self.known.launches is not None:
            return self.known.launches
        return launch_stats(self.table, host_wait_share=host_wait_share(self.comm))

    @cached_property
    def memory(self) -> MemoryReport | None:
        """``analyze_memory`` of the table's allocator records, once; None without any."""
        if self.table is None or not len(self.table.memory):
            return None
        return analyze_memory(self.table)

    @cached_property
    def pipeline(self) -> PipelineReport | None:
        """``pipeline.analyze_pipeline`` of the table, once; None where its ranks run no pipeline."""
        if not isinstance(self.known.pipeline, str):
            return self.known.pipeline
        if self.table is None or not len(self.table):
            return None
        return analyze_pipeline(self.table, classes=self.classes)

    @cached_property
    def profiler_cost(self) -> dict[str, RankProfilerCost]:
        """Each PyTorch rank's profiler cost (``profiler_cost``), by worker; {} where the manifest records no rank."""
        return profiler_cost(self.table, self.placement.manifest)

    @property
    def step_us(self) -> float:
        return self.noise.median_us
