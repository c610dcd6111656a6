"""What an analysis reads from the paths a user gives: the event table, the graphs and the manifest.

``read_inputs(paths)`` identifies each path once (``registry``), parses it once, and takes from it
what its format holds: events (traces, a run's timelines, a RunMetadata's step stats), graphs
(GraphDefs, a RunMetadata's partition and function graphs, a run's ``graphs/``) and a run's manifest.
Where there are no events or no graph, ``Inputs`` says why.

Two ways to combine paths:

* by default (``count-ops``), one path is read for everything it holds, and what cannot be read is
  a reason as long as something else could be; several paths are traces merged into one table
  (e.g. one Kineto file per rank), their graphs not read;
* ``one_run=True`` (``placement-audit``): the paths are parts of one run, combined: at most one
  run directory, plus graph and trace files (a GraphDef and a RunMetadata of that run, say); any
  path that cannot be read is an error.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

from rnnprof.errors import InputError
from rnnprof.events import EventTable, Manifest
from rnnprof.traces import graphs, kineto, load_events, merge_tables, rnnprof_run
from rnnprof.traces.formats import GraphDefs
from rnnprof.traces.registry import Source, open_source

MERGED_TRACES = "graphs are read from one run directory or graph file, not from merged traces"
NOTHING = ("holds no trace events and no graph (nothing was captured?)",
           "a run directory with timelines or graphs, a trace file or a graph file")


@dataclass(frozen=True, eq=False)
class Inputs:
    """The events, graphs and manifest read from the user's paths, each with why it is missing."""

    label: str  # the paths as given, for reports
    events: EventTable | None = None
    events_reason: str = ""  # why ``events`` is None
    graph_defs: GraphDefs | None = None  # the parsed GraphDef protos, by role
    graphs_reason: str = ""  # why ``graph_defs`` is None
    manifest: Manifest | None = None  # a run directory's

    @cached_property
    def graph_set(self):
        """``graphs.GraphSet``: the user and the runtime graph apart (None without graphs)."""
        return graphs.graph_set(self.graph_defs) if self.graph_defs is not None else None

    @cached_property
    def graph(self):
        """One networkx graph: user graph with the runtime's assigned devices joined in (None without graphs)."""
        return graphs.merged_graph(self.graph_defs) if self.graph_defs is not None else None

    @property
    def user_graph_reason(self) -> str:
        return self._view_reason("holds no user-level graph (graph.pb)")

    @property
    def runtime_graph_reason(self) -> str:
        return self._view_reason("holds no partition graphs")

    def _view_reason(self, absent: str) -> str:
        if self.graph_defs is None:
            return self.graphs_reason
        return "; ".join(self.graph_defs.warnings) or f"{self.label} {absent}"


def read_inputs(paths: Sequence[str | os.PathLike], one_run: bool = False) -> Inputs:
    """Read ``paths`` once each; see the module's docstring for how several are combined."""
    paths = list(paths)
    if not paths:
        raise InputError("(no paths)", "nothing to read", NOTHING[1])
    label = ", ".join(map(str, paths))
    if one_run:
        return _one_run([open_source(p) for p in paths], label)
    if len(paths) > 1:
        return Inputs(label, events=load_events(paths), graphs_reason=MERGED_TRACES)
    return _one_input(open_source(paths[0]), label)


def _one_input(source: Source, label: str) -> Inputs:
    """Everything one path holds; what fails is a reason while the rest loads."""
    events, events_error = None, None
    try:
        events = source.events()
    except InputError as exc:
        events_error = exc
    defs, graphs_error = _graph_defs(source)
    if events is None and (defs is None or not (defs.user or defs.runtime)):
        raise events_error if source.holds_events or graphs_error is None else graphs_error
    return Inputs(label, events=events, events_reason=str(events_error or ""), graph_defs=defs,
                  graphs_reason=_graphs_reason(defs, graphs_error, events.source_format if events else ""),
                  manifest=source.parsed if _is_run(source) else None)


def job_graphs(paths: Sequence[str | os.PathLike]) -> Inputs:
    """What ``read_inputs`` gives of a job's rank files (Kineto traces: a folder of them, several, or a PyTorch run
    directory's) besides their events, which the job's analysis reads rank by rank: their graphs, or why there are
    none, and a run directory's manifest."""
    paths = list(paths)
    label = ", ".join(map(str, paths))
    if len(paths) > 1:
        return Inputs(label, graphs_reason=MERGED_TRACES)
    source = open_source(paths[0])
    defs, graphs_error = _graph_defs(source)
    return Inputs(label, graph_defs=defs, graphs_reason=_graphs_reason(defs, graphs_error, kineto.FORMAT),
                  manifest=source.parsed if _is_run(source) else None)


def _graph_defs(source: Source) -> tuple[GraphDefs | None, InputError | None]:
    """The graphs ``source`` holds, or the error reading them."""
    if not source.holds_graphs:
        return None, None
    try:
        return source.graph_defs(), None
    except InputError as exc:
        return None, exc


def _graphs_reason(defs: GraphDefs | None, error: InputError | None, source_format: str) -> str:
    """Why an input has no graphs (``source_format``: its events')."""
    if error is not None:
        return str(error)
    return "" if defs is not None else f"{source_format} traces carry no TensorFlow graph"


def _one_run(sources: list[Source], label: str) -> Inputs:
    """The parts of one run, combined; anything unreadable is an error."""
    runs = [s for s in sources if _is_run(s)]
    if len(runs) > 1:
        raise InputError(", ".join(str(s.path) for s in runs),
                         f"{len(runs)} run directories given; one run is audited at a time",
                         "one run directory, with graph or trace files of that same run if any")
    tables, defs = [], GraphDefs()
    for source in sources:
        if source.holds_graphs:
            found = source.graph_defs()
            defs.user += found.user
            defs.runtime += found.runtime
            defs.warnings += found.warnings
        if source.holds_events and (not _is_run(source) or rnnprof_run.has_traces(source.path)):
            tables.append(source.events())
    events = merge_tables(tables) if tables else None
    has_graph = bool(defs.user or defs.runtime)
    if events is None and not has_graph:
        for run in runs:
            run.events()  # raises the run's own reason (listed timelines missing, ...)
        raise InputError(label, *NOTHING)
    return Inputs(label, events=events,
                  events_reason="" if events is not None else f"{label} holds no trace events",
                  graph_defs=defs if has_graph else None,
                  graphs_reason="" if has_graph else f"{label} holds no graph",
                  manifest=runs[0].parsed if runs else None)


def _is_run(source: Source) -> bool:
    return source.format.name == "rundir"  # parsed: the manifest
