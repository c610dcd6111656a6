"""Communication vs compute vs idle, per device and per step, and who straggles.

Which events count on which device (``device_work_mask``): a GPU's stream work (kernels, memcpys, memsets;
its executor ops only when it has no stream record, ``basis`` says so); a TF CPU device's ops; a GPU-less
PyTorch rank's host operators and collectives (``metadata.host_operator_devices``). The host itself
and annotations never count.

Per device, and per device and step over the step windows (``rnnprof.analyzers.steps.step_windows``):
``span``, ``busy`` (union of the activity), ``idle``, the class times, ``non_compute`` and ``overlap``; the
stragglers per step; across ranks the matched ``collectives`` (``rnnprof.analyzers.collectives``) and the
clocks' ``alignment``. For Kineto traces these are holistictraceanalysis's (HTA) temporal breakdown and
overlap, with the differences listed in the docs. Idle time by cause is ``rnnprof.analyzers.idle``.

The definitions, window by window: docs/commands/comm.md; the results: ``comm_result``; who straggles: ``stragglers``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Sequence

import numpy as np

from rnnprof.analyzers.classify import EventClass, classify, collective_types
from rnnprof.analyzers.collectives import CollectivesReport, analyze_collectives
from rnnprof.analyzers.comm_result import Breakdown, CommOp, CommReport, DeviceComm
from rnnprof.analyzers.copies import combine_copies, count_copies
from rnnprof.analyzers.device_work import BASIS_HOST_OPS, device_work_mask
from rnnprof.analyzers.groups import analyze_groups, combine_groups
from rnnprof.analyzers.idle import DEFAULT_KERNEL_WAIT_US, DeviceIdle, idle_by_cause
from rnnprof.analyzers.intervals import subtract, sweep_segments
from rnnprof.analyzers.steps import step_windows
from rnnprof.analyzers.stragglers import find_stragglers
from rnnprof.events import Alignment, Device, EventTable, outside_steps
from rnnprof.events.names import COLLECTIVE_TYPES


# Sweep layers, in this order.
_LAYERS = (EventClass.COMPUTE, EventClass.COMMUNICATION, EventClass.MEMCPY, EventClass.MEMSET)
_COMPUTE, _COMM, _MEMCPY, _MEMSET = range(4)


def _layer_codes(classes: np.ndarray) -> np.ndarray:
    lookup = np.zeros(len(EventClass), dtype=np.int64)
    for layer, cls in enumerate(_LAYERS):
        lookup[int(cls)] = layer
    return lookup[classes]


def _breakdowns(result, counts: np.ndarray, first_comm: np.ndarray,
                bounds: tuple[np.ndarray, np.ndarray] | None = None) -> list[Breakdown | None]:
    """One breakdown per sweep group with events (``counts``); ``bounds``: each group's ``(start, end)`` window,
    else its first start and last end."""
    busy = result.union()
    compute = result.union([_COMPUTE])
    comm = result.union([_COMM])
    memcpy = result.union([_MEMCPY])
    memset = result.union([_MEMSET])
    overlap = result.overlap([_COMM], [_COMPUTE])
    out: list[Breakdown | None] = []
    starts, ends = (result.start, result.end) if bounds is None else bounds
    for g in range(result.n_groups):
        if counts[g] == 0 or not np.isfinite(starts[g]):
            out.append(None)
            continue
        out.append(
            Breakdown(
                start_us=float(starts[g]),
                end_us=float(ends[g]),
                busy_us=float(busy[g]),
                compute_us=float(compute[g]),
                communication_us=float(comm[g]),
                memcpy_us=float(memcpy[g]),
                memset_us=float(memset[g]),
                overlap_us=float(overlap[g]),
                events=int(counts[g]),
                first_comm_us=float(first_comm[g]) if np.isfinite(first_comm[g]) else None,
                last_work_us=(None if bounds is None else
                              float(result.end[g]) if np.isfinite(result.end[g]) else float(starts[g])),
            )
        )
    return out


@dataclass(frozen=True)
class _DeviceWork:
    """The events that make their device busy (``device_work_mask``), as arrays in table order, and the intervals
    the sweeps measure (``sweep_*``, ``_outside_own_collectives``: a CPU rank's operators cut where their thread
    is in a collective), each with its event's device, step and sweep layer."""

    ts: np.ndarray
    end: np.ndarray
    dev: np.ndarray
    step: np.ndarray
    cls: np.ndarray
    n_dev: int
    sweep_ts: np.ndarray
    sweep_end: np.ndarray
    sweep_dev: np.ndarray
    sweep_step: np.ndarray
    layers: np.ndarray
    sweep_row: np.ndarray  # the table row of the event each interval comes from

    @property
    def is_comm(self) -> np.ndarray:
        return self.cls == EventClass.COMMUNICATION


def _device_work(table: EventTable, work: np.ndarray, classes: np.ndarray, basis: dict) -> _DeviceWork:
    """The events of ``work`` (a mask of the table) and the intervals measured of them."""
    ts = table.ts[work]
    end = ts + np.maximum(table.dur[work], 0.0)
    dev = table.device[work].astype(np.int64)
    step = table.step[work].astype(np.int64)
    cls = classes[work]
    n_dev = len(table.devices)
    host_ops = np.array([basis.get(d) == BASIS_HOST_OPS for d in range(n_dev)] or [False], dtype=bool)
    s_ts, s_end, origin = _outside_own_collectives(ts, end, dev, table.lane[work], cls, host_ops)
    return _DeviceWork(ts, end, dev, step, cls, n_dev, s_ts, s_end, dev[origin], step[origin],
                       _layer_codes(cls[origin]), np.flatnonzero(work)[origin])


def compute_intervals(table: EventTable, comm_patterns: Iterable[str] = (),
                      classes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(starts, ends, rows)``: the compute each device runs, as ``analyze_comm`` measures it (its device work of
    the compute class, a CPU rank's operators cut where their thread runs a collective), each interval with the
    table row of its event (its device is that event's); unmerged, in no particular order."""
    classes = classify(table, tuple(comm_patterns)) if classes is None else classes
    work, basis = device_work_mask(table, classes)
    w = _device_work(table, work, classes, basis)
    compute = w.layers == _COMPUTE
    return w.sweep_ts[compute], w.sweep_end[compute], w.sweep_row[compute]


def _device_totals(w: _DeviceWork) -> list[Breakdown | None]:
    """Per device index, its breakdown over the whole trace (None: no activity)."""
    is_comm = w.is_comm
    return _breakdowns(
        sweep_segments(w.sweep_ts, w.sweep_end, groups=w.sweep_dev, n_groups=w.n_dev, layers=w.layers,
                       n_layers=len(_LAYERS)),
        np.bincount(w.dev, minlength=w.n_dev),
        _first(w.dev[is_comm], w.ts[is_comm], w.n_dev),
    )


def _step_breakdowns(w: _DeviceWork) -> dict[tuple[int, int], Breakdown]:
    """Per (device index, step), the breakdown of the device's window of the step; empty without steps."""
    in_step = w.step >= 0
    if not in_step.any():
        return {}
    # Each device's step windows partition its time; the events are cut at the windows' bounds.
    windows = step_windows(w.dev, w.step, w.ts, w.end)
    known = w.sweep_step >= 0
    p_ts, p_end, p_origin, p_window = windows.clip(w.sweep_dev[known], w.sweep_ts[known], w.sweep_end[known])
    p_layers = w.layers[known][p_origin]
    p_comm = p_layers == _COMM
    n_windows = len(windows)
    own = windows.index(w.dev[in_step], w.step[in_step])
    found = _breakdowns(
        sweep_segments(p_ts, p_end, groups=p_window, n_groups=n_windows, layers=p_layers, n_layers=len(_LAYERS)),
        np.bincount(own, minlength=n_windows),
        _first(p_window[p_comm], p_ts[p_comm], n_windows),
        bounds=(windows.start, windows.end),
    )
    return {(int(d), int(k)): b for d, k, b in zip(windows.device, windows.step, found) if b is not None}


def _device_comms(table: EventTable, basis: dict, totals: list[Breakdown | None],
                  per_step: dict[tuple[int, int], Breakdown], step_values: np.ndarray,
                  idle: dict[Device, DeviceIdle]) -> list[DeviceComm]:
    """One ``DeviceComm`` per device with activity, in device order."""
    devices = []
    for d, total in enumerate(totals):
        if total is None:
            continue
        steps = {int(k): per_step[(d, int(k))] for k in step_values if (d, int(k)) in per_step}
        devices.append(DeviceComm(device=table.devices[d], total=total, steps=steps, basis=basis[d],
                                  idle=idle.get(table.devices[d])))
    return sorted(devices, key=lambda d: d.device)


def analyze_comm(table: EventTable, comm_patterns: Iterable[str] = (), *,
                 kernel_wait_us: float = DEFAULT_KERNEL_WAIT_US, step_selection: str = "",
                 classes: np.ndarray | None = None) -> CommReport:
    """Per-device and per-step communication/compute/idle breakdown, idle time by cause, and stragglers.

    ``comm_patterns`` are extra regexes (searched in event names and op types)
    that mark events as communication. Raises ``re.error`` for an invalid pattern.
    ``kernel_wait_us`` is the idle-cause threshold (``rnnprof.analyzers.idle``); ``step_selection``
    only labels the report (select the steps with ``rnnprof.analyzers.steps`` first); ``classes``:
    ``classify(table, comm_patterns)``, when the caller has it already.
    Devices without activity are left out; a table without any device activity
    gives a report with no devices.
    """
    extra = tuple(comm_patterns)
    classes = classify(table, extra) if classes is None else classes
    work, basis = device_work_mask(table, classes)
    w = _device_work(table, work, classes, basis)
    step_values = np.unique(w.step[w.step >= 0])
    devices = _device_comms(table, basis, _device_totals(w), _step_breakdowns(w), step_values,
                            idle_by_cause(table, work, kernel_wait_us))
    comm_names = np.unique(table.name[work][w.is_comm])
    compute = w.layers == _COMPUTE
    groups = analyze_groups(table, (w.sweep_ts[compute], w.sweep_end[compute], w.sweep_dev[compute]))
    return CommReport(
        devices=tuple(devices),
        stragglers=tuple(find_stragglers(devices, step_values)),
        steps=tuple(int(s) for s in step_values),
        extra_patterns=extra,
        comm_event_names=tuple(sorted(table.strings[c] for c in comm_names)),
        comm_ops=_comm_ops(table, np.flatnonzero(work)[w.is_comm]),
        source_format=table.source_format,
        sources=table.sources,
        host_only=len(table) > 0 and all(d.kind == "host" for d in table.devices),
        time_base_us=table.time_base_us,
        collectives=_across_ranks(analyze_collectives(table)),
        alignment=_offsets_applied(table.metadata.alignment),
        kernel_wait_us=kernel_wait_us,
        step_selection=step_selection,
        copies=count_copies(table),
        outside_steps=outside_steps(table),
        groups=groups,
    )


def _offsets_applied(alignment: Alignment | None) -> dict | None:
    """The report's ``alignment``: the method and offsets where offsets were applied to put traces on one clock
    (``load_aligned``); None for a trace on its own clock or traces merged on their recorded clocks."""
    return alignment.as_dict() if alignment is not None and alignment.offsets else None


def combine_reports(reports: Sequence[CommReport],
                    collectives: CollectivesReport | None = None) -> CommReport:
    """One report of several analysed apart (e.g. one per rank, in worker processes), as if their
    tables had been merged on their common clock (``concat(..., align="absolute")``) and analysed
    at once: the devices of each, times moved to the earliest time base, stragglers and
    communication ops taken across all. The parts' devices must be distinct (one rank each).
    ``collectives``: the collectives matched across the parts (``collectives.collectives_report`` of
    every part's ``instances``, on the common clock)."""
    if not reports:
        raise ValueError("combine_reports needs at least one report")
    if len({(r.extra_patterns, r.kernel_wait_us, r.step_selection) for r in reports}) > 1:
        raise ValueError("the reports were analysed with different settings (patterns, kernel wait, steps)")
    base = min(r.time_base_us for r in reports)
    devices: list[DeviceComm] = []
    for report in reports:
        shift = report.time_base_us - base
        devices += [_shifted(d, shift) for d in report.devices]
    seen = [d.device for d in devices]
    if len(set(seen)) != len(seen):
        raise ValueError("the reports share devices; combine reports of distinct ranks")
    devices.sort(key=lambda d: d.device)
    steps = sorted({s for r in reports for s in r.steps})
    return CommReport(
        devices=tuple(devices),
        stragglers=tuple(find_stragglers(devices, np.array(steps, dtype=np.int64))),
        steps=tuple(steps),
        extra_patterns=reports[0].extra_patterns,
        comm_event_names=tuple(sorted({n for r in reports for n in r.comm_event_names})),
        comm_ops=_combined_ops(reports),
        source_format="+".join(sorted({f for r in reports for f in r.source_format.split("+") if f})),
        sources=tuple(s for r in reports for s in r.sources),
        host_only=all(r.host_only for r in reports),
        time_base_us=base,
        collectives=_across_ranks(collectives) if collectives is not None else None,
        kernel_wait_us=reports[0].kernel_wait_us,
        step_selection=reports[0].step_selection,
        copies=combine_copies([r.copies for r in reports if r.copies is not None]),
        outside_steps=_summed([r.outside_steps for r in reports]),
        groups=combine_groups([r.groups for r in reports if r.groups is not None]),
    )


def _combined_ops(reports: Sequence[CommReport]) -> tuple[CommOp, ...]:
    """The parts' communication ops by name, summed, the longest first."""
    ops: dict[str, list] = {}
    for op in (op for r in reports for op in r.comm_ops):
        entry = ops.setdefault(op.name, [op.op_type, 0, 0, 0.0, dict.fromkeys(COLLECTIVE_TYPES, 0)])
        entry[1] += op.events
        entry[2] += op.devices
        entry[3] += op.total_us
        for kind, n in op.collective_types:
            entry[4][kind] += n
    return tuple(sorted((CommOp(name, t, e, d, us, tuple((k, n) for k, n in types.items() if n))
                         for name, (t, e, d, us, types) in ops.items()),
                        key=lambda op: (-op.total_us, op.name)))


def _summed(counts: Sequence[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for part in counts:
        for key, n in part.items():
            total[key] = total.get(key, 0) + n
    return total


def _shifted(device: DeviceComm, shift_us: float) -> DeviceComm:
    if shift_us == 0:
        return device

    def move(b: Breakdown) -> Breakdown:
        first = b.first_comm_us + shift_us if b.first_comm_us is not None else None
        last = b.last_work_us + shift_us if b.last_work_us is not None else None
        return replace(b, start_us=b.start_us + shift_us, end_us=b.end_us + shift_us, first_comm_us=first,
                       last_work_us=last)

    return replace(device, total=move(device.total), steps={s: move(b) for s, b in device.steps.items()})


def _first(groups: np.ndarray, ts: np.ndarray, n_groups: int) -> np.ndarray:
    """Earliest ``ts`` per group (inf where a group has none)."""
    first = np.full(n_groups, np.inf)
    np.minimum.at(first, groups, ts)
    return first


def _across_ranks(report: CollectivesReport) -> CollectivesReport | None:
    """The collectives report where there are ranks to compare: two or more ranks with collectives."""
    return report if report.workers >= 2 else None


def _outside_own_collectives(ts, end, dev, lane, cls, host_ops) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intervals to measure: ``(starts, ends, origin)``, origin = the event each comes from.

    On a device measured by its host operators, an operator's time while its own thread runs a
    collective (DDP's gradient hook around ``c10d::allreduce_``) is that collective's, not compute:
    compute operators are cut there. Every other event is measured whole.
    """
    rows = np.arange(len(ts))
    on_host_ops = host_ops[dev]
    comm = on_host_ops & (cls == EventClass.COMMUNICATION)
    if not comm.any():
        return ts, end, rows
    compute = on_host_ops & (cls == EventClass.COMPUTE)
    whole = np.ones(len(ts), dtype=bool)
    parts_s, parts_e, parts_o = [], [], []
    for d, l in np.unique(np.stack([dev[comm], lane[comm].astype(np.int64)]), axis=1).T:
        here = (dev == d) & (lane == l)
        cut_rows, op_rows = np.flatnonzero(here & comm), np.flatnonzero(here & compute)
        starts, ends, origin = subtract(ts[op_rows], end[op_rows], ts[cut_rows], end[cut_rows])
        whole[op_rows] = False
        parts_s.append(starts)
        parts_e.append(ends)
        parts_o.append(op_rows[origin])
    return (np.concatenate([ts[whole], *parts_s]), np.concatenate([end[whole], *parts_e]),
            np.concatenate([rows[whole], *parts_o]))


def _comm_ops(table: EventTable, rows: np.ndarray) -> tuple[CommOp, ...]:
    """Communication events grouped by name, longest summed duration first, with their collective types."""
    names, inverse = np.unique(table.name[rows], return_inverse=True)
    total = np.bincount(inverse, weights=np.maximum(table.dur[rows], 0.0), minlength=len(names))
    events = np.bincount(inverse, minlength=len(names))
    pairs = np.unique(np.stack([inverse, table.device[rows].astype(np.int64)]), axis=1) if len(rows) else \
        np.zeros((2, 0), dtype=np.int64)
    devices = np.bincount(pairs[0], minlength=len(names))
    op_type = np.zeros(len(names), dtype=np.int64)
    op_type[inverse] = table.op_type[rows]
    order = sorted(range(len(names)), key=lambda i: (-total[i], table.strings[names[i]]))
    by_type = np.zeros((len(names), len(COLLECTIVE_TYPES)), dtype=np.int64)
    np.add.at(by_type, (inverse.reshape(-1), collective_types(table, rows)), 1)
    return tuple(CommOp(name=table.strings[names[i]], op_type=table.strings[op_type[i]], events=int(events[i]),
                        devices=int(devices[i]), total_us=float(total[i]),
                        collective_types=tuple((COLLECTIVE_TYPES[t], int(by_type[i, t]))
                                               for t in np.flatnonzero(by_type[i]).tolist()))
                 for i in order)


