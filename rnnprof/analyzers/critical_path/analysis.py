"""The critical path of each step: its window, its DAG, its longest path, the path's links and shares, the
what-ifs."""

from __future__ import annotations

from typing import Iterable

import numpy as np

from rnnprof.analyzers.classify import classify
from rnnprof.analyzers.critical_path.graph import StepDAG
from rnnprof.analyzers.critical_path.links import PathEvents, class_shares, device_shares, path_links
from rnnprof.analyzers.critical_path.path import LongestPath
from rnnprof.analyzers.critical_path.result import (EDGE_KINDS, WHAT_IF_OPS, CriticalPathReport, Dependencies,
                                                    StepPath)
from rnnprof.analyzers.critical_path.table_index import TableIndex, dag_windows
from rnnprof.analyzers.critical_path.whatif import what_ifs
from rnnprof.analyzers.step_time import device_step_times
from rnnprof.events import EventTable


def step_path(tt: TableIndex, step: int, window: tuple[float, float], dependencies: Dependencies,
               what_if_ops: int) -> StepPath | None:
    """One step's longest path, its events' waits split by what the lane or device did meanwhile, and the shares
    of the path by device and by class."""
    dag = StepDAG(tt, step, window, dependencies)
    if not dag.n:
        return None
    longest = LongestPath(dag)
    events = PathEvents(tt.table, dag, np.asarray(longest.nodes, dtype=np.int64))
    events.split_waits(tt, window[0])
    by_device, wait_by_device = device_shares(tt.table, events)
    edges = {EDGE_KINDS[int(code)]: int(count) for code, count in zip(*np.unique(dag.kind, return_counts=True))}
    return StepPath(step=step, length_us=longest.length, span_us=float(window[1] - window[0]),
                    links=path_links(tt.table, tt.classes, events, step, window[0]), by_device=by_device,
                    by_class=class_shares(tt.classes, events, step),
                    what_if=what_ifs(tt.table, longest, events, what_if_ops), events=dag.n, edges=edges,
                    window_us=(float(window[0]), float(window[1])), wait_by_device=wait_by_device)


def analyze_critical_path(table: EventTable, dependencies: Dependencies = Dependencies(),
                          steps: Iterable[int] | None = None, comm_patterns: Iterable[str] = (),
                          what_if_ops: int = WHAT_IF_OPS, classes: np.ndarray | None = None) -> CriticalPathReport:
    """The critical path of each step (``steps``: those of the table by default; -1: events of no step);
    ``classes``: ``classify(table, comm_patterns)``, when the caller has it already."""
    classes = classify(table, comm_patterns) if classes is None else classes
    if steps is None:  # a trace without step markers (a TF1 timeline) is one step, numbered -1
        steps = table.steps() if len(table.steps()) else ([-1] if len(table) else [])
    wanted = [int(s) for s in steps]
    tt = TableIndex(table, classes, dependencies)
    windows = dag_windows(tt, wanted)
    paths = [p for p in (step_path(tt, s, windows[s], dependencies, what_if_ops) for s in wanted if s in windows)
             if p is not None]
    report = CriticalPathReport(steps=tuple(paths), lacks=tuple(dependencies.lacks),
                                workers=tuple(sorted({d.worker for d in table.devices} - {""})))
    return report.with_step_time(*device_step_times(table, classes))  # the steps' times, as every command's

