"""What the rules read: a graph, a trace, a manifest and TensorFlow's kernel list, any of which may be missing.

``placements`` reconciles them into one view per node (op, requested device,
assigned device): the graph says what was requested and, for partition graphs,
where TF put each op; a trace says where each op actually ran.
"""

from __future__ import annotations

import collections
import re
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Mapping

import numpy as np

from rnnprof.analyzers.classify import classify
from rnnprof.analyzers.comm import analyze_comm
from rnnprof.analyzers.comm_result import CommReport
from rnnprof.analyzers.throughput import is_seconds
from rnnprof.events import Device, EventTable, Kind, Manifest, parse_tf_device

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


@dataclass(frozen=True, eq=False)
class AuditInput:
    """Everything known about one run. ``graph`` nodes carry ``op``, ``requested_device``,
    ``assigned_device`` (and optionally ``function``); edges are data or control
    dependencies (``control=True``). ``kernels`` is given with a graph whose ops request devices."""

    graph: "networkx.DiGraph | None" = None
    events: EventTable | None = None
    manifest: Manifest | None = None
    kernels: KernelList | None = None

    @cached_property
    def placements(self) -> dict[str, NodePlacement]:
        ran_on = _devices_from_events(self.events) if self.events is not None else {}
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
        """``comm.analyze_comm`` of the trace's events (``comm.CommReport``), once for every rule that reads it."""
        return analyze_comm(self.events, classes=self.classes)

    @cached_property
    def tower_homes(self) -> dict[int, Device]:
        """Each tower's own device: where most of its compute ops were placed (see ``assign_homes``)."""
        votes: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
        for node in self.placements.values():
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
        if self.manifest is None or not self.manifest.is_torch or self.events is None:
            return None
        return None if any(d.kind == "gpu" for d in self.events.devices) else self.manifest.host_cores

    @property
    def ranks_host(self) -> str | None:
        """The machine that every rank's trace names (Kineto's ``host_name``) where the ranks have no GPU, are two
        or more, and all name the same one, other than a name any machine may have (``UNNAMED_HOSTS``): ranks
        traced on one machine share its cores whoever started them; else None."""
        if self.events is None or any(d.kind == "gpu" for d in self.events.devices):
            return None
        workers = {d.worker for d in self.events.devices}
        hosts = dict(self.events.metadata.worker_hosts)
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


def _devices_from_events(events: EventTable) -> dict[str, tuple[Device, str]]:
    """Node name -> (device it ran on most often, op type), from op and kernel events."""
    mask = np.isin(events.kind, [int(Kind.HOST_OP), int(Kind.KERNEL), int(Kind.COMMUNICATION)])
    counts: dict[tuple[int, int], int] = collections.Counter(
        zip(events.name[mask].tolist(), events.device[mask].tolist()))
    op_of = dict(zip(events.name[mask].tolist(), events.op_type[mask].tolist()))
    best: dict[int, tuple[int, int]] = {}
    for (name, device), n in counts.items():
        if name not in best or n > best[name][1]:
            best[name] = (device, n)
    return {events.strings[name]: (events.devices[device], events.strings[op_of[name]])
            for name, (device, _) in best.items() if events.strings[name]}


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
