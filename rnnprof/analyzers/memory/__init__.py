"""Device memory from an event table's allocator records (``EventTable.memory``): per device its peak and what
was live then (by category and by allocating operator), its memory at each step's end and growth per step, the
reserved-but-unallocated bytes at the peak; across devices of one kind, a peak above the others' median.
Definitions and thresholds: docs/commands/memory.md."""

from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

import numpy as np

from rnnprof.analyzers.pipeline import PipelineReport, pipeline_places
from rnnprof.events import Device, EventTable

from .context import OUTSIDE, RecordContext, record_context
from .fsdp import gather_labels, unsharded_at
from . import missing
from .imbalance import imbalances, pipeline_memory
from .result import (CATEGORIES, PER_STEP_WINDOWS, DeviceMemory, Growth, Imbalance, MemoryReport, Peak,
                     PipelineMemory, Share, StagePeak, TimelinePoint, Unsharded)
from .series import (NO_OPERATOR, Series, allocation_categories, categories_at, device_series, operators_at,
                     released, stacked)

__all__ = ["BASELINE_TOTAL", "CATEGORIES", "DeviceMemory", "Growth", "Imbalance", "MemoryReport", "NO_OPERATOR", "Peak",
           "PipelineMemory", "Share", "StagePeak", "TimelinePoint", "Unsharded", "analyze_memory", "combined_memory",
           "has_memory", "rank_memory"]

MIN_GROWTH_STEPS = 4  # step ends needed to judge growth: three differences, so one odd step is outvoted
MIN_GROWTH_SHARE = 0.001  # growth below this share of the peak per step is no leak
JITTER_FACTOR = 3.0  # growth or excess must exceed this many times the steps' median absolute deviation
TIMELINE_POINTS = 200
BASELINE_TOTAL = "the allocator's total before the first record"
BASELINE_CPU = "none, a CPU's records count only what the window allocated"
BASELINE_NONE = "none, the allocator reported no total"


def has_memory(table: EventTable) -> bool:
    return len(table.memory) > 0


def analyze_memory(table: EventTable, steps: Iterable[int] | None = None, step_selection: str = "",
                   pipeline: PipelineReport | None | str = "find") -> MemoryReport:
    """The memory of every device with allocator records; ``steps``: the peak is sought in these steps only
    (the series still sums every record before them); ``pipeline``: ``analyze_pipeline`` of the table, where the
    caller has it (its ranks' places: ranks of different stages are not compared as replicas)."""
    return _analyzed(table, steps, step_selection, pipeline=pipeline)[0]


def rank_memory(table: EventTable, lost_sizes: np.ndarray | None = None) -> tuple[MemoryReport, np.ndarray]:
    """One rank's ``analyze_memory``, the blocks of ``lost_sizes`` left out of its growth and step peaks (the sizes
    any rank of its job loses frees of; None: its own), and the sizes whose frees its own records miss: with every
    rank's report made with the job's sizes, ``combined_memory`` of them is ``analyze_memory`` of the ranks
    merged (one rank's pipeline is none: the job's places its ranks, ``combined_memory``)."""
    return _analyzed(table, None, "", lost_sizes, pipeline=None)


def combined_memory(reports: Sequence[MemoryReport | None],
                    pipeline: PipelineReport | None = None) -> MemoryReport | None:
    """The reports of a job's ranks (None: a rank without allocator records; ``rank_memory``'s, made with the
    job's lost sizes) as one: ``analyze_memory`` of the ranks merged into one table (``pipeline``: the job's,
    ``pipeline.combine_timelines`` of its ranks'); None where none has any."""
    found = [r for r in reports if r is not None]
    if not found:
        return None
    devices = sorted((d for r in found for d in r.devices), key=lambda d: ("/gpu:" not in f"/{d.device}", d.device))
    known = [_device_of(d) for d in devices]
    placed = _places(pipeline)
    return MemoryReport(", ".join(r.source for r in found), tuple(devices),
                        tuple(imbalances(known, devices, placed[1] if placed is not None else {})),
                        sum(r.unusable for r in found),
                        pipeline=pipeline_memory(devices, *placed) if placed is not None else None)


def _places(pipeline: PipelineReport | None) -> tuple | None:
    """The pipeline's schedule and each rank's place in it (worker -> position); None without a pipeline."""
    return None if pipeline is None else (pipeline.schedule, {s.worker: s.position for s in pipeline.stages})


def _device_of(memory: DeviceMemory) -> Device:
    """The device a ``DeviceMemory`` names by its label (``rank1/gpu:0``, ``host``)."""
    base = memory.device.rsplit("/", 1)[-1]
    kind, _, index = base.partition(":")
    return Device(kind, int(index or 0), memory.worker)


def _analyzed(table: EventTable, steps: Iterable[int] | None, step_selection: str,
              lost_sizes: np.ndarray | None = None,
              pipeline: PipelineReport | None | str = "find") -> tuple[MemoryReport, np.ndarray]:
    """``analyze_memory``, with the job's ``lost_sizes`` (None: the table's own), and the table's own."""
    mem = table.memory
    ctx = record_context(table)
    labels = gather_labels(table)
    chosen = None if steps is None else np.asarray(sorted(set(steps)), dtype=np.int64)
    codes = np.unique(mem.device)
    rows = [np.flatnonzero(mem.device == code) for code in codes]
    series = [_series(table, r) for r in rows]
    own = missing.lost_sizes(series)
    sizes = own if lost_sizes is None else lost_sizes
    devices = [_device(table, ctx, table.devices[code], r, chosen, s, sizes, labels)
               for code, r, s in zip(codes, rows, series)]
    devices = [_with_manifest(d, table, table.devices[code]) for d, code in zip(devices, np.unique(mem.device))
               if d is not None]
    devices = sorted((d for d in devices if d is not None), key=lambda d: ("/gpu:" not in f"/{d.device}", d.device))
    placed = None
    if not isinstance(pipeline, str):
        placed = _places(pipeline)
    elif len({d.worker for d in devices}) > 1:
        placed = pipeline_places(table)
    roles = placed[1] if placed is not None else {}
    return MemoryReport(", ".join(table.sources) or table.source_format, tuple(devices),
                        tuple(imbalances(table.devices, devices, roles)), mem.unusable, step_selection,
                        pipeline_memory(devices, *placed) if placed is not None else None), own


def _series(table: EventTable, rows: np.ndarray) -> Series:
    """One device's series (its records ``rows``), each step apart where the source records them so."""
    mem = table.memory
    series = device_series(mem.nbytes, mem.addr, mem.total_allocated, rows,
                           total_is_baseline=table.devices[mem.device[rows[0]]].kind == "gpu")
    if _per_step_windows(table, rows):
        series = _each_step_apart(series, mem.step[rows], mem.addr[rows] < 0)
    return series


def _device(table: EventTable, ctx: RecordContext, device: Device, rows: np.ndarray, chosen: np.ndarray | None,
            series: Series, lost_sizes: np.ndarray, labels: tuple) -> DeviceMemory | None:
    """``lost_sizes``: the sizes of the blocks whose frees the job's records miss (``missing``), left out of the
    growth and the step peaks."""
    mem, kind = table.memory, device.kind
    step = mem.step[rows]
    eligible = np.ones(len(rows), dtype=bool) if chosen is None else np.isin(step, chosen)
    if not eligible.any():
        return None
    peak = int(np.flatnonzero(eligible)[np.argmax(series.allocated[eligible])])
    reserved = mem.total_reserved[rows]
    has_reserved = bool((reserved > 0).any())
    cats = allocation_categories(series, ctx, _free_phase(series, ctx))
    at = Peak(allocated=int(series.allocated[peak]),
              reserved=int(reserved[peak]) if has_reserved and reserved[peak] >= 0 else None,
              ts_us=float(mem.ts[rows[peak]]), step=int(step[peak]),
              operator=table.strings[ctx.operator[rows[peak]]] if ctx.operator[rows[peak]] >= 0 else "",
              by_category=categories_at(series, peak, cats),
              by_operator=operators_at(series, peak, ctx, table.strings))
    at = dataclasses.replace(at, fragmentation=None if at.reserved is None else at.reserved - at.allocated)
    source = BASELINE_TOTAL if series.baseline_known else BASELINE_CPU if kind != "gpu" else BASELINE_NONE
    lost = missing.step_bytes(series, step)
    trusted = missing.trusted_allocated(series, lost_sizes)
    return DeviceMemory(device.label, device.worker, len(rows), series.baseline, source, at,
                        int(reserved.max()) if has_reserved else None,
                        _growth(trusted, step, chosen, at.allocated, lost) if not _per_step_windows(table, rows)
                        else Growth((), 0, 0, False, PER_STEP_WINDOWS),
                        series.mismatches, timeline=_timeline(series, cats, mem.ts[rows]),
                        step_peaks=_step_peaks(trusted, step, eligible),
                        step_allocations=_step_allocations(series, step, eligible),
                        missing_frees=len(series.missing_frees), missing_step_bytes=lost,
                        missing_operators=missing.by_operator(series, ctx, table.strings),
                        left_out_sizes=tuple(int(b) for b in lost_sizes), unsharded=unsharded_at(series, peak, labels))


def _with_manifest(memory: DeviceMemory, table: EventTable, device: Device) -> DeviceMemory:
    """The device's memory with what its rank's capture recorded (``Manifest.rank_memory``): the memory in use when
    the window started, for the rank's CPU its resident memory, for its GPU the CUDA allocator's, and the CUDA
    allocator's peak."""
    manifest = table.metadata.manifest
    recorded = manifest.rank_memory.get(device.worker) if manifest is not None else None
    if recorded is None or recorded.baseline_source is None:
        return memory
    on_gpu = recorded.baseline_source == "cuda_allocator"
    if on_gpu != (device.kind == "gpu"):
        return memory
    return dataclasses.replace(memory, window_start=recorded.baseline_allocated,
                               window_start_source=recorded.baseline_source,
                               allocator_max=recorded.max_allocated if on_gpu else None)


def _timeline(series: Series, cats: np.ndarray, ts: np.ndarray) -> tuple[TimelinePoint, ...]:
    chosen, by_cat = stacked(series, cats, TIMELINE_POINTS)
    return tuple(TimelinePoint(float(ts[k]), tuple(int(v) for v in row)) for k, row in zip(chosen, by_cat))


def _free_phase(series: Series, ctx: RecordContext) -> np.ndarray:
    """For each position, the phase of the record freeing it (OUTSIDE where never freed)."""
    free = series.free_of
    freed = free < len(series.rows)
    phase = ctx.phase[series.rows[np.minimum(free, max(len(series.rows) - 1, 0))]]
    return np.where(freed, phase, OUTSIDE)


def _growth(allocated: np.ndarray, step: np.ndarray, chosen: np.ndarray | None, peak: int, lost: int = 0) -> Growth:
    """``allocated`` after each step's last record; growth is the median step-to-step difference, a leak when it
    exceeds JITTER_FACTOR times their median absolute deviation, MIN_GROWTH_SHARE of the peak and ``lost``, the most
    bytes a step allocated whose frees the records miss (``missing``)."""
    known = np.unique(step[step >= 0])
    if chosen is not None:
        known = known[np.isin(known, chosen)]
    ends = tuple((int(s), int(allocated[np.flatnonzero(step == s)[-1]])) for s in known)
    if len(ends) < MIN_GROWTH_STEPS:
        return Growth(ends, 0, 0, False, f"{len(ends)} step(s) with memory records; growth needs "
                                         f"{MIN_GROWTH_STEPS}")
    diffs = np.diff([v for _, v in ends])
    per_step = float(np.median(diffs))
    jitter = float(np.median(np.abs(diffs - per_step)))
    leak = per_step > JITTER_FACTOR * jitter and per_step > MIN_GROWTH_SHARE * peak and per_step > lost
    return Growth(ends, int(round(per_step)), int(round(jitter)), bool(leak))


def _step_peaks(allocated: np.ndarray, step: np.ndarray, eligible: np.ndarray) -> tuple[tuple[int, int], ...]:
    """The largest ``allocated`` bytes in each (selected) step."""
    return tuple((int(s), int(allocated[(step == s) & eligible].max()))
                 for s in np.unique(step[eligible & (step >= 0)]))


def _step_allocations(series: Series, step: np.ndarray, eligible: np.ndarray) -> tuple[tuple[int, int], ...]:
    """The bytes allocated in each (selected) step, added up."""
    made = np.where(series.nbytes > 0, series.nbytes, 0)
    return tuple((int(s), int(made[(step == s) & eligible].sum())) for s in np.unique(step[eligible & (step >= 0)]))


def _each_step_apart(series: Series, step: np.ndarray, unpaired: np.ndarray) -> Series:
    """The series started again from 0 at each step's first record (each step recorded apart), leaving out the
    frees of what an earlier step allocated (``unpaired``: the source matched them to no allocation)."""
    if not len(step):
        return series
    nbytes = np.where(unpaired & (series.nbytes < 0), 0, series.nbytes)
    cum = np.cumsum(nbytes) - np.cumsum(released(nbytes, series.free_of, series.lost))
    first = np.flatnonzero(np.concatenate(([True], step[1:] != step[:-1])))
    before = np.where(first > 0, cum[np.maximum(first - 1, 0)], 0)
    group = np.cumsum(np.isin(np.arange(len(step)), first)) - 1
    return dataclasses.replace(series, nbytes=nbytes, allocated=cum - before[group], baseline=0,
                               baseline_known=False, window=step)


def _per_step_windows(table: EventTable, rows: np.ndarray) -> bool:
    """Records whose source names their operator (TensorFlow's step stats): each step's are recorded apart, so
    memory carried from one step to the next is not in them."""
    return bool((table.memory.operator[rows] >= 0).any())
