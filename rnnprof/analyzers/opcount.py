"""Operator and kernel counts: how many ops the graphs hold and how many kernels run per step.

Graph operators are counted in the user graph (what Python built; requested devices) and in the runtime
graph (TF's partition graphs after placement and Grappler; assigned devices), with function-body nodes
(while-loop and tf.function bodies, run once per iteration) apart from top-level ones.

Kernel invocations per device per step (``DEFINITIONS``): a CPU kernel is one op execution on a CPU device
(PyTorch ``cpu_op``s on the host or a GPU-less rank's CPU device, nested ones each counted); a GPU kernel is
one kernel on a GPU stream. Host-side launch records are launches, never kernels; copies and memsets are
not kernels. See docs/commands/count-ops.md.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Sequence

import networkx as nx
import numpy as np

from rnnprof.analyzers import copies as copy_counts
from rnnprof.analyzers.launches import (CPU_KERNEL_KINDS, DEFAULT_SHORT_KERNEL_US, LaunchStats, kernel_masks,
                                      launch_stats)
from rnnprof.events import EventTable, Kind, match_correlation, outside_steps
from rnnprof.events.names import CROSS_TASK_RECV_OPS, note_ran_as

DEFINITIONS = {
    "user graph ops": "nodes of the graph Python built (GraphDef as written by the program), by requested device",
    "runtime graph ops": "nodes of the partition graphs TF executes after placement and optimization, "
                         "by assigned device (includes _Send/_Recv and other nodes the runtime adds)",
    "function ops": "nodes inside function-library bodies (while-loop and tf.function bodies), counted apart "
                    "from top-level nodes; a body runs once per iteration",
    "CPU kernels": "op executions on a CPU device: one TF executor op run on a CPU device, or one PyTorch "
                   "cpu_op on the host, or on the CPU device of a rank without a GPU (nested operators each counted); "
                   "a cluster task's fetches from other tasks (RecvTensor, RecvBuf) are not counted",
    "GPU kernels": "kernels that ran on a GPU stream (NCCL kernels included); copies and memsets excluded",
    "GPU launches": "host-side records of launching GPU work: TF ops run by a GPU device's executor, or CUDA "
                    "runtime calls correlated with a GPU kernel; shown for reference, not added to the kernels",
    "ran as": "TensorFlow's oneDNN build runs some ops as its own kernels (Conv2D as _MklNativeConv2D): they "
              "are counted as the op the user's graph holds, and the name they ran as is listed beside it",
    "per step": "kernels inside step markers divided by the number of steps; a trace without step markers "
                "counts as one step",
}



@dataclass(frozen=True)
class GraphOpCounts:
    """Node counts of one graph view; ``available`` is False (with ``reason``) when the input has none."""

    available: bool
    reason: str = ""
    sources: tuple[str, ...] = ()
    total: int = 0
    top_level: int = 0
    in_functions: int = 0
    by_device: dict[str, int] = field(default_factory=dict)  # top-level + function nodes
    by_type: dict[str, int] = field(default_factory=dict)
    by_device_type: dict[str, dict[str, int]] = field(default_factory=dict)
    functions: dict[str, int] = field(default_factory=dict)  # function name -> node count
    # op -> {name oneDNN rewrote it to: nodes} (counted under the op itself; see rnnprof.events.names.user_op)
    ran_as: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class DeviceKernels:
    device: str
    cpu_kernels: int
    gpu_kernels: int
    gpu_launches: int
    copies: int  # memcpy + memset
    outside_steps: int  # kernels outside every step marker (not in the counts above)
    per_step: dict[int, tuple[int, int]]  # step -> (cpu kernels, gpu kernels)


@dataclass(frozen=True)
class KernelCounts:
    available: bool
    reason: str = ""
    steps: tuple[int, ...] = ()  # (-1,) when the trace has no step markers
    devices: tuple[DeviceKernels, ...] = ()
    by_type: dict[str, tuple[int, int]] = field(default_factory=dict)  # op type -> (cpu, gpu) kernels
    # device -> op type -> kernels (a GPU's are GPU kernels, any other device's CPU kernels)
    by_device_type: dict[str, dict[str, int]] = field(default_factory=dict)
    ran_as: dict[str, list[str]] = field(default_factory=dict)  # op -> names oneDNN ran it as (rnnprof.events.names)
    # GPU events (kernels, copies, memsets) in no step, by reason (rnnprof.events.OUTSIDE_REASONS)
    gpu_outside_steps: dict[str, int] = field(default_factory=dict)

    @property
    def n_steps(self) -> int:
        return max(1, len(self.steps))

    @property
    def cpu_kernels(self) -> int:
        return sum(d.cpu_kernels for d in self.devices)

    @property
    def gpu_kernels(self) -> int:
        return sum(d.gpu_kernels for d in self.devices)

    @property
    def gpu_launches(self) -> int:
        return sum(d.gpu_launches for d in self.devices)

    def per_step(self, value: int) -> float:
        return value / self.n_steps

    def by_task(self) -> dict[str, dict[str, int]]:
        """Totals per task of a gRPC cluster (``/job:worker/replica:0/task:1``), over its devices; empty
        unless the devices belong to two or more tasks."""
        totals: dict[str, dict[str, int]] = {}
        for d in self.devices:
            task = task_of_label(d.device)
            if task is None:
                continue
            entry = totals.setdefault(task, {"devices": 0, "cpu_kernels": 0, "gpu_kernels": 0,
                                             "gpu_launches": 0, "copies": 0})
            entry["devices"] += 1
            for key in ("cpu_kernels", "gpu_kernels", "gpu_launches", "copies"):
                entry[key] += getattr(d, key)
        return dict(sorted(totals.items())) if len(totals) > 1 else {}


def task_of_label(label: str) -> str | None:
    """The task part of a device label (``/job:ps/replica:0/task:0/cpu:0`` -> ``/job:ps/replica:0/task:0``)."""
    if not label.startswith("/job:"):
        return None
    return label.rsplit("/", 1)[0]


@dataclass(frozen=True)
class OpCountReport:
    source: str
    source_format: str
    user_graph: GraphOpCounts
    runtime_graph: GraphOpCounts
    kernels: KernelCounts
    definitions: dict[str, str] = field(default_factory=lambda: dict(DEFINITIONS))
    launches: LaunchStats | None = None  # None: no trace events, or not asked for (rnnprof.analyzers.launches)
    copies: copy_counts.CopyReport | None = None  # copies by kind and graph launches; None: not counted


@dataclass(frozen=True)
class Ratio:
    metric: str
    left: float | None
    right: float | None

    @property
    def ratio(self) -> float | None:
        if self.left is None or self.right is None or self.right == 0:
            return None
        return self.left / self.right


@dataclass(frozen=True)
class OpCountComparison:
    left: OpCountReport
    right: OpCountReport
    ratios: tuple[Ratio, ...]


def count_graph(graph: nx.DiGraph | None, reason: str = "") -> GraphOpCounts:
    if graph is None:
        return GraphOpCounts(available=False, reason=reason or "no graph in this input")
    by_device: Counter = Counter()
    by_type: Counter = Counter()
    by_device_type: dict[str, Counter] = {}
    functions: Counter = Counter()
    ran_as: dict[str, Counter] = {}
    top = 0
    for _, attrs in graph.nodes(data=True):
        device = attrs.get("device")
        label = device.label if device is not None else "(unplaced)"
        op = attrs.get("op", "")
        by_device[label] += 1
        by_type[op] += 1
        by_device_type.setdefault(label, Counter())[op] += 1
        if attrs.get("kernel"):
            ran_as.setdefault(op, Counter())[attrs["kernel"]] += 1
        if attrs.get("function"):
            functions[attrs["function"]] += 1
        else:
            top += 1
    total = graph.number_of_nodes()
    return GraphOpCounts(
        available=True,
        sources=tuple(graph.graph.get("sources", ())),
        total=total,
        top_level=top,
        in_functions=total - top,
        by_device=dict(sorted(by_device.items())),
        by_type=dict(by_type.most_common()),
        by_device_type={d: dict(c.most_common()) for d, c in sorted(by_device_type.items())},
        functions=dict(functions.most_common()),
        ran_as={op: dict(sorted(k.items())) for op, k in sorted(ran_as.items())},
    )


def counted_steps(table: EventTable) -> tuple[tuple[int, ...], np.ndarray]:
    """The steps kernels are counted over (``(-1,)`` without step markers) and which events lie in them."""
    known_steps = table.steps()
    if not len(known_steps):
        return (-1,), np.ones(len(table), dtype=bool)
    return tuple(int(s) for s in known_steps), np.isin(table.step, known_steps)


def count_kernels(table: EventTable | None, reason: str = "") -> KernelCounts:
    """Kernels (CPU op executions, GPU kernels), GPU launches and copies per device and step, and kernels by op
    type, over the events inside step markers."""
    if table is None or len(table) == 0:
        return KernelCounts(available=False, reason=reason or "no trace events in this input")
    cpu, gpu = kernel_masks(table)
    steps, in_steps = counted_steps(table)
    devices = _device_kernels(table, cpu, gpu, steps, in_steps)
    if not devices:
        return KernelCounts(available=False, reason="the trace holds no op executions or kernels", steps=steps)
    by_type = _kernels_by_type(table, cpu & in_steps, gpu & in_steps)
    ran_as = {op: list(kernels) for op, kernels in table.metadata.ran_as.items() if op in by_type}
    return KernelCounts(available=True, steps=steps, devices=tuple(sorted(devices, key=lambda d: d.device)),
                        by_type=by_type, by_device_type=_kernels_by_device_type(table, (cpu | gpu) & in_steps),
                        ran_as=ran_as, gpu_outside_steps=outside_steps(table) if steps != (-1,) else {})


def _launch_devices(table: EventTable, on_gpu: np.ndarray, gpu: np.ndarray) -> np.ndarray:
    """Host-side launch records: the GPU each launched on (-1: not a launch). GPU-device executor ops (TF) and
    runtime calls that launched GPU work (matched by correlation id, per process: a merged table's ranks reuse
    each other's ids)."""
    lanes = np.array([s.startswith("stream:") for s in table.strings], dtype=bool)[table.lane]
    launch_device = np.where(on_gpu & ~lanes & np.isin(table.kind, CPU_KERNEL_KINDS), table.device, -1)
    runtime = (table.kind == Kind.RUNTIME) & (table.correlation >= 0)
    gpu_work = gpu & (table.correlation >= 0)
    runtime_idx, work_idx = np.flatnonzero(runtime), np.flatnonzero(gpu_work)
    correlation = table.process_correlation()
    launched = match_correlation(correlation[work_idx], correlation[runtime_idx])
    found = launched >= 0
    launch_device[runtime_idx[found]] = table.device[work_idx[launched[found]]]
    return launch_device


def _device_kernels(table: EventTable, cpu: np.ndarray, gpu: np.ndarray, steps: tuple[int, ...],
                    in_steps: np.ndarray) -> list[DeviceKernels]:
    """Each device's kernels per step (and outside every step), launches and copies; devices with none left out."""
    on_gpu = np.isin(table.device, [i for i, d in enumerate(table.devices) if d.kind == "gpu"])
    copies = on_gpu & np.isin(table.kind, np.array([Kind.MEMCPY, Kind.MEMSET], dtype=np.int8))
    launch_device = _launch_devices(table, on_gpu, gpu)
    # Counts per (device, step) in one pass: bincount over a combined key.
    step_index = (np.zeros(len(table), dtype=np.int64) if steps == (-1,) else  # no markers: one step
                  np.where(in_steps, np.searchsorted(np.array(steps), table.step), len(steps)))  # else overflow slot
    width = len(steps) + 1
    key = table.device.astype(np.int64) * width + step_index
    size = len(table.devices) * width
    cpu_grid = np.bincount(key[cpu], minlength=size).reshape(-1, width)
    gpu_grid = np.bincount(key[gpu], minlength=size).reshape(-1, width)
    copy_count = np.bincount(table.device[copies], minlength=len(table.devices))
    launch_count = np.bincount(launch_device[launch_device >= 0], minlength=len(table.devices))
    devices = []
    for code, device in enumerate(table.devices):
        entry = DeviceKernels(
            device=device.label,
            cpu_kernels=int(cpu_grid[code, :-1].sum()),
            gpu_kernels=int(gpu_grid[code, :-1].sum()),
            outside_steps=int(cpu_grid[code, -1] + gpu_grid[code, -1]),
            gpu_launches=int(launch_count[code]),
            copies=int(copy_count[code]),
            per_step={s: (int(cpu_grid[code, i]), int(gpu_grid[code, i])) for i, s in enumerate(steps)},
        )
        if entry.cpu_kernels or entry.gpu_kernels or entry.gpu_launches or entry.copies or entry.outside_steps:
            devices.append(entry)
    return devices


def _kernels_by_type(table: EventTable, cpu: np.ndarray, gpu: np.ndarray) -> dict[str, tuple[int, int]]:
    """Op type -> (CPU kernels, GPU kernels), most first."""
    n_strings = len(table.strings)
    cpu_by_type = np.bincount(table.op_type[cpu], minlength=n_strings)
    gpu_by_type = np.bincount(table.op_type[gpu], minlength=n_strings)
    used = np.flatnonzero(cpu_by_type + gpu_by_type)
    by_type = {table.strings[c]: (int(cpu_by_type[c]), int(gpu_by_type[c])) for c in used}
    return dict(sorted(by_type.items(), key=lambda kv: (-(kv[1][0] + kv[1][1]), kv[0])))


def _kernels_by_device_type(table: EventTable, counted: np.ndarray) -> dict[str, dict[str, int]]:
    """Device -> op type -> kernels of ``counted``, devices in order, op types most first."""
    n_strings = len(table.strings)
    keys, key_counts = _count_pairs(table.device[counted], table.op_type[counted], n_strings)
    by_device_type: dict[str, dict[str, int]] = {}
    for key, n in zip(keys.tolist(), key_counts.tolist()):
        code, op = divmod(key, n_strings)
        by_device_type.setdefault(table.devices[code].label, {})[table.strings[op]] = n
    return {d: dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))) for d, ops in sorted(by_device_type.items())}


def _count_pairs(devices: np.ndarray, ops: np.ndarray, n_strings: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ``device * n_strings + op`` keys and how often each occurs (a bincount when it fits)."""
    key = devices.astype(np.int64) * n_strings + ops
    if len(key) == 0:
        return key, key
    if int(key.max()) < 50_000_000:
        counts = np.bincount(key)
        keys = np.flatnonzero(counts)
        return keys, counts[keys]
    return np.unique(key, return_counts=True)


def count_ops(
    source: str,
    table: EventTable | None,
    user_graph: nx.DiGraph | None,
    runtime_graph: nx.DiGraph | None,
    user_reason: str = "",
    runtime_reason: str = "",
    events_reason: str = "",
    short_kernel_us: float = DEFAULT_SHORT_KERNEL_US,
    launches: bool = True,
) -> OpCountReport:
    """Counts of both graph views and of the kernels, and the kernels' launch statistics (``launches=False``:
    left out, for a caller that does not show them); a ``*_reason`` says why that part is missing."""
    return op_count_report(
        source, table.source_format if table is not None else "graph", user_graph, runtime_graph,
        count_kernels(table, events_reason),
        launch_stats(table, short_kernel_us) if launches and table is not None and len(table) else None,
        copy_counts.count_copies(table, events_reason) if table is not None and len(table) else None,
        user_reason, runtime_reason)


def op_count_report(source: str, source_format: str, user_graph: nx.DiGraph | None, runtime_graph: nx.DiGraph | None,
                    kernels: KernelCounts, launches: LaunchStats | None, copies, user_reason: str = "",
                    runtime_reason: str = "") -> OpCountReport:
    """``count_ops``' report of the kernels, launches and copies counted already (a job's: its ranks' combined)."""
    return OpCountReport(source=source, source_format=source_format,
                         user_graph=count_graph(user_graph, user_reason),
                         runtime_graph=count_graph(runtime_graph, runtime_reason),
                         kernels=kernels, launches=launches, copies=copies)


def compare(left: OpCountReport, right: OpCountReport) -> OpCountComparison:
    """``left ÷ right`` for graph sizes and per-step kernel counts (None where either side lacks it)."""

    def graph_metric(report: OpCountReport, view: str, attr: str):
        counts = getattr(report, view)
        return getattr(counts, attr) if counts.available else None

    def kernel_metric(report: OpCountReport, attr: str):
        k = report.kernels
        return k.per_step(getattr(k, attr)) if k.available else None

    ratios = [
        Ratio(f"{label} ({part})", graph_metric(left, view, attr), graph_metric(right, view, attr))
        for view, label in (("user_graph", "user graph ops"), ("runtime_graph", "runtime graph ops"))
        for attr, part in (("total", "all"), ("top_level", "top level"), ("in_functions", "in functions"))
    ]
    for attr, label in (("cpu_kernels", "CPU kernels per step"), ("gpu_kernels", "GPU kernels per step"),
                        ("gpu_launches", "GPU launches per step")):
        ratios.append(Ratio(label, kernel_metric(left, attr), kernel_metric(right, attr)))
    for label, figure in COPY_FIGURES:
        ratios.append(Ratio(label, _copy_metric(left, figure), _copy_metric(right, figure)))
    total_left = kernel_metric(left, "cpu_kernels")
    total_right = kernel_metric(right, "cpu_kernels")
    if total_left is not None and total_right is not None:
        total_left += kernel_metric(left, "gpu_kernels")
        total_right += kernel_metric(right, "gpu_kernels")
    ratios.append(Ratio("kernel launches per step (CPU + GPU kernels)", total_left, total_right))
    return OpCountComparison(left=left, right=right, ratios=tuple(ratios))


# Per-step copy and graph-launch figures ``compare`` lists (``copies.CopyReport.per_step_figure``).
COPY_FIGURES = tuple((f"{kind} copies per step", ("copies", kind)) for kind in copy_counts.COPY_KINDS[:4]) + (
    ("graph launches per step", ("graphs", "launches")),
    ("GPU kernels launched by graphs per step", ("graphs", "kernels")))


def _copy_metric(report: OpCountReport, figure: tuple[str, str]) -> float | None:
    if report.copies is None or not report.copies.available:
        return None
    return report.copies.per_step_figure(*figure)


def combine_kernel_counts(parts: Sequence[KernelCounts]) -> KernelCounts:
    """One count of several made apart (one per rank, say), as ``count_kernels`` gives for their tables merged:
    the devices of each, the union of their steps, op types summed. The parts' devices must be distinct."""
    available = [p for p in parts if p.available]
    if not available:
        reasons = sorted({p.reason for p in parts if p.reason})
        return KernelCounts(available=False, reason="; ".join(reasons) or "no trace events in this input")
    devices = sorted((d for p in available for d in p.devices), key=lambda d: d.device)
    labels = [d.device for d in devices]
    if len(set(labels)) != len(labels):
        raise ValueError("the counts share devices; combine counts of distinct ranks")
    marked = sorted({s for p in available for s in p.steps if s != -1})
    steps = tuple(marked) if marked else (-1,)
    # Every device lists every step of the whole, as in a count of the merged tables.
    devices = [replace(d, per_step={s: d.per_step.get(s, (0, 0)) for s in steps}) for d in devices]
    by_type: dict[str, list[int]] = {}
    for part in available:
        for op, (cpu, gpu) in part.by_type.items():
            entry = by_type.setdefault(op, [0, 0])
            entry[0] += cpu
            entry[1] += gpu
    merged_types = dict(sorted(((op, (c, g)) for op, (c, g) in by_type.items()),
                               key=lambda kv: (-(kv[1][0] + kv[1][1]), kv[0])))
    by_device_type = {d: ops for p in available for d, ops in p.by_device_type.items()}
    ran_as: dict[str, list[str]] = {}
    for part in available:
        for op, kernels in part.ran_as.items():
            for kernel in kernels:
                note_ran_as(ran_as, op, kernel)
    outside: dict[str, int] = {}
    for part in available:
        for reason, n in part.gpu_outside_steps.items():
            outside[reason] = outside.get(reason, 0) + n
    return KernelCounts(available=True, steps=steps, devices=tuple(devices), by_type=merged_types,
                        by_device_type=dict(sorted(by_device_type.items())), ran_as=dict(sorted(ran_as.items())),
                        gpu_outside_steps=outside)


def with_kernels(report: OpCountReport, kernels: KernelCounts, launches: LaunchStats | None,
                 source_format: str) -> OpCountReport:
    """``report`` with kernel counts and launch statistics made elsewhere (``combine_kernel_counts`` and
    ``launches.launch_stats_of`` of a job's ranks)."""
    return replace(report, kernels=kernels, launches=launches, source_format=source_format)
