"""One step's replay graph with what the changes read about it (``StepGraph``), and what the replay runs with once
changes are applied (``Knobs``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from rnnprof.analyzers.replay.graph import EVENT, REPLAY_EDGES, SYNC_END, ReplayGraph
from rnnprof.events import EventTable


@dataclass
class StepGraph:
    """One step's replay graph with what the changes read about its nodes."""

    graph: ReplayGraph
    table: EventTable
    classes: np.ndarray
    window_start: float  # absolute, on the table's clock
    shared: dict = field(default_factory=dict, repr=False)  # lookups in ``table`` kept for every step's graph

    def __post_init__(self):
        t, rows = self.table, self.graph.rows
        self.worker = np.array([d.worker or "host" for d in t.devices] or [""], dtype=object)[t.device[rows]]
        self.cls = self.classes[rows]
        self.is_event = np.isin(self.graph.node_kind, [EVENT, SYNC_END])


@dataclass
class Knobs:
    """What the replay runs with: per node ``dur``, ``pre``, ``base``; per edge ``lag`` and ``keep``."""

    graph: ReplayGraph
    dur: np.ndarray
    pre: np.ndarray
    lag: np.ndarray
    keep: np.ndarray
    base: np.ndarray

    def add_edges(self, src: list[int], dst: list[int], kind: str, lag: list[float] | None = None) -> None:
        """Edges ``src -> dst`` of ``kind``, each with its delay (``lag``; none by default)."""
        if not src:
            return
        g = self.graph
        k = REPLAY_EDGES.index(kind)
        delay = np.zeros(len(src)) if lag is None else np.asarray(lag, dtype=np.float64)
        self.graph = dataclasses.replace(
            g, src=np.concatenate([g.src, src]), dst=np.concatenate([g.dst, dst]),
            kind=np.concatenate([g.kind, np.full(len(src), k, dtype=np.int8)]),
            from_start=np.concatenate([g.from_start, np.zeros(len(src), dtype=bool)]),
            lag=np.concatenate([g.lag, delay]))
        self.lag = np.concatenate([self.lag, delay])
        self.keep = np.concatenate([self.keep, np.ones(len(src), dtype=bool)])
