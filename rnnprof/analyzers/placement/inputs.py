"""What the rules read: a graph, a trace, a manifest and TensorFlow's kernel list, any of which may be missing.

``placements`` reconciles them into one view per node (op, requested device,
assigned device): the graph says what was requested and, for partition graphs,
where TF put each op; a trace says where each op actually ran.
"""

from __future__ import annotations

import collections
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np

from rnnprof.analyzers.classify import classify
from rnnprof.analyzers.comm import analyze_comm
from rnnprof.analyzers.comm_result import CommReport
from rnnprof.analyzers.noise import StepNoise, noise_of_spans, step_noise
from rnnprof.analyzers.throughput import is_seconds
from rnnprof.events import Device, EventTable, Kind, Manifest, TableMetadata, parse_tf_device

from . import scopes
from .busy import compute_mask, in_step, length, saturated, step_keys, union_array

# Host names that do not tell one machine from another: two traces that both name one may come from two machines
UNNAMED_HOSTS = frozenset({"", "localhost", "localhost.localdomain", "127.0.0.1", "::1"})

if TYPE_CHECKING:  # networkx is only needed by whoever builds the graph
    import networkx


@dataclass(frozen=True)
class NodePlacement:
    name: str
    op: str
    requested: str  # the device string the graph asked for, "" when none
    assigned: Device | None  # where TF put it (partition graph) or where it ran (trace)

    @property
    def requested_device(self) -> Device | None:
        return parse_tf_device(self.requested) if self.requested else None


_EXPLICIT_INDEX = re.compile(r"(?:CPU|GPU|cpu|gpu):(\d+)")


def requested_differs(requested: str, assigned: Device) -> bool:
    """Whether an op ran somewhere other than where it asked to, judging only what it asked for."""
    wanted = parse_tf_device(requested)
    if wanted is None:
        return False  # a job/task without a device type: nothing to compare
    if wanted.kind != assigned.kind:
        return True
    return bool(_EXPLICIT_INDEX.search(requested)) and wanted.index != assigned.index


@dataclass(frozen=True)
class KernelList:
    """The kernels a TensorFlow build registers: for each op type with any kernel, the device types
    ("CPU", "GPU", "DEFAULT" for any device, ...) that have one; ``device_types``: the types the build
    itself supports, for which a missing kernel means something ("CPU", and "GPU" with CUDA or ROCm)."""

    version: str
    device_types: frozenset[str]
    by_op: Mapping[str, frozenset[str]]


@dataclass(frozen=True)
class EventsFigure:
    """What a rule reads of a run's events beyond comm's report (``AuditInput.figure``): ``of_table(inp)`` computes
    it from an input's one table; a whole job's, whose ranks are read apart, is each rank's combined
    (``combine(parts)``, in rank order), the same as of the ranks merged into one table
    (``rnnprof.analyzers.audit.job``). Plain data, so that a rank's travels from a worker process."""

    name: str
    of_table: Callable[["AuditInput"], Any]
    combine: Callable[[list], Any]


def merged(parts: list[dict]) -> dict:
    """An ``EventsFigure``'s combine where each rank's dict has keys of its own (its devices', its workers'): all
    of them."""
    return {key: value for part in parts for key, value in part.items()}


@dataclass(frozen=True)
class JobEvents:
    """What the rules know of a whole job's events when its ranks were read apart (``rnnprof.job.audit``): their
    count, formats, devices (in the order the ranks merged into one table would list them), steps, each step's span
    on the job's clock (``noise.step_spans``), the loaders' records that the rules read (``metadata``: the hosts,
    the devices' properties, the CPU ranks), comm's report and the rules' figures (``EventsFigure``), by name."""

    events: int
    source_format: str
    devices: tuple[Device, ...]
    steps: tuple[int, ...]
    spans: dict[int, tuple[float, float]]
    metadata: TableMetadata
    comm: CommReport
    figures: dict[str, Any]


@dataclass(frozen=True, eq=False)
class AuditInput:
    """Everything known about one run. ``graph`` nodes carry ``op``, ``requested_device``,
    ``assigned_device`` (and optionally ``function``); edges are data or control
    dependencies (``control=True``). ``kernels`` is given with a graph whose ops request devices. A whole job
    whose ranks were read apart has no ``events`` but ``job``: what the rules need of them."""

    graph: "networkx.DiGraph | None" = None
    events: EventTable | None = None
    manifest: Manifest | None = None
    kernels: KernelList | None = None
    job: JobEvents | None = None
    _figures: dict = field(default_factory=dict, repr=False)  # the figures computed of ``events``, by name

    @property
    def has_events(self) -> bool:
        """Whether the input holds trace events (a table, or a job's ranks)."""
        if self.job is not None:
            return self.job.events > 0
        return self.events is not None and len(self.events) > 0

    @property
    def devices(self) -> tuple[Device, ...]:
        """The devices the events name."""
        return self.job.devices if self.job is not None else self.events.devices if self.events is not None else ()

    @property
    def steps(self) -> list[int]:
        """The events' steps, in order."""
        if self.job is not None:
            return list(self.job.steps)
        return [int(s) for s in self.events.steps()] if self.events is not None else []

    @property
    def metadata(self) -> TableMetadata:
        """What the loaders recorded beside the events."""
        return self.job.metadata if self.job is not None else \
            self.events.metadata if self.events is not None else TableMetadata()

    @property
    def source_format(self) -> str:
        return self.job.source_format if self.job is not None else \
            self.events.source_format if self.events is not None else ""

    @cached_property
    def step_noise(self) -> StepNoise:
        """The steps' times from their events' spans on any device (``noise.step_noise``)."""
        return noise_of_spans(self.job.spans) if self.job is not None else step_noise(self.events)

    def figure(self, figure: EventsFigure):
        """``figure`` of the events: a job's, combined from its ranks, or computed of the table once."""
        if self.job is not None:
            return self.job.figures[figure.name]
        if figure.name not in self._figures:
            self._figures[figure.name] = figure.of_table(self)
        return self._figures[figure.name]

    @cached_property
    def placements(self) -> dict[str, NodePlacement]:
        ran_on = _ran_on(_run_counts(self.events)) if self.events is not None else {}
        out: dict[str, NodePlacement] = {}
        if self.graph is not None:
            for name, data in self.graph.nodes(data=True):
                assigned = parse_tf_device(data.get("assigned_device") or "")
                if assigned is None:
                    assigned = ran_on.get(name, (None, ""))[0]
                out[name] = NodePlacement(name, data.get("op") or "", data.get("requested_device") or "", assigned)
        else:
            for name, (device, op) in ran_on.items():
                out[name] = NodePlacement(name, op, "", device)
        return out

    @cached_property
    def classes(self) -> np.ndarray:
        """``classify.classify`` of the trace's events, once for every rule that reads it."""
        return classify(self.events)

    @cached_property
    def comm(self) -> CommReport:
        """``comm.analyze_comm`` of the trace's events (``comm.CommReport``), once for every rule that reads it (a
        job's: its ranks' combined)."""
        return self.job.comm if self.job is not None else analyze_comm(self.events, classes=self.classes)

    @cached_property
    def tower_homes(self) -> dict[int, Device]:
        """Each tower's own device: where most of its compute ops were placed (see ``assign_homes``)."""
        votes: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
        nodes = self.placements.values() if self.graph is not None else \
            [NodePlacement(name, op, "", device) for name, (device, op) in _ran_on(self.figure(TOWER_RAN_ON)).items()]
        for node in nodes:
            tower = scopes.tower_of(node.name)
            if tower is None or node.assigned is None or not is_tower_work(node):
                continue
            votes[tower][node.assigned] += 1
        return assign_homes(votes)

    @property
    def config(self) -> dict:
        return self.manifest.config if self.manifest is not None else {}

    @property
    def session_config(self) -> dict:
        return self.manifest.session_config if self.manifest is not None else {}

    @property
    def timed_step_cpu(self) -> list[tuple[float, float, float | None]]:
        """Each timed step's ``(wall seconds, process CPU seconds, host busy CPU seconds or None)`` from the
        manifest (``names.STEP_TIMES`` and ``names.STEP_CPU``); [] where it records no CPU times, or they do
        not pair with the step times one for one."""
        if self.manifest is None:
            return []
        times, cpu = self.manifest.step_times.timed, self.manifest.step_cpu.timed
        if not times or not cpu or len(times) != len(cpu):
            return []
        rows = []
        for seconds, entry in zip(times, cpu):
            process, host = entry.process_s, entry.host_busy_s
            if not is_seconds(seconds) or not is_seconds(process, zero=True):
                return []
            rows.append((float(seconds), float(process), float(host) if is_seconds(host, zero=True) else None))
        return rows

    @cached_property
    def saturated_steps(self) -> dict[int, np.ndarray]:
        """Per step of the trace (``busy.step_keys``), the intervals during which every one of the host's cores ran
        an op (``busy.saturated``), when the devices share the host's cores (``shared_cores``); else {}."""
        cores = self.shared_cores
        if not cores or self.events is None:
            return {}
        mask = compute_mask(self.events)
        return {step: saturated(self.events, mask & in_step(self.events, step), cores)
                for step in step_keys(self.events)}

    @property
    def shared_cores(self) -> int | None:
        """The host's cores when the run's devices are logical CPU devices, which share them and one thread
        pool (a device waiting is then no idle hardware while the cores are busy); else None."""
        if self.manifest is None:
            return None
        return self.manifest.host_cores if self.manifest.device_kinds == {"logical-cpu"} else None

    @property
    def ranks_sharing_cores(self) -> int | None:
        """The host's cores when the run is PyTorch ranks without a GPU started on one machine (a run directory's
        torchrun), which share its cores; else None."""
        if self.manifest is None or not self.manifest.is_torch or not (self.events is not None or self.job):
            return None
        return None if any(d.kind == "gpu" for d in self.devices) else self.manifest.host_cores

    @property
    def ranks_host(self) -> str | None:
        """The machine that every rank's trace names (Kineto's ``host_name``) where the ranks have no GPU, are two
        or more, and all name the same one, other than a name any machine may have (``UNNAMED_HOSTS``): ranks
        traced on one machine share its cores whoever started them; else None."""
        if (self.events is None and self.job is None) or any(d.kind == "gpu" for d in self.devices):
            return None
        workers = {d.worker for d in self.devices}
        hosts = dict(self.metadata.worker_hosts)
        named = {hosts.get(w) for w in workers}
        if len(workers) < 2 or len(named) != 1:
            return None
        (host,) = named
        return host if host and host.lower() not in UNNAMED_HOSTS else None

    @property
    def ranks_share_cores(self) -> bool:
        """Whether the run's ranks, without a GPU, share one machine's cores: a torchrun of one run directory
        (``ranks_sharing_cores``), or traces that name the same machine (``ranks_host``)."""
        return bool(self.ranks_sharing_cores) or self.ranks_host is not None


def assign_homes(votes: dict[int, collections.Counter]) -> dict[int, Device]:
    """Give each tower a device of its own, maximizing the ops that agree with it.

    Data-parallel towers each own a device, so when a pinned scope moves most of tower
    k's ops onto tower 0's device, tower k's home is still the device holding the rest
    of its ops. Towers left without a distinct device (more towers than devices) take
    their majority device.
    """
    import networkx as nx

    bipartite = nx.Graph()
    for tower, counts in votes.items():
        for device, n in counts.items():
            bipartite.add_edge(("tower", tower), ("device", device), weight=n)
    homes = {}
    for a, b in nx.max_weight_matching(bipartite, maxcardinality=True):
        (_, tower), (_, device) = (a, b) if a[0] == "tower" else (b, a)
        homes[tower] = device
    for tower, counts in votes.items():
        homes.setdefault(tower, min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0])
    return dict(sorted(homes.items()))


def is_tower_work(node: NodePlacement) -> bool:
    """Ops that do a tower's computation (not plumbing, variable updates or gradient aggregation)."""
    return (node.op not in scopes.PLUMBING_OPS
            and not scopes.is_update_op(node.name, node.op)
            and not scopes.is_aggregation_op(node.name, node.op))


def _run_counts(events: EventTable, names: Callable[[str], bool] | None = None) -> dict[str, tuple[dict, str]]:
    """Node name -> (its op and kernel events per device, in the order each device first ran it; its op type, the
    last event's), for the names ``names`` keeps (all without it), in the order the names first ran."""
    mask = np.isin(events.kind, [int(Kind.HOST_OP), int(Kind.KERNEL), int(Kind.COMMUNICATION)])
    if names is not None:
        kept = np.array([names(s) for s in events.strings] or [False], dtype=bool)
        mask &= kept[events.name]
    counts: dict[tuple[int, int], int] = collections.Counter(
        zip(events.name[mask].tolist(), events.device[mask].tolist()))
    op_of = dict(zip(events.name[mask].tolist(), events.op_type[mask].tolist()))
    found: dict[str, tuple[dict, str]] = {}
    for (name, device), n in counts.items():
        if events.strings[name]:
            found.setdefault(events.strings[name], ({}, events.strings[op_of[name]]))[0][events.devices[device]] = n
    return found


def _ran_on(counts: dict[str, tuple[dict, str]]) -> dict[str, tuple[Device, str]]:
    """Node name -> (the device it ran on most often, the first of equals; its op type), from ``_run_counts``."""
    return {name: (max(per_device, key=per_device.get), op) for name, (per_device, op) in counts.items()}


def _tower_scoped(name: str) -> bool:
    return scopes.tower_of(name) is not None


def _combined_counts(parts: list[dict[str, tuple[dict, str]]]) -> dict[str, tuple[dict, str]]:
    """``_run_counts`` of several ranks, as of their tables merged: counts added, a name's op type its last rank's."""
    found: dict[str, tuple[dict, str]] = {}
    for part in parts:
        for name, (per_device, op) in part.items():
            mine = found.setdefault(name, ({}, op))[0]
            for device, n in per_device.items():
                mine[device] = mine.get(device, 0) + n
            found[name] = (mine, op)
    return found


# where the events' tower-scoped operators ran: the towers' homes without a graph (a job's ranks give theirs apart)
TOWER_RAN_ON = EventsFigure("tower-ran-on", lambda inp: _run_counts(inp.events, _tower_scoped), _combined_counts)


def op_events_mask(events: EventTable, names: set[str], device: Device | None) -> np.ndarray:
    """Op/kernel events of these node names (optionally on one device)."""
    codes = [events.code_of(n) for n in names]
    mask = np.isin(events.name, [c for c in codes if c >= 0]) & compute_mask(events)
    if device is not None:
        mask &= events.device == (events.devices.index(device) if device in events.devices else -1)
    return mask


def time_by_name(events: EventTable | None, names: set[str], device: Device | None = None) -> dict[str, float]:
    """Total µs of op/kernel events per node name (optionally on one device)."""
    if events is None or not names:
        return {}
    mask = op_events_mask(events, names, device)
    out: dict[str, float] = collections.defaultdict(float)
    for code, dur in zip(events.name[mask].tolist(), events.dur[mask].tolist()):
        out[events.strings[code]] += dur
    return dict(out)


def wall_time(events: EventTable | None, names: set[str], device: Device | None = None) -> float:
    """µs during which at least one of these ops ran (overlapping ops counted once), over all steps."""
    if events is None or not names:
        return 0.0
    mask = op_events_mask(events, names, device)
    return length(union_array(events.ts[mask], events.end[mask]))


def steps_in(events: EventTable | None) -> int:
    return len(step_keys(events)) if events is not None and len(events) else 0
