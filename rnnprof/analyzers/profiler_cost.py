"""The profiler's own cost on each PyTorch rank: how much longer its traced steps took than its untraced ones.

``torch.profiler`` records every operator it sees, which costs each execution microseconds of host time. A
rank's record (``TorchCapture.step_times``) times every step the capture saw, in wall and CPU seconds; per rank:

* untraced steps: all but the trace's, step 0, the profiler's warm-up step and the steps during which any rank
  exported its trace (ranks that exchange gradients wait for each other);
* the cost per step = median traced step - median untraced step (0 where negative), in wall time, the
  process's CPU time and the training thread's CPU time (the thread that ends the steps, where the profiler
  records its operators; captures that predate this field have none): the last moves least with the load of
  other processes and threads (the trace's compression runs beside the untraced steps after the window);
* per recorded operator: that cost over the median number of the rank's ``cpu_op`` per traced step.

With fewer than ``MIN_UNTRACED`` untraced steps, or no record of the steps' times, the cost is unknown and
``unknown`` says why (docs/commands/audit.md, "The profiler's own cost").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from rnnprof.events import names
from rnnprof.events import EventTable, Kind, Manifest, seconds_per_step

MIN_UNTRACED = 3  # untraced steps a rank needs for its median to be worth comparing


@dataclass(frozen=True)
class RankProfilerCost:
    """One rank's (``worker``, ``rank<r>``) profiler cost; the figures are None where ``unknown`` says why.
    ``traced_step_us``: each traced step's wall time by step number."""

    worker: str
    traced_steps: int = 0
    untraced_steps: int = 0
    traced_median_us: float | None = None
    untraced_median_us: float | None = None
    traced_cpu_median_us: float | None = None
    untraced_cpu_median_us: float | None = None
    traced_thread_cpu_median_us: float | None = None
    untraced_thread_cpu_median_us: float | None = None
    ops_per_traced_step: float | None = None
    traced_step_us: dict = field(default_factory=dict)
    traced_thread_cpu_us: dict = field(default_factory=dict)
    unknown: str | None = None

    @property
    def step_cost_us(self) -> float | None:
        """What the profiler adds to a step: median traced step - median untraced step, at least 0."""
        return _excess(self.traced_median_us, self.untraced_median_us)

    @property
    def step_cpu_cost_us(self) -> float | None:
        """The same in CPU time: median traced step's CPU time - median untraced one's, at least 0."""
        return _excess(self.traced_cpu_median_us, self.untraced_cpu_median_us)

    @property
    def step_thread_cpu_cost_us(self) -> float | None:
        """The same in the training thread's CPU time."""
        return _excess(self.traced_thread_cpu_median_us, self.untraced_thread_cpu_median_us)

    @property
    def per_op_us(self) -> float | None:
        """The profiler's cost per recorded host operator (µs of wall time)."""
        return _per_op(self.step_cost_us, self.ops_per_traced_step)

    @property
    def per_op_thread_cpu_us(self) -> float | None:
        """The profiler's cost per recorded host operator in the training thread's CPU time (µs)."""
        return _per_op(self.step_thread_cpu_cost_us, self.ops_per_traced_step)

    def as_dict(self) -> dict:
        return {"worker": self.worker, "traced_steps": self.traced_steps, "untraced_steps": self.untraced_steps,
                "traced_median_ms": _ms(self.traced_median_us), "untraced_median_ms": _ms(self.untraced_median_us),
                "profiler_ms_per_step": _ms(self.step_cost_us),
                "traced_cpu_median_ms": _ms(self.traced_cpu_median_us),
                "untraced_cpu_median_ms": _ms(self.untraced_cpu_median_us),
                "profiler_cpu_ms_per_step": _ms(self.step_cpu_cost_us),
                "traced_thread_cpu_median_ms": _ms(self.traced_thread_cpu_median_us),
                "untraced_thread_cpu_median_ms": _ms(self.untraced_thread_cpu_median_us),
                "profiler_thread_cpu_ms_per_step": _ms(self.step_thread_cpu_cost_us),
                "ops_per_traced_step": self.ops_per_traced_step,
                "profiler_us_per_op": None if self.per_op_us is None else round(self.per_op_us, 3),
                "unknown": self.unknown}


def profiler_cost(table: EventTable | None, manifest: Manifest | None) -> dict[str, RankProfilerCost]:
    """Each rank's profiler cost (see the module), by worker name (``rank<r>``), for the ranks the manifest
    records; {} where it records none."""
    return profiler_cost_of(host_op_counts(table), manifest)


def profiler_cost_of(counts: dict[str, dict[int, int]], manifest: Manifest | None) -> dict[str, RankProfilerCost]:
    """``profiler_cost`` from the events' host operators per worker and step (``host_op_counts``: a job's ranks
    give theirs apart)."""
    records = [r for r in (manifest.ranks if manifest is not None else ())
               if isinstance(r.get("rank"), int) and not isinstance(r.get("rank"), bool)]
    exporting = {s for r in records for s in _steps(r.get(names.RANK_EXPORT_STEPS))}
    return {f"rank{r['rank']}": rank_cost(f"rank{r['rank']}", r, counts.get(f"rank{r['rank']}", {}), exporting)
            for r in records}


def host_op_counts(table: EventTable | None) -> dict[str, dict[int, int]]:
    """Worker -> step -> how many host operators it ran in the step (steps it ran none in left out)."""
    if table is None or not len(table):
        return {}
    ops = np.flatnonzero(table.kind == Kind.HOST_OP)
    counts: dict[str, dict[int, int]] = {}
    for code, device in enumerate(table.devices):
        steps, n = np.unique(table.step[ops[table.device[ops] == code]], return_counts=True)
        mine = counts.setdefault(device.worker, {})
        for s, k in zip(steps.tolist(), n.tolist()):
            mine[int(s)] = mine.get(int(s), 0) + int(k)
    return counts


def rank_cost(worker: str, record: dict, counts: dict[int, int], exporting: set = frozenset()) -> RankProfilerCost:
    """The profiler cost of the rank whose record is ``record`` and whose host operators per step are ``counts``
    (``host_op_counts``' of its worker); ``exporting``: steps during which another rank exported its trace, left
    out of the untraced ones too."""
    seconds = seconds_per_step(record.get(names.RANK_STEP_SECONDS))
    if seconds is None:
        return RankProfilerCost(worker, unknown="its record has no time for each step (a capture older than this "
                                                "field, or none)")
    cpu, thread = (_per_step(record.get(key), len(seconds))
                   for key in (names.RANK_STEP_CPU_SECONDS, names.RANK_STEP_THREAD_CPU_SECONDS))
    traced = sorted(s for s in _steps(record.get("steps")) if s < len(seconds))
    left_out = {0, *traced, *exporting, *_steps(record.get(names.RANK_PROFILER_WARMUP_STEPS)),
                *_steps(record.get(names.RANK_EXPORT_STEPS))}
    untraced = [i for i in range(len(seconds)) if i not in left_out]
    counted = RankProfilerCost(worker, len(traced), len(untraced))
    if not traced:
        return dataclasses.replace(counted, unknown="no traced step was timed")
    if len(untraced) < MIN_UNTRACED:
        return dataclasses.replace(counted, unknown=(
            f"{len(untraced)} untraced step(s) timed outside step 0, the profiler's warm-up and the export, "
            f"{MIN_UNTRACED} needed"))
    ops = _ops_per_step(counts, traced)
    median = lambda values, steps: float(np.median([values[i] for i in steps])) * 1e6  # noqa: E731
    return dataclasses.replace(
        counted, traced_median_us=median(seconds, traced), untraced_median_us=median(seconds, untraced),
        traced_cpu_median_us=median(cpu, traced) if cpu else None,
        untraced_cpu_median_us=median(cpu, untraced) if cpu else None,
        traced_thread_cpu_median_us=median(thread, traced) if thread else None,
        untraced_thread_cpu_median_us=median(thread, untraced) if thread else None, ops_per_traced_step=ops,
        traced_step_us={i: seconds[i] * 1e6 for i in traced},
        traced_thread_cpu_us={i: thread[i] * 1e6 for i in traced} if thread else {},
        unknown=None if ops else "the trace holds none of its host operators in its traced steps")


def _excess(traced: float | None, untraced: float | None) -> float | None:
    return None if traced is None or untraced is None else max(traced - untraced, 0.0)


def _per_op(step_cost: float | None, ops: float | None) -> float | None:
    return None if step_cost is None or not ops else step_cost / ops


def _per_step(values, steps: int) -> list | None:
    """``values`` where it is a time in seconds for each of ``steps`` steps, else None."""
    values = seconds_per_step(values)
    return values if values is not None and len(values) == steps else None


def _ops_per_step(counts: dict[int, int], steps: list[int]) -> float | None:
    """The median number of host operators per step of ``steps`` (``counts``: per step, ``host_op_counts``')."""
    found = [counts.get(s, 0) for s in steps]
    median = float(np.median(found)) if found else 0.0
    return median or None


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value / 1000, 3)


def _steps(value) -> list[int]:
    return [v for v in value if isinstance(v, int) and not isinstance(v, bool) and v >= 0] \
        if isinstance(value, list) else []
