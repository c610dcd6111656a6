"""A watched job's step series: what each rank measured of every step, without the profiler (``rnnprof watch``), an
array per column: the contract between the series the ranks write (``rundir.series``) and the watch's analyses
(``analyzers.watch``), as ``EventTable`` is for traces. ``COLUMNS``, one value a step (NaN where a rank could not
measure it, the reason in ``RankSeries.unmeasured``): the step number and the wall clock at its end; ``step_s``, its
wall time, and its parts (``PARTS``: the wait for the batch, the model's forward, from its output to the optimizer
step, the optimizer step; what is left is ``other_s``); ``comm_wait_s`` (DDP's wait for its all-reduce); ``cpu_s``
(the process's CPU time); ``runqueue_s`` (the training thread's wait for a core); ``memory`` and ``memory_peak``
(CUDA allocated and its peak in the step, or the process's resident memory: ``memory_source``); ``flags``:
``WARMUP``, ``PROFILED`` (under the profiler), ``EXPORTED`` (a window's trace written out): a flagged step is never
in a baseline, nor judged. docs/commands/watch.md defines each.
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
# what ``data_s`` measures: the training thread's time in a DataLoader's ``__next__`` (a process that iterates one
# in its first step), else the time from the step's start to the model's first forward
DATA_LOADER, DATA_BEFORE_FORWARD = "dataloader", "before_forward"


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
    data_source: str = DATA_BEFORE_FORWARD  # what its data wait measures (``DATA_LOADER`` or ``DATA_BEFORE_FORWARD``)

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
