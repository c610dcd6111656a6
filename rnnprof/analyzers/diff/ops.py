"""Ops and kernels, A against B (as ``count-ops`` counts them, grouped by name folded and by op type), and the
graphs: op counts per device and type, and the ops a side placed on another device."""

from __future__ import annotations

import numpy as np

from rnnprof.analyzers import opcount
from rnnprof.analyzers.diff.device_time import joined_reasons, no_events
from rnnprof.analyzers.diff.result import (GraphOpChange, GraphSection, MovedOp, OpChange, OpsSection, PairedFigure,
                                           Side)
from rnnprof.analyzers.launches import host_self_time
from rnnprof.analyzers.placement import AuditInput, scopes
from rnnprof.analyzers.placement.inputs import NodePlacement
from rnnprof.events import EventTable
from rnnprof.events.names import normalize_name


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
                             events_reason=no_events(side) if side.events is None else side.events_reason)



def diff_ops(a: Side, b: Side) -> OpsSection:
    counts_a, counts_b = _counts(a), _counts(b)
    # compare(left, right) is left ÷ right: B first gives B ÷ A, the figures of ``count-ops B --vs A``.
    figures = tuple(PairedFigure(r.metric, r.right, r.left) for r in opcount.compare(counts_b, counts_a).ratios)
    if not (counts_a.kernels.available and counts_b.kernels.available):
        reasons = [k.reason for k in (counts_a.kernels, counts_b.kernels) if not k.available]
        return OpsSection(available=False, reason=joined_reasons(*reasons), counts=figures)
    by_name = _changes(_grouped(a.events, a.events.name, True), _grouped(b.events, b.events.name, True))
    by_type = _changes(_grouped(a.events, a.events.op_type, False), _grouped(b.events, b.events.op_type, False))
    return OpsSection(available=True, counts=figures, by_name=by_name, by_type=by_type)



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



def _placements(side: Side) -> dict[str, NodePlacement] | None:
    if side.graph is None and not _names_nodes(side.events):
        return None
    return AuditInput(graph=side.graph, events=side.events).placements



def diff_graphs(a: Side, b: Side) -> GraphSection:
    views = []
    reasons = []
    for view, attr in (("user", "user_graph"), ("runtime", "runtime_graph")):
        ga = opcount.count_graph(getattr(a, attr), getattr(a, f"{view}_reason"))
        gb = opcount.count_graph(getattr(b, attr), getattr(b, f"{view}_reason"))
        if ga.available and gb.available:
            views += _graph_counts(view, ga, gb)
        else:
            reasons.append(f"{view} graph: " + joined_reasons(*(g.reason for g in (ga, gb) if not g.available)))
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

