"""A run directory's manifest, as the analyses read it: ``Manifest``, each field typed (docs/run-directory.md)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ManifestDevice:
    """One of the run's devices: its TensorFlow or rank name and its kind (``gpu``, ``logical-cpu``, ``cpu``)."""

    name: str
    kind: str = ""


@dataclass(frozen=True)
class StepCpuTime:
    """One step's CPU seconds: this process's, and the whole host's busy time (None where not readable)."""

    process_s: float
    host_busy_s: float | None = None


@dataclass(frozen=True)
class ManifestStepTimes:
    """The manifest's ``names.STEP_TIMES``: each warm-up and timed step's wall seconds."""

    warmup: tuple[float, ...] = ()
    timed: tuple[float, ...] = ()


@dataclass(frozen=True)
class ManifestStepCpu:
    """The manifest's ``names.STEP_CPU``: each warm-up and timed step's CPU times."""

    warmup: tuple[StepCpuTime, ...] = ()
    timed: tuple[StepCpuTime, ...] = ()


@dataclass(frozen=True)
class RankMemory:
    """One rank's memory as its capture recorded it (a rank's ``memory``): the memory in use when the window
    started, from ``baseline_source`` (``cuda_allocator`` or ``process_rss``), and the CUDA allocator's peaks."""

    profile_memory: bool = False
    baseline_source: str | None = None
    baseline_allocated: int | None = None
    baseline_reserved: int | None = None
    max_allocated: int | None = None
    max_reserved: int | None = None


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


@dataclass(frozen=True)
class Manifest:
    """A run directory's ``manifest.json``, each field typed (docs/run-directory.md says what each holds).

    ``rnnprof.rundir.manifest.read_manifest`` reads and checks it once (``from_dict``); a field the JSON
    does not hold has its default here. ``keys`` (the JSON's keys, in order) and ``extra`` (those no field
    names) give the same JSON object back (``as_dict``).
    """

    format: str | None = None
    version: int | None = None
    status: str = ""
    created: str | None = None
    finished: str | None = None
    command: tuple[str, ...] = ()
    versions: dict[str, str | None] = field(default_factory=dict)
    host: str | None = None
    machine: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    session_config: dict[str, Any] = field(default_factory=dict)
    devices: tuple[ManifestDevice, ...] = ()
    device_kind: str | None = None
    throughput: dict[str, Any] = field(default_factory=dict)
    step_times: ManifestStepTimes = ManifestStepTimes()
    step_cpu: ManifestStepCpu = ManifestStepCpu()
    traced_steps: tuple[int, ...] = ()
    profiled_steps: tuple[int, ...] = ()
    steps_seen: int | None = None
    captured: dict[str, tuple[str, ...]] = field(default_factory=dict)
    cluster: dict[str, Any] | None = None
    clock_offsets: dict[str, Any] | None = None
    error: str | None = None
    profile_error: str | None = None
    exit_code: int | None = None
    framework: str | None = None
    world_size: int | None = None
    backend: str | None = None
    ranks: tuple[dict[str, Any], ...] = ()
    failed_rank: int | None = None
    errors_after: tuple[str, ...] = ()
    hang: dict[str, Any] | None = None
    untimed_fetches: dict[str, dict[str, int]] = field(default_factory=dict)  # step -> task -> tensors it fetched
    # from other tasks (its partition graph) that TensorFlow timed none of in that step
    keys: tuple[str, ...] = field(default=(), repr=False)
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, data: dict) -> "Manifest":
        """The manifest of a parsed ``manifest.json``; ``msgspec.ValidationError`` naming the field (``$.devices[1]``)
        where a field has the wrong type or an entry lacks a required one."""
        import msgspec

        if not isinstance(data, dict):
            raise msgspec.ValidationError(f"Expected `object`, got `{type(data).__name__}`")
        known = {k: v for k, v in data.items() if k in _MANIFEST_FIELDS}
        manifest = msgspec.convert(known, cls)
        return dataclasses.replace(manifest, keys=tuple(data), extra={k: v for k, v in data.items() if k not in known})

    def as_dict(self) -> dict:
        """The JSON object it was read from: the same keys in the same order, the same values."""
        return {k: self.extra[k] if k in self.extra else _plain(getattr(self, k)) for k in self.keys}

    def has(self, key: str) -> bool:
        """Whether the JSON holds ``key``."""
        return key in self.keys

    @property
    def is_torch(self) -> bool:
        """A run of ``trace --framework torch``: one Kineto trace per rank, no timelines."""
        return self.framework == "torch"

    @property
    def device_kinds(self) -> set[str]:
        """The kinds of the run's devices (``gpu``, ``logical-cpu``, ``cpu``), without ``host``; empty when unknown."""
        return {d.kind for d in self.devices if d.kind} - {"host"}

    @property
    def host_cores(self) -> int | None:
        """The host's CPU count as the manifest records it."""
        for key in ("cpu_count", "cores", "logical_cpus"):
            value = self.machine.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None

    @property
    def rank_traces(self) -> list[str]:
        """The ranks' Kineto traces as listed: ``captured["kineto"]``, then each rank's ``trace``."""
        return [*self.captured.get("kineto", ()),
                *(r["trace"] for r in self.ranks if isinstance(r.get("trace"), str))]

    def rank_seconds(self, key: str) -> dict[str, list[float]]:
        """Each rank's per-step list of seconds under ``key`` (``names.RANK_STEP_*``) by worker name
        (``rank<r>``); ranks whose list is missing or holds anything but finite times of 0 or more are left
        out."""
        found = {}
        for r in self.ranks:
            values, rank = seconds_per_step(r.get(key)), r.get("rank")
            if isinstance(rank, int) and not isinstance(rank, bool) and values is not None:
                found[f"rank{rank}"] = values
        return found

    @property
    def rank_memory(self) -> dict[str, RankMemory]:
        """Each rank's ``memory`` record by worker name (``rank<r>``); ranks without one are left out."""
        found = {}
        for r in self.ranks:
            memory, rank = r.get("memory"), r.get("rank")
            if not isinstance(memory, dict) or not isinstance(rank, int):
                continue
            baseline = memory.get("baseline") if isinstance(memory.get("baseline"), dict) else {}
            source = baseline.get("source")
            found[f"rank{rank}"] = RankMemory(
                memory.get("profile_memory") is True, source if isinstance(source, str) else None,
                _count(baseline.get("allocated")), _count(baseline.get("reserved")),
                _count(memory.get("max_allocated")), _count(memory.get("max_reserved")))
        return found

    @property
    def median_step_seconds(self) -> float | None:
        """The median of the timed steps as ``throughput`` records it; None where it records none."""
        value = self.throughput.get("median_step_seconds")
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def seconds_per_step(values) -> list[float] | None:
    """``values`` as floats where it is a list of finite times of 0 or more (a rank's ``names.RANK_STEP_*``
    record), else None."""
    if not isinstance(values, list) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < float("inf") for v in values):
        return None
    return [float(v) for v in values]


_MANIFEST_FIELDS = frozenset(f.name for f in dataclasses.fields(Manifest)) - {"keys", "extra"}


def _plain(value):
    """A manifest field's value as JSON holds it: records as objects, tuples as arrays."""
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
