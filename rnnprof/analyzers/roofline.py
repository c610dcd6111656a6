"""Achieved FLOP/s and bytes/s per operator, op family and step against the device's roofline; collectives'
bus bandwidth.

Each GPU activity belongs, through its launch's correlation id, to the outermost enclosing host operator that
has a FLOPs model (``rnnprof.analyzers.flops``), so an operator's kernels count once, for the operator the user
called; without GPU work an operator's own duration is its time. Achieved TFLOP/s and TB/s are FLOPs and bytes
over that time; below the ridge point (peak FLOP/s / peak bytes/s) an operator is memory-bound. Per step: the
modeled FLOPs over the step's wall time, and MFU = matrix-unit FLOPs / step time / the dtype's matrix peak.
Collectives: message size from the kernel's (or ``record_param_comms``') args, algorithm and bus bandwidth as
NCCL's performance notes define them.

The definitions: docs/commands/roofline.md.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field

import numpy as np

from rnnprof.analyzers.device_work import outermost_by_lane
from rnnprof.analyzers.flops import DTYPE_BYTES, MATRIX_FAMILIES, op_cost
from rnnprof.analyzers.peaks import Peaks
from rnnprof.events import EventTable, Kind, match_correlation
from rnnprof.events.names import (ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, REDUCE_SCATTER, UNKNOWN_COLLECTIVE,
                           collective_type)

COMPUTE, MEMORY = "compute", "memory"
STEP_PREFIX = "ProfilerStep#"
_GPU_WORK = (Kind.KERNEL, Kind.MEMSET, Kind.MEMCPY)
# dtype names as collectives record them (``dtype`` arg) -> bytes per element
MESSAGE_DTYPE_BYTES = {"Float": 4, "Half": 2, "BFloat16": 2, "Double": 8, "Long": 8, "Int": 4, "Short": 2,
                       "Char": 1, "Byte": 1, "Bool": 1, "Float8_e4m3fn": 1, "Float8_e5m2": 1,
                       "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1}


@dataclass
class Rates:
    flops: float = 0.0
    bytes: float = 0.0
    kernel_us: float = 0.0

    @property
    def tflops_per_s(self) -> float | None:
        return self.flops / self.kernel_us / 1e6 if self.kernel_us > 0 else None

    @property
    def tb_per_s(self) -> float | None:
        return self.bytes / self.kernel_us / 1e6 if self.kernel_us > 0 else None

    @property
    def intensity(self) -> float | None:
        return self.flops / self.bytes if self.bytes > 0 else None


@dataclass
class OpRow:
    """Operators of one name, family, dtype and input shapes (the instances sum)."""

    name: str
    family: str
    dtype: str
    shapes: str
    matrix: bool
    count: int = 0
    kernels: int = 0
    rates: Rates = field(default_factory=Rates)
    peak_tflops: float | None = None
    bound: str = ""  # COMPUTE, MEMORY or "" (no peaks)
    of_roofline: float | None = None  # achieved / the roofline's bound at its intensity

    def as_dict(self) -> dict:
        return {"name": self.name, "family": self.family, "dtype": self.dtype, "shapes": self.shapes,
                "count": self.count, "kernels": self.kernels, **_rates_dict(self.rates),
                "peak_tflops": self.peak_tflops, "bound": self.bound, "of_roofline": self.of_roofline}


@dataclass
class StepRow:
    step: int
    wall_us: float
    kernel_us: float
    flops: float
    matrix_flops: float
    bytes: float
    dtype: str  # the dtype most matrix FLOPs use
    tflops_per_s: float | None
    mfu: float | None


@dataclass
class CollectiveRow:
    """Collectives of one type, process group and group size (on one rank or summed over ranks)."""

    worker: str
    group: str
    collective: str
    group_size: int
    count: int = 0
    bytes: float = 0.0
    time_us: float = 0.0

    @property
    def algbw_gbps(self) -> float | None:
        return self.bytes / self.time_us / 1e3 if self.time_us > 0 else None

    @property
    def busbw_gbps(self) -> float | None:
        algbw = self.algbw_gbps
        return None if algbw is None else algbw * bus_factor(self.collective, self.group_size)

    def as_dict(self) -> dict:
        return {"worker": self.worker, "group": self.group, "collective": self.collective,
                "group_size": self.group_size, "count": self.count, "bytes": self.bytes, "time_us": self.time_us,
                "algbw_gbps": self.algbw_gbps, "busbw_gbps": self.busbw_gbps}


@dataclass
class RooflineReport:
    peaks: Peaks | None
    ops: list[OpRow]
    families: dict[str, OpRow]
    steps: list[StepRow]
    collectives: list[CollectiveRow]
    counts: dict[str, float]  # what was seen, attributed and left out
    has_shapes: bool
    step_selection: str = ""

    @property
    def ridge(self) -> float | None:
        return None if self.peaks is None else _ridge(self.peaks, "bf16")

    def as_dict(self) -> dict:
        return {
            "peaks": None if self.peaks is None else asdict(self.peaks),
            "has_shapes": self.has_shapes,
            "step_selection": self.step_selection,
            "counts": self.counts,
            "families": {k: v.as_dict() for k, v in self.families.items()},
            "ops": [o.as_dict() for o in self.ops],
            "steps": [asdict(s) for s in self.steps],
            "collectives": [c.as_dict() for c in self.collectives],
        }


def _rates_dict(rates: Rates) -> dict:
    return {"flops": rates.flops, "bytes": rates.bytes, "kernel_us": rates.kernel_us,
            "tflops_per_s": rates.tflops_per_s, "tb_per_s": rates.tb_per_s, "intensity": rates.intensity}


def bus_factor(collective: str, n: int) -> float:
    """NCCL's bus-bandwidth factor of a collective over ``n`` ranks."""
    if n <= 0:
        return 1.0
    if collective == ALL_REDUCE:
        return 2 * (n - 1) / n
    if collective in (ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL):
        return (n - 1) / n
    return 1.0


def message_bytes(collective: str, in_nelems: int, out_nelems: int, dtype: str) -> float:
    """The size NCCL's bandwidths are computed from."""
    bpe = MESSAGE_DTYPE_BYTES.get(dtype, DTYPE_BYTES.get(dtype, 0))
    nelems = out_nelems if collective == ALL_GATHER else (in_nelems or out_nelems)
    return float(nelems * bpe)


def _ridge(peaks: Peaks, dtype: str) -> float | None:
    top = peaks.tflops(dtype, True)
    return top / peaks.tbps if top and peaks.tbps else None


def _shape_text(dims) -> str:
    """The tensors' shapes (``4x197x768,768x768``); scalars and absent arguments left out."""
    if not isinstance(dims, list):
        return ""
    return ",".join("x".join(str(d) for d in shape) for shape in dims if isinstance(shape, list) and shape)


def _containing(outer, lanes: np.ndarray, times: np.ndarray) -> np.ndarray:
    """For each (lane, time), the row of the outermost interval on that lane containing the time, else -1."""
    found = np.full(len(times), -1, dtype=np.int64)
    for lane in np.unique(lanes) if len(lanes) else []:
        if lane not in outer:
            continue
        starts, ends, idx = outer[lane]
        sel = np.flatnonzero(lanes == lane)
        pos = np.searchsorted(starts, times[sel], side="right") - 1
        ok = (pos >= 0) & (times[sel] < ends[np.maximum(pos, 0)])
        found[sel[ok]] = idx[pos[ok]]
    return found


@dataclass(frozen=True)
class _Operators:
    """The operators whose shapes the trace records (``OpShapes``; ``count`` 0: none): each distinct signature's
    cost (None: no FLOPs model), each operator's signature (``sig``), host lane and interval, the rows of those
    with a model (``modeled``), and per lane the outermost modeled ones (``outer``, ``_outermost``)."""

    count: int
    signatures: list
    costs: list
    sig: np.ndarray
    modeled: np.ndarray
    lanes: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    outer: dict

    @property
    def outermost_rows(self) -> np.ndarray:
        return (np.concatenate([idx for _, _, idx in self.outer.values()]) if self.outer
                else np.zeros(0, np.int64))


@dataclass(frozen=True)
class _GpuWork:
    """The table's GPU activities (``rows``: kernels, memsets, memcpys), the runtime calls with a correlation id
    (``runtime``), whether each activity's launch is in the trace, and the operator it is attributed to (``op_of``,
    a row of the shapes; -1: none)."""

    runtime: np.ndarray
    rows: np.ndarray
    launched: np.ndarray
    op_of: np.ndarray

    @property
    def attributed(self) -> np.ndarray:
        return self.op_of >= 0


@dataclass(frozen=True)
class _Instances:
    """Per operator (a row of the shapes): its work's time in µs, its activities, the step its work ran in
    (-1: none); ``outside_selection``: outermost modeled operators left out as in steps the table does not hold."""

    us: np.ndarray
    kernels: np.ndarray
    step: np.ndarray
    outside_selection: int = 0


def _operators(shapes) -> _Operators:
    """The operators of ``shapes`` (None or empty: none) with their costs; raises ``ValueError`` when the shapes
    were not placed on the table."""
    n_ops = len(shapes) if shapes is not None else 0
    signatures = shapes.signatures if n_ops else []
    costs = [op_cost(g.name, g.dims, g.types, g.concrete) for g in signatures]
    sig = np.asarray(shapes.sig if n_ops else [], dtype=np.int64)
    is_modeled = np.array([c is not None for c in costs] or [False], dtype=bool)
    modeled = np.flatnonzero(is_modeled[sig]) if n_ops else np.zeros(0, dtype=np.int64)
    if n_ops and len(shapes.lane) != n_ops:
        raise ValueError("the operators' shapes are not placed on this table (load_shapes(path, table))")
    lanes = np.asarray(shapes.lane if n_ops else [], dtype=np.int64)
    starts = np.asarray(shapes.ts if n_ops else [], dtype=np.float64)
    ends = starts + np.asarray(shapes.dur if n_ops else [], dtype=np.float64)
    return _Operators(n_ops, signatures, costs, sig, modeled, lanes, starts, ends,
                      outermost_by_lane(lanes, starts, ends, modeled, nest=not (n_ops and shapes.own_time)))


def _gpu_work(table: EventTable, ops: _Operators) -> _GpuWork:
    """Each GPU activity attributed to the outermost modeled operator around the runtime call that launched it."""
    corr = table.correlation
    runtime = np.flatnonzero((table.kind == Kind.RUNTIME) & (corr >= 0))
    work = np.flatnonzero(np.isin(table.kind, [int(k) for k in _GPU_WORK]))
    launcher = match_correlation(corr[runtime], corr[work])
    launched = launcher >= 0
    rt_rows = runtime[launcher[launched]]
    op_of = np.full(len(work), -1, dtype=np.int64)
    if len(rt_rows):
        op_of[launched] = _containing(ops.outer, table.lane[rt_rows], table.ts[rt_rows])
    return _GpuWork(runtime, work, launched, op_of)


def _kernel_instances(table: EventTable, ops: _Operators, gpu: _GpuWork) -> _Instances:
    """Per operator: its activities' time and count, and the step of its earliest activity."""
    owner = gpu.op_of[gpu.attributed]
    rows = gpu.rows[gpu.attributed]
    us = np.bincount(owner, weights=table.dur[rows], minlength=ops.count).astype(np.float64)
    kernels = np.bincount(owner, minlength=ops.count)
    step = np.full(ops.count, -1, dtype=np.int64)
    if len(owner):
        order = np.argsort(table.ts[rows], kind="stable")[::-1]  # the earliest written last
        step[owner[order]] = table.step[rows][order]
    return _Instances(us, kernels, step)


def _with_own_time(table: EventTable, shapes, ops: _Operators, found: _Instances) -> _Instances:
    """``found`` with each outermost modeled operator's own duration as its work, in its own step; those of steps
    the table does not hold (it may be a selection of the steps the shapes cover) are left out."""
    outermost = ops.outermost_rows
    if not len(outermost):
        return found
    op_steps = _op_steps(table, shapes, ops.starts)[outermost]
    kept = np.isin(op_steps, np.unique(table.step)) if len(table) else np.zeros(len(op_steps), dtype=bool)
    rows = outermost[kept]
    us, kernels, step = found.us.copy(), found.kernels.copy(), found.step.copy()
    us[rows] = np.asarray(shapes.dur, dtype=np.float64)[rows]
    kernels[rows] = 1
    step[rows] = op_steps[kept]
    return _Instances(us, kernels, step, int((~kept).sum()))


def _add_to(target: OpRow, cost, count: int, kernels: float, kernel_us: float) -> None:
    """Add ``count`` instances of an operator of cost ``cost`` to ``target``."""
    target.count += count
    target.kernels += int(kernels)
    target.rates.flops += cost.flops * count
    target.rates.bytes += cost.bytes * count
    target.rates.kernel_us += float(kernel_us)


def _op_rows(ops: _Operators, inst: _Instances, ran: np.ndarray,
             peaks: Peaks | None) -> tuple[dict[tuple, OpRow], dict[str, OpRow]]:
    """The operators that ran, summed per (name, family, dtype, shapes) and per family, judged against
    ``peaks``."""
    n_sig = len(ops.signatures)
    per_sig_count = np.bincount(ops.sig[ran], minlength=n_sig)
    per_sig_kernels = np.bincount(ops.sig[ran], weights=inst.kernels[ran], minlength=n_sig)
    per_sig_us = np.bincount(ops.sig[ran], weights=inst.us[ran], minlength=n_sig)
    rows: dict[tuple, OpRow] = {}
    families: dict[str, OpRow] = {}
    for k in np.flatnonzero(per_sig_count):
        c, g = ops.costs[k], ops.signatures[k]
        key = (g.name, c.family, c.dtype, _shape_text(g.dims))
        matrix = c.family in MATRIX_FAMILIES
        row = rows.get(key)
        if row is None:
            row = rows[key] = OpRow(*key, matrix=matrix)
        fam = families.get(c.family)
        if fam is None:
            fam = families[c.family] = OpRow(c.family, c.family, "", "", matrix=matrix)
        for target in (row, fam):
            _add_to(target, c, int(per_sig_count[k]), per_sig_kernels[k], per_sig_us[k])
    for row in list(rows.values()) + list(families.values()):
        _judge(row, peaks)
    return rows, families


def _step_work(ops: _Operators, inst: _Instances, ran: np.ndarray) -> tuple[dict, dict]:
    """Per step, ``[FLOPs, matrix FLOPs, bytes]`` of the operators whose work ran in it, and its matrix FLOPs per
    dtype."""
    step_flops: dict[int, list[float]] = {}
    step_dtypes: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    if not len(ran):
        return step_flops, step_dtypes
    pairs, counts = np.unique(np.stack([inst.step[ran], ops.sig[ran]]), axis=1, return_counts=True)
    for (step, k), count in zip(pairs.T.tolist(), counts.tolist()):
        c = ops.costs[k]
        totals = step_flops.setdefault(step, [0.0, 0.0, 0.0])
        totals[0] += c.flops * count
        totals[2] += c.bytes * count
        if c.family in MATRIX_FAMILIES:
            totals[1] += c.flops * count
            step_dtypes[step][c.dtype] += c.flops * count
    return step_flops, step_dtypes


def _own_busy(inst: _Instances, ran: np.ndarray) -> dict[int, float]:
    """Per step, the operators' own time (the work where there are no kernels)."""
    busy = defaultdict(float)
    for step, us in zip(inst.step[ran].tolist(), inst.us[ran].tolist()):
        busy[step] += us
    return busy


def _counts(table: EventTable, shapes, ops: _Operators, gpu: _GpuWork, inst: _Instances, ran: np.ndarray,
            own_time: bool) -> dict[str, float]:
    """What was seen, attributed and left out (the collectives' counts apart)."""
    outermost = len(ops.outermost_rows)
    return {
        "operators": shapes.operators if shapes is not None else 0,
        "operators_with_shapes": ops.count,
        "operators_modeled": int(len(ops.modeled)),
        "operators_modeled_outermost": int(outermost),
        "operators_modeled_without_gpu_work": int(outermost - len(ran)) - inst.outside_selection,
        "gpu_activities": int(len(gpu.rows)),
        "gpu_activities_attributed": int(gpu.attributed.sum()),
        "gpu_activities_unlaunched": int((~gpu.launched).sum()),
        "gpu_us": float(table.dur[gpu.rows].sum()),
        "gpu_us_attributed": float(table.dur[gpu.rows[gpu.attributed]].sum()),
        "time_basis": "operator" if own_time else "gpu",
        "operator_us_modeled": float(inst.us[ran].sum()) if own_time and len(ran) else 0.0,
        "operators_modeled_outside_selected_steps": inst.outside_selection,
    }


def analyze_roofline(table: EventTable, shapes, peaks: Peaks | None, step_selection: str = "") -> RooflineReport:
    """The roofline of one process's trace: ``shapes`` is its ``OpShapes`` (None or empty: no shapes recorded)."""
    ops = _operators(shapes)
    gpu = _gpu_work(table, ops)
    inst = _kernel_instances(table, ops, gpu)
    # a TensorFlow run's kernels, or a trace without GPU work (a CPU run): an operator's own duration is its work
    own_time = bool(ops.count) and (bool(getattr(shapes, "own_time", False)) or not len(gpu.rows))
    if own_time:
        inst = _with_own_time(table, shapes, ops, inst)
    outermost = ops.outermost_rows
    ran = outermost[inst.kernels[outermost] > 0] if len(outermost) else outermost
    op_rows, families = _op_rows(ops, inst, ran, peaks)
    step_flops, step_dtypes = _step_work(ops, inst, ran)
    busy = _own_busy(inst, ran) if own_time and len(ran) else None
    steps = _steps(table, step_flops, step_dtypes, peaks, busy)
    collectives, comm_counts = _collectives(table, shapes, gpu.runtime, ops.lanes, ops.starts, ops.ends)
    counts = {**_counts(table, shapes, ops, gpu, inst, ran, own_time), **comm_counts}
    return RooflineReport(peaks, sorted(op_rows.values(), key=lambda o: -o.rates.kernel_us),
                          dict(sorted(families.items(), key=lambda kv: -kv[1].rates.kernel_us)),
                          steps, collectives, counts, has_shapes=ops.count > 0, step_selection=step_selection)


def _step_markers(table: EventTable) -> np.ndarray:
    on_host = np.array([d.kind != "gpu" for d in table.devices] or [True], dtype=bool)
    marker_codes = [code for code, text in enumerate(table.strings) if text.startswith(STEP_PREFIX)]
    if not marker_codes:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.isin(table.name, marker_codes) & on_host[table.device] & (table.step >= 0)
                          & (table.kind != Kind.KERNEL))


def _op_steps(table: EventTable, shapes, starts: np.ndarray) -> np.ndarray:
    """Each operator's step: the table's where the shapes were placed on it, else the step marker around it."""
    known = np.asarray(getattr(shapes, "step", []), dtype=np.int64)
    if len(known) == len(starts) and (known >= 0).any():
        return known
    markers = _step_markers(table)
    found = np.full(len(starts), -1, dtype=np.int64)
    if not len(markers):
        return found
    markers = markers[np.argsort(table.ts[markers], kind="stable")]
    pos = np.searchsorted(table.ts[markers], starts, side="right") - 1
    inside = (pos >= 0) & (starts < table.end[markers][np.maximum(pos, 0)])
    found[inside] = table.step[markers][pos[inside]]
    return found


def _steps(table: EventTable, step_flops: dict, step_dtypes: dict, peaks: Peaks | None,
           busy: dict | None = None) -> list[StepRow]:
    """A row per host ``ProfilerStep`` range; without them (a TensorFlow run), per step of the table: the span
    of its events. ``busy``: the work per step where it is the operators' own time (else the kernels')."""
    steps = []
    markers = _step_markers(table)
    spans = {}
    if len(markers):
        for row in markers.tolist():
            spans[int(table.step[row])] = float(table.dur[row])
    else:
        stepped = table.step >= 0
        for number in np.unique(table.step[stepped]).tolist():
            mine = table.step == number
            spans[number] = float(table.end[mine].max() - table.ts[mine].min())
    if not spans:
        return steps
    kernels = table.kind == Kind.KERNEL
    busy_by_step = defaultdict(float)
    if busy is not None:
        busy_by_step.update(busy)
    elif kernels.any():
        k_steps = table.step[kernels]
        k_dur = table.dur[kernels]
        for step in np.unique(k_steps[k_steps >= 0]).tolist():
            busy_by_step[step] = float(k_dur[k_steps == step].sum())
    for number, wall in spans.items():
        flops, mflops, nbytes = step_flops.get(number, (0.0, 0.0, 0.0))
        dtypes = step_dtypes.get(number, {})
        dtype = max(dtypes, key=dtypes.get) if dtypes else ""
        top = peaks.tflops(dtype, True) if peaks is not None and dtype else None
        rate = flops / wall / 1e6 if wall > 0 else None
        mfu = mflops / wall / 1e6 / top if wall > 0 and top else None
        steps.append(StepRow(number, wall, busy_by_step.get(number, 0.0), flops, mflops, nbytes, dtype, rate, mfu))
    steps.sort(key=lambda s: s.step)
    return steps


def _judge(row: OpRow, peaks: Peaks | None) -> None:
    if peaks is None:
        return
    top = peaks.tflops(row.dtype or "bf16", row.matrix) if row.dtype or row.matrix else peaks.tflops("fp32", False)
    if row.family == row.name and row.matrix:  # a family mixes dtypes: judged at bf16's (else fp32's) matrix peak
        top = peaks.tflops("bf16", True) or peaks.tflops("fp32", True) or top
    row.peak_tflops = top
    intensity = row.rates.intensity
    achieved = row.rates.tflops_per_s
    if not top or not peaks.tbps or intensity is None:
        return
    ridge = top / peaks.tbps
    row.bound = MEMORY if intensity < ridge else COMPUTE
    roof = min(top, intensity * peaks.tbps)
    row.of_roofline = achieved / roof if achieved is not None and roof > 0 else None


def _collectives(table: EventTable, shapes, runtime: np.ndarray, lane_codes: np.ndarray, starts: np.ndarray, ends: np.ndarray):
    comm = np.flatnonzero(table.kind == Kind.COMMUNICATION)
    on_gpu = np.array([d.kind == "gpu" for d in table.devices] or [False], dtype=bool)
    comm = comm[on_gpu[table.device[comm]]]
    kernel_messages = shapes.kernel_messages if shapes is not None else {}
    op_messages = shapes.op_messages if shapes is not None else {}
    # messages recorded on the launching operator (record_param_comms), by thread and time
    message_rows = np.fromiter(op_messages, dtype=np.int64, count=len(op_messages))
    outer = outermost_by_lane(lane_codes, starts, ends, message_rows)
    launcher = match_correlation(table.correlation[runtime], table.correlation[comm])
    rows: dict[tuple, CollectiveRow] = {}
    without = 0
    for j, row in enumerate(comm):
        message = kernel_messages.get(int(table.correlation[row]))
        if message is None and launcher[j] >= 0 and outer:
            rt = runtime[launcher[j]]
            hit = _containing(outer, table.lane[[rt]], table.ts[[rt]])[0]
            message = op_messages.get(int(hit)) if hit >= 0 else None
        if message is None:
            without += 1
            continue
        kind = collective_type(message.collective, table.strings[table.name[row]])
        worker = table.devices[table.device[row]].worker
        key = (worker, message.group, kind, message.group_size)
        target = rows.get(key)
        if target is None:
            target = rows[key] = CollectiveRow(*key)
        target.count += 1
        target.bytes += message_bytes(kind, message.in_nelems, message.out_nelems, message.dtype)
        target.time_us += float(table.dur[row])
    collective_rows = sorted(rows.values(), key=lambda c: (c.worker, -c.time_us))
    return collective_rows, {"collectives": int(len(comm)), "collectives_without_message": without}


def per_group(rows: list[CollectiveRow]) -> list[CollectiveRow]:
    """The rows of several ranks summed per process group, type and size (worker "")."""
    merged: dict[tuple, CollectiveRow] = {}
    for r in rows:
        key = (r.group, r.collective, r.group_size)
        target = merged.get(key)
        if target is None:
            target = merged[key] = CollectiveRow("", *key)
        target.count += r.count
        target.bytes += r.bytes
        target.time_us += r.time_us
    return sorted(merged.values(), key=lambda c: -c.time_us)


__all__ = ["analyze_roofline", "RooflineReport", "OpRow", "StepRow", "CollectiveRow", "bus_factor",
           "message_bytes", "per_group", "COMPUTE", "MEMORY", "UNKNOWN_COLLECTIVE"]
