"""Copies by kind and work launched through CUDA (HIP) graphs, per device and step.

A copy's kind is read from its op type or name: ``HtoD``, ``DtoH``, ``DtoD``, ``PtoP``, ``HtoH``, else ``other``;
per device, kind and step: count, bytes (copies without a byte count counted apart) and summed duration.
Graph launches are ``cudaGraphLaunch``/``hipGraphLaunch`` calls; a graph's work is the GPU work whose launcher
(``launches.launchers``) is one, counted on the device it ran on.

GPU work belongs to its launch's step, other events to their own; what lies outside every step is counted in
``outside_steps`` and left out. A trace without step markers is one step (-1). See docs/commands/count-ops.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from rnnprof.analyzers import intervals
from rnnprof.analyzers.device_work import kernel_masks, launchers
from rnnprof.events import EventTable, Kind

COPY_KINDS = ("HtoD", "DtoH", "DtoD", "PtoP", "HtoH", "other")
_SHORT = re.compile(r"(HtoD|DtoH|DtoD|PtoP|HtoH)")
_LONG = re.compile(r"(Host|Device|Peer)\s*To\s*(Host|Device|Peer)", re.IGNORECASE)
_LONG_KIND = {("host", "device"): "HtoD", ("device", "host"): "DtoH", ("device", "device"): "DtoD",
              ("peer", "peer"): "PtoP", ("device", "peer"): "PtoP", ("peer", "device"): "PtoP",
              ("host", "host"): "HtoH"}
GRAPH_LAUNCH = re.compile(r"^(cuda|hip)GraphLaunch")

DEFINITIONS = {
    "copy kinds": "HtoD host to device, DtoH device to host, DtoD within a device, PtoP between devices (peer "
                  "to peer), HtoH host to host, other: a copy whose name says no kind; read from the copy's "
                  "name (Kineto 'Memcpy DtoD (Device -> Device)', TF 'MEMCPYHtoD')",
    "copy bytes": "summed bytes of the copies that record them; copies without a byte count are counted apart",
    "graph launches": "runtime calls cudaGraphLaunch / hipGraphLaunch; a graph's kernels, copies and memsets "
                      "carry the launch's correlation id and belong to its step",
    "graph kernels": ("GPU kernels launched through a graph launch; their share is of every GPU kernel in the same steps "
                      "(the GPU kernels count-ops counts)"),
}


def copy_kind(text: str) -> str | None:
    """The copy kind a name says (``HtoD``, ``DtoH``, ``DtoD``, ``PtoP``, ``HtoH``), else None."""
    match = _SHORT.search(text)
    if match:
        return match.group(1)
    match = _LONG.search(text)
    if match:
        return _LONG_KIND.get((match.group(1).lower(), match.group(2).lower()))
    return None


@dataclass(frozen=True)
class CopyCount:
    count: int = 0
    bytes: int = 0  # over the copies that record their size
    unknown_bytes: int = 0  # copies without a byte count
    time_us: float = 0.0

    def __add__(self, other: "CopyCount") -> "CopyCount":
        return CopyCount(self.count + other.count, self.bytes + other.bytes,
                         self.unknown_bytes + other.unknown_bytes, self.time_us + other.time_us)

    def as_dict(self) -> dict:
        return {"count": self.count, "bytes": self.bytes, "copies_without_bytes": self.unknown_bytes,
                "time_us": self.time_us}


@dataclass(frozen=True)
class GraphCount:
    launches: int = 0  # graph launch calls
    kernels: int = 0  # GPU kernels they launched
    kernel_us: float = 0.0
    other_work: int = 0  # copies and memsets they launched
    all_kernels: int = 0  # every GPU kernel (the share's denominator)

    def __add__(self, other: "GraphCount") -> "GraphCount":
        return GraphCount(self.launches + other.launches, self.kernels + other.kernels,
                          self.kernel_us + other.kernel_us, self.other_work + other.other_work,
                          self.all_kernels + other.all_kernels)

    @property
    def kernel_share(self) -> float | None:
        return self.kernels / self.all_kernels if self.all_kernels else None

    def as_dict(self) -> dict:
        return {"launches": self.launches, "kernels": self.kernels, "kernel_us": self.kernel_us,
                "copies_and_memsets": self.other_work, "all_gpu_kernels": self.all_kernels,
                "kernel_share": self.kernel_share}


def _sum(items, zero):
    total = zero
    for item in items:
        total = total + item
    return total


@dataclass(frozen=True)
class DeviceCopies:
    device: str
    per_step: dict[int, dict[str, CopyCount]]  # step -> copy kind -> figures (kinds with copies)
    graphs_per_step: dict[int, GraphCount]
    outside_steps: int = 0  # copies, graph launches and GPU kernels outside every step

    @property
    def copies(self) -> dict[str, CopyCount]:
        """Copy kind -> figures over the counted steps."""
        kinds = {k for kinds in self.per_step.values() for k in kinds}
        return {k: _sum((s.get(k, CopyCount()) for s in self.per_step.values()), CopyCount())
                for k in COPY_KINDS if k in kinds}

    @property
    def graphs(self) -> GraphCount:
        return _sum(self.graphs_per_step.values(), GraphCount())


@dataclass(frozen=True)
class CopyReport:
    available: bool
    reason: str = ""
    steps: tuple[int, ...] = ()  # (-1,) without step markers
    devices: tuple[DeviceCopies, ...] = ()
    graph_launch_names: tuple[str, ...] = ()  # the runtime call names counted as graph launches
    definitions: dict[str, str] = field(default_factory=lambda: dict(DEFINITIONS))

    @property
    def n_steps(self) -> int:
        return max(1, len(self.steps))

    @property
    def copies(self) -> dict[str, CopyCount]:
        """Copy kind -> figures over all devices and counted steps."""
        kinds = {k for d in self.devices for k in d.copies}
        return {k: _sum((d.copies.get(k, CopyCount()) for d in self.devices), CopyCount())
                for k in COPY_KINDS if k in kinds}

    @property
    def graphs(self) -> GraphCount:
        return _sum((d.graphs for d in self.devices), GraphCount())

    @property
    def outside_steps(self) -> int:
        return sum(d.outside_steps for d in self.devices)

    def step_copies(self, step: int) -> dict[str, CopyCount]:
        kinds = {k for d in self.devices for k in d.per_step.get(step, {})}
        return {k: _sum((d.per_step.get(step, {}).get(k, CopyCount()) for d in self.devices), CopyCount())
                for k in COPY_KINDS if k in kinds}

    def step_graphs(self, step: int) -> GraphCount:
        return _sum((d.graphs_per_step.get(step, GraphCount()) for d in self.devices), GraphCount())

    def per_step_figure(self, part: str, key: str) -> float:
        """Mean per step of one figure: ``("copies", kind)`` copies of that kind, ``("copies_us", kind)`` their
        time, ``("copies_bytes", kind)`` their bytes, ``("graphs", attr)`` a ``GraphCount`` attribute."""
        if part == "graphs":
            return getattr(self.graphs, key) / self.n_steps
        copies = self.copies.get(key, CopyCount())
        value = {"copies": copies.count, "copies_us": copies.time_us, "copies_bytes": copies.bytes}[part]
        return value / self.n_steps

    def as_dict(self) -> dict:
        n = self.n_steps
        return {
            "available": self.available,
            "reason": self.reason or None,
            "steps": list(self.steps),
            "graph_launch_names": list(self.graph_launch_names),
            "outside_steps": self.outside_steps,
            "total": {"copies": {k: c.as_dict() for k, c in self.copies.items()}, "graphs": self.graphs.as_dict()},
            "per_step_mean": {"copies": {k: {"count": c.count / n, "bytes": c.bytes / n, "time_us": c.time_us / n}
                                         for k, c in self.copies.items()},
                              "graphs": {"launches": self.graphs.launches / n, "kernels": self.graphs.kernels / n,
                                         "kernel_us": self.graphs.kernel_us / n}},
            "per_step": {str(s): {"copies": {k: c.as_dict() for k, c in self.step_copies(s).items()},
                                  "graphs": self.step_graphs(s).as_dict()} for s in self.steps},
            "devices": [{"device": d.device, "outside_steps": d.outside_steps,
                         "copies": {k: c.as_dict() for k, c in d.copies.items()}, "graphs": d.graphs.as_dict(),
                         "per_step": {str(s): {"copies": {k: c.as_dict() for k, c in d.per_step[s].items()},
                                               "graphs": d.graphs_per_step[s].as_dict()} for s in d.per_step}}
                        for d in self.devices],
            "definitions": self.definitions,
        }


def copy_kind_of_rows(table: EventTable, rows: np.ndarray | None = None) -> np.ndarray:
    """The copy kind of each row (of ``rows``; every row by default), as an index into ``COPY_KINDS``: its op
    type's where that says one (TF: MEMCPYHtoD), else its name's, else ``other``. Only the strings those rows
    name are read."""
    other = COPY_KINDS.index("other")
    op_type, name = (table.op_type, table.name) if rows is None else (table.op_type[rows], table.name[rows])
    kind_of = np.full(max(len(table.strings), 1), other, dtype=np.int64)
    codes = np.unique(np.concatenate([op_type, name]))
    kind_of[codes] = [COPY_KINDS.index(k) if (k := copy_kind(table.strings[c])) else other for c in codes.tolist()]
    return np.where(kind_of[op_type] != other, kind_of[op_type], kind_of[name])


def count_copies(table: EventTable | None, reason: str = "") -> CopyReport:
    """Copies by kind and graph-launched work per device and step (docs/commands/count-ops.md)."""
    if table is None or len(table) == 0:
        return CopyReport(available=False, reason=reason or "no trace events in this input")
    launcher = launchers(table)
    steps, in_steps, step_index = _work_steps(table, launcher)
    graph_call, graph_work, call_device = _graph_launches(table, launcher)
    _, gpu_kernel = kernel_masks(table)
    cells = _Cells(len(table.devices), len(steps), table.device.astype(np.int64) * len(steps) + step_index)
    copy = table.kind == Kind.MEMCPY
    copies = _copy_figures(table, cells, copy & in_steps)
    dur = np.maximum(table.dur, 0.0)
    gk = gpu_kernel & graph_work & in_steps
    graphs = (cells.count(graph_call & in_steps, call_device * len(steps) + step_index),
              cells.count(gk), cells.count(gk, weights=dur),
              cells.count(graph_work & in_steps & np.isin(table.kind, [Kind.MEMCPY, Kind.MEMSET])),
              cells.count(gpu_kernel & in_steps))
    outside = np.bincount(table.device[(copy | graph_call | gpu_kernel) & ~in_steps], minlength=len(table.devices))
    devices = [_device_copies(device.label, steps, copies, graphs, int(outside[code]), code)
               for code, device in enumerate(table.devices)
               if copies[0][code].any() or graphs[0][code].any() or graphs[1][code].any() or outside[code]]
    launch_names = tuple(sorted({table.strings[c] for c in np.unique(table.name[graph_call])}))
    return CopyReport(available=True, steps=steps, devices=tuple(sorted(devices, key=lambda d: d.device)),
                      graph_launch_names=launch_names)


@dataclass(frozen=True)
class StepCopies:
    """One device's copies of one kind in one step: their time not hidden behind its kernels (µs), and how many of
    them, and how long, came from or went to pageable host memory (Kineto names them ``(Pageable -> Device)``;
    a pageable copy is staged through a pinned buffer by the driver and cannot run asynchronously)."""

    exposed_us: float = 0.0
    pageable: int = 0
    pageable_us: float = 0.0


PAGEABLE = re.compile(r"\bPageable\b")


def exposed_copies(table: EventTable) -> dict[tuple[str, str, int], StepCopies]:
    """(copy kind, device label, step) -> the device's copies of that kind in that step (``count_copies``' steps):
    the time during which no kernel (compute or communication) runs on the device, so not hidden behind other
    work of the device, and the pageable ones among them."""
    if table is None or len(table) == 0:
        return {}
    launcher = launchers(table)
    steps, in_steps, step_index = _work_steps(table, launcher)
    _, gpu_kernel = kernel_masks(table)
    other = COPY_KINDS.index("other")
    kind_of = copy_kind_of_rows(table)
    copies = np.flatnonzero((table.kind == Kind.MEMCPY) & in_steps & (kind_of != other))
    pageable = np.array([bool(PAGEABLE.search(text)) for text in table.strings] or [False])[table.name]
    kernels = np.flatnonzero(gpu_kernel)
    end = table.ts + np.maximum(table.dur, 0.0)
    out = {}
    for code in np.unique(table.device[copies]):
        hidden = kernels[table.device[kernels] == code]
        hidden_s, hidden_e = intervals.merge(table.ts[hidden], end[hidden])
        mine = copies[table.device[copies] == code]
        for kind, index in set(zip(kind_of[mine].tolist(), step_index[mine].tolist())):
            rows = mine[(kind_of[mine] == kind) & (step_index[mine] == index)]
            starts, ends = intervals.merge(table.ts[rows], end[rows])
            left_s, left_e, _ = intervals.subtract(starts, ends, hidden_s, hidden_e)
            paged = rows[pageable[rows]]
            out[(COPY_KINDS[kind], table.devices[int(code)].label, steps[int(index)])] = StepCopies(
                float((left_e - left_s).sum()), len(paged), float(np.maximum(table.dur[paged], 0.0).sum()))
    return out


def _work_steps(table: EventTable, launcher: np.ndarray) -> tuple[tuple[int, ...], np.ndarray, np.ndarray]:
    """The steps counted ((-1,) without step markers); whether each event is in one of them (GPU work: the step of
    its launch call, other events their own), and the index of its step (0 where in none)."""
    n = len(table)
    has_launcher = launcher >= 0
    step = table.step.astype(np.int64).copy()
    step[has_launcher] = table.step[launcher[has_launcher]]
    known = table.steps()
    steps = tuple(int(s) for s in known) if len(known) else (-1,)
    in_steps = np.isin(step, known) if len(known) else np.ones(n, dtype=bool)
    step_index = np.searchsorted(np.array(steps), step) if len(known) else np.zeros(n, dtype=np.int64)
    return steps, in_steps, np.where(in_steps, step_index, 0)


def _graph_launches(table: EventTable, launcher: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which events are graph launch calls, which are work a graph launched, and the device each launch call is
    counted on: the one its work ran on (the first of it), else its own."""
    has_launcher = launcher >= 0
    names = np.array([bool(GRAPH_LAUNCH.match(s)) for s in table.strings] or [False], dtype=bool)
    graph_call = (table.kind == Kind.RUNTIME) & names[table.name]
    graph_work = has_launcher & graph_call[np.where(has_launcher, launcher, 0)]
    call_device = table.device.astype(np.int64).copy()
    worked = np.flatnonzero(graph_work)
    call_device[launcher[worked][::-1]] = table.device[worked][::-1]
    return graph_call, graph_work, call_device


class _Cells:
    """Sums over (device, step) cells, or (device, step, copy kind) cells."""

    def __init__(self, n_devices: int, width: int, cell: np.ndarray):
        self.n_devices, self.width, self.cell = n_devices, width, cell

    def count(self, mask: np.ndarray, key: np.ndarray | None = None, weights: np.ndarray | None = None,
              kinds: int = 1) -> np.ndarray:
        """How many (or the summed ``weights``) of the events of ``mask`` per cell (``key``: each event's cell)."""
        key = self.cell if key is None else key
        found = np.bincount(key[mask], weights=None if weights is None else weights[mask],
                            minlength=self.n_devices * self.width * kinds)
        return found.reshape(self.n_devices, self.width, kinds) if kinds > 1 else found.reshape(-1, self.width)


def _copy_figures(table: EventTable, cells: _Cells, counted: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per (device, step, copy kind): the copies of ``counted``, their bytes, those without a byte count, and
    their time. A copy's kind is its op type's where that says one (TF: MEMCPYHtoD), else its name's."""
    key = cells.cell * len(COPY_KINDS) + copy_kind_of_rows(table)
    n = len(COPY_KINDS)
    return (cells.count(counted, key, kinds=n),
            cells.count(counted, key, np.maximum(table.nbytes, 0).astype(float), kinds=n),
            cells.count(counted & (table.nbytes < 0), key, kinds=n),
            cells.count(counted, key, np.maximum(table.dur, 0.0), kinds=n))


def _device_copies(label: str, steps: tuple[int, ...], copies: tuple[np.ndarray, ...],
                   graphs: tuple[np.ndarray, ...], outside: int, code: int) -> DeviceCopies:
    """Device ``code``'s figures per step."""
    copy_n, copy_b, copy_u, copy_t = (a[code] for a in copies)
    launches_n, gk_n, gk_t, g_other, all_k = (a[code] for a in graphs)
    per_step = {s: {COPY_KINDS[k]: CopyCount(int(copy_n[i, k]), int(copy_b[i, k]), int(copy_u[i, k]),
                                             float(copy_t[i, k]))
                    for k in range(len(COPY_KINDS)) if copy_n[i, k]}
                for i, s in enumerate(steps)}
    graph_counts = {s: GraphCount(int(launches_n[i]), int(gk_n[i]), float(gk_t[i]), int(g_other[i]), int(all_k[i]))
                    for i, s in enumerate(steps)}
    return DeviceCopies(label, per_step, graph_counts, outside)


def combine_copies(parts) -> CopyReport | None:
    """One report of several made apart (one per rank): the devices of each, the union of their steps; None
    without parts. The parts' devices must be distinct."""
    parts = list(parts)
    if not parts:
        return None
    available = [p for p in parts if p.available]
    if not available:
        return CopyReport(available=False, reason="; ".join(sorted({p.reason for p in parts if p.reason})))
    marked = sorted({s for p in available for s in p.steps if s != -1})
    steps = tuple(marked) if marked else (-1,)
    devices = sorted((d for p in available for d in p.devices), key=lambda d: d.device)
    if len({d.device for d in devices}) != len(devices):
        raise ValueError("the copy reports share devices; combine reports of distinct ranks")
    devices = [DeviceCopies(d.device, {s: d.per_step.get(s, {}) for s in steps},
                            {s: d.graphs_per_step.get(s, GraphCount()) for s in steps}, d.outside_steps)
               for d in devices]
    names = tuple(sorted({n for p in available for n in p.graph_launch_names}))
    return CopyReport(available=True, steps=steps, devices=tuple(devices), graph_launch_names=names)


__all__ = ["COPY_KINDS", "CopyCount", "CopyReport", "DEFINITIONS", "DeviceCopies", "GraphCount", "combine_copies",
           "copy_kind", "count_copies"]
