"""A watched job's step series: what each rank measured of every step it ran, without the profiler
(``rnnprof watch``), as one array per column: the contract between the series the ranks write
(``rundir.series``) and the watch's analyses (``analyzers.watch``), as ``EventTable`` is for traces.

Columns, one value a step (NaN where the rank could not measure it, with the reason in ``RankSeries.unmeasured``):

* ``step``: the rank's step number, from 0; ``end``: the wall clock (``time.time()``) as the step ended;
* ``step_s``: the step's wall seconds, from the end of the step before (of the capture's start, for step 0);
* its parts: ``data_s`` (from the step's start to the model's first forward: the wait for the batch),
  ``forward_s`` (the model's forward, to its output), ``backward_s`` (from there to the optimizer step: the loss,
  the backward pass and the gradients' all-reduce waited for at its end), ``optimizer_s``; what is left of the step
  (logging, a step mark after the optimizer) is ``step_s`` less the four;
* ``comm_wait_s``: the seconds the rank waited for its collectives after its last one started (DDP's gradient
  all-reduce buckets: from the last bucket's launch to the last one's completion);
* ``cpu_s``: the CPU seconds of the rank's process in the step (all its threads); ``runqueue_s``: the seconds its
  training thread was ready to run but waited for a core (Linux's schedstat): the machine's share of a slow step;
* ``memory`` and ``memory_peak``: bytes at the step's end and the most during the step: the CUDA allocator's
  allocated bytes and their peak on a GPU, the process's resident memory (RSS, peak: NaN) on a CPU
  (``RankSeries.memory_source``);
* ``flags``: ``WARMUP`` (a built-in workload's warm-up step), ``PROFILED`` (run under the profiler: a capture
  window or its warm-up step), ``EXPORTED`` (the step in which a window's trace was written out). A step with
  any flag is never part of a baseline, nor judged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SERIES_FORMAT = "rnnprof-series"
SERIES_VERSION = 1
COLUMNS = ("step", "end", "step_s", "data_s", "forward_s", "backward_s", "optimizer_s", "comm_wait_s", "cpu_s",
           "runqueue_s", "memory", "memory_peak", "flags")
PARTS = ("data_s", "forward_s", "backward_s", "optimizer_s")  # the step's split, in the order a step runs them
PART_NAMES = {"data_s": "data wait", "forward_s": "forward", "backward_s": "backward", "optimizer_s": "optimizer",
              "other_s": "other"}
WARMUP, PROFILED, EXPORTED = 1, 2, 4  # flags
MEMORY_RSS, MEMORY_CUDA, MEMORY_TENSORFLOW = "process_rss", "cuda_allocator", "tensorflow_allocator"


@dataclass
class RankSeries:
    """One rank's steps, a numpy array per column (``COLUMNS``), with what its header said: the rank's pid and host,
    where its memory figures come from and what it could not measure (column -> why)."""

    rank: int
    columns: dict[str, np.ndarray]
    pid: int | None = None
    host: str = ""
    memory_source: str = MEMORY_RSS
    unmeasured: dict[str, str] = field(default_factory=dict)
    restarts: int = 0  # the rank's process was started again (torchrun's restarts): its steps continue the file

    def __len__(self) -> int:
        return len(self.columns["step"])

    def __getitem__(self, name: str) -> np.ndarray:
        if name == "other_s":
            return self.other_s()
        return self.columns[name]

    def other_s(self) -> np.ndarray:
        """What is left of each step after its four parts (NaN where a part was not measured), never below 0."""
        parts = sum(self.columns[name] for name in PARTS)
        return np.maximum(self.columns["step_s"] - parts, 0.0)

    def judged(self) -> np.ndarray:
        """The steps a baseline may hold and an anomaly be judged on: no warm-up, no profiler, no export."""
        return self.columns["flags"].astype(np.int64) == 0


def empty_columns() -> dict[str, np.ndarray]:
    return {name: np.zeros(0, dtype=np.float64) for name in COLUMNS}


def series_from_rows(rank: int, rows: list[list], **header) -> RankSeries:
    """A ``RankSeries`` from rows in ``COLUMNS`` order (None for a value not measured)."""
    if not rows:
        return RankSeries(rank, empty_columns(), **header)
    table = np.array([[np.nan if v is None else v for v in row] for row in rows], dtype=np.float64)
    if table.ndim != 2 or table.shape[1] != len(COLUMNS):
        raise ValueError(f"a series row has {len(COLUMNS)} values ({', '.join(COLUMNS)})")
    return RankSeries(rank, {name: table[:, k] for k, name in enumerate(COLUMNS)}, **header)
