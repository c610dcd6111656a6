"""The critical path of a step: the chain of events, across devices and ranks, that sets the step time.

Per step, the step's events become a DAG (networkx) whose edges say "could not start before":

* ``lane``: program order on each lane (an executor lane, a host thread, a GPU stream): an event precedes
  the first event of its lane that starts after it ends;
* ``launch``: a runtime call precedes the GPU work it launched (same correlation id, same worker);
* ``data``: a node's input precedes it (partition graphs: node inputs; TF1 timelines: their data-flow arrows);
* ``transfer``: a tensor's producer on one device precedes its reader on another (``_Send``/``_Recv`` pairs);
* ``collective``: a join: no member's instance of a collective completes before every member's instance has
  started. Each member gets a zero-length *entry* node at its start; every entry precedes every member.
  The members are a TF1 timeline's collective arrows, and across ranks the collectives matched by
  ``rnnprof.analyzers.collectives`` (by process group and ``Seq`` where the trace has them, else by order
  within the group), the matching ``comm`` reports.

Weights. An event weighs its duration; an edge ``u -> v`` weighs ``v.start - max(p.end for p in preds(v))``,
the same for every edge into ``v``: the wait of ``v`` after the last of its predecessors finished (negative
when ``v`` started before that, as a collective member that waited inside its op does). A chain through the
predecessor each event waited for (its *binding* predecessor) therefore measures exactly its first start to
its last end; a chain through another predecessor loses that predecessor's slack. The critical path is the
longest path (``longest_path``): the chain of binding dependencies that ends the step.

What-if (an estimate): setting one op's duration to zero, with every wait kept, the longest path of the
changed DAG; the saving is the difference, so it is bounded by the next-longest path.

Pure: takes an ``EventTable`` and plain ``Dependencies``; no I/O.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Sequence

import networkx as nx
import numpy as np

from rnnprof.analyzers.classify import EventClass, classify
from rnnprof.events import Device, EventTable, Kind

EDGE_LANE = "lane"
EDGE_LAUNCH = "launch"
EDGE_DATA = "data"
EDGE_TRANSFER = "transfer"
EDGE_COLLECTIVE = "collective"
EDGE_KINDS = (EDGE_LANE, EDGE_LAUNCH, EDGE_DATA, EDGE_TRANSFER, EDGE_COLLECTIVE)

CLASS_NAMES = {EventClass.COMPUTE: "compute", EventClass.COMMUNICATION: "comm", EventClass.MEMCPY: "copy",
               EventClass.MEMSET: "copy", EventClass.HOST: "host"}
WAIT = "wait"
WHAT_IF_OPS = 10  # the longest ops of the path get a what-if estimate
_EPS_US = 0.5  # flow ends and data edges tolerate this much clock rounding


@dataclass(frozen=True)
class FlowEnd:
    device: Device
    lane: str
    ts: float


@dataclass(frozen=True)
class Flow:
    """An arrow of a Chrome trace: ``kind`` is a ``transfer``, ``data`` or ``collective`` edge; the ends are
    bound to the events of that lane enclosing their timestamps."""

    kind: str
    source: FlowEnd
    target: FlowEnd


@dataclass(frozen=True)
class Dependencies:
    """What the input says beyond the events: graph inputs by node name, arrows, and what it lacks."""

    node_inputs: tuple[tuple[str, str], ...] = ()  # (producer node, consumer node)
    flows: tuple[Flow, ...] = ()
    match_ranks: bool = True  # join the collectives of different workers (ranks) as ``collectives`` matches them
    lacks: tuple[str, ...] = ()


@dataclass(frozen=True)
class Link:
    """One event of the path; ``edge`` is the kind of the edge to the next one ("" for the last)."""

    name: str
    op_type: str
    device: str
    lane: str
    start_us: float  # from the step's first event
    dur_us: float
    event_class: str
    edge: str
    wait_us: float  # wait before this event on the path (after its predecessor ended; negative: overlap)
    ts_us: float  # absolute start, on the table's clock
    event: int  # row in the table


@dataclass(frozen=True)
class WhatIf:
    name: str
    device: str
    dur_us: float
    saving_us: float  # estimate


@dataclass(frozen=True)
class StepPath:
    step: int
    length_us: float
    span_us: float  # the step's first start to last end, over the events in the DAG
    links: tuple[Link, ...]
    by_device: dict[str, float]
    by_class: dict[str, float]
    what_if: tuple[WhatIf, ...]
    events: int
    edges: dict[str, int]


@dataclass(frozen=True)
class CriticalPathReport:
    steps: tuple[StepPath, ...]
    lacks: tuple[str, ...] = ()
    workers: tuple[str, ...] = ()


# -- the longest path ----------------------------------------------------------------------------------


def longest_path(graph: nx.DiGraph) -> tuple[list, float]:
    """The heaviest path of a DAG whose nodes weigh ``dur`` and edges ``wait``: (nodes, length).

    A path may start and end anywhere; its length is the sum of its nodes' ``dur`` and its edges' ``wait``.
    """
    return _Weighted(graph).longest()


class _Weighted:
    """``graph``'s longest path by one pass over it in topological order, built once and passed again for each
    what-if. It finds the path networkx's ``dag_longest_path`` finds on ``graph`` with a source before every node
    and each edge weighing its wait plus its target's duration (the same order and the same choice among equal
    lengths), without building that graph."""

    def __init__(self, graph: nx.DiGraph):
        self.graph = graph
        # networkx's order of that graph: the source, then ``graph``'s own topological order
        self.nodes = list(nx.topological_sort(graph))
        index = {node: k for k, node in enumerate(self.nodes)}
        self.dur = [graph.nodes[node]["dur"] for node in self.nodes]
        self.preds: list[list[tuple[int, float]]] = [[] for _ in self.nodes]
        self.wait: dict[tuple[int, int], float] = {}
        for u, v, wait in graph.edges(data="wait"):  # each node's predecessors in the order networkx keeps them
            self.preds[index[v]].append((index[u], wait + graph.nodes[v]["dur"]))
            self.wait[(index[u], index[v])] = wait
        self.index = index
        self._base: tuple[list, list] | None = None  # the pass with every node weighed

    def longest(self, without: object = None) -> tuple[list, float]:
        """The longest path; with ``without``, the length when that node weighs nothing (its waits kept)."""
        if not self.nodes:
            return [], 0.0
        dur = self.graph.nodes[without]["dur"] if without is not None else 0.0
        skip = self.index[without] if dur else -1
        n = len(self.nodes)
        if self._base is None:
            dist, back, first = [0.0] * n, [0] * n, 0
        else:  # the nodes before ``without`` in the order keep their lengths: the pass starts there
            dist, back, first = list(self._base[0]), list(self._base[1]), skip if skip >= 0 else n
        self._pass(dist, back, first, skip, dur)
        if self._base is None and skip < 0:
            self._base = (dist, back)
        end = max(range(n), key=dist.__getitem__)  # the first of the longest
        end = end if dist[end] > 0 else -1  # the source's length is 0: a longer end must beat it
        chain = []
        while end >= 0:
            chain.append(end)
            end = -1 if back[end] == end else back[end]
        chain.reverse()
        # ``path_length``, summed in its order
        length = (sum(self.dur[k] for k in chain) + sum(self.wait[pair] for pair in zip(chain, chain[1:]))
                  - (dur if without is not None and self.index[without] in chain else 0.0))
        return [self.nodes[k] for k in chain], length

    def _pass(self, dist: list, back: list, first: int, skip: int, dur: float) -> None:
        """Lengths of the longest paths ending at each node from position ``first`` on (``dist``) and each one's
        binding predecessor (``back``: -1 for the source, the node itself where a path starts there), with node
        ``skip`` weighing ``dur`` less."""
        for k in range(first, len(self.preds)):
            preds = self.preds[k]
            best, arg = 0 + self.dur[k], -1
            if k == skip:
                best = 0 + (self.dur[k] - dur)
                preds = [(u, w - dur) for u, w in preds]
            for u, w in preds:
                length = dist[u] + w
                if length > best:
                    best, arg = length, u
            if best >= 0:
                dist[k], back[k] = best, arg
            else:
                dist[k], back[k] = 0, k


def path_length(graph: nx.DiGraph, path: Sequence) -> float:
    return (sum(graph.nodes[n]["dur"] for n in path)
            + sum(graph.edges[u, v]["wait"] for u, v in zip(path, path[1:])))


# -- building the DAG ----------------------------------------------------------------------------------


def _leaves(ts: np.ndarray, end: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The rows (of one lane) enclosing no other row of it: host threads nest their operators."""
    order = rows[np.lexsort((-(end[rows] - ts[rows]), ts[rows]))]
    keep = []
    for k, row in enumerate(order):
        nxt = order[k + 1] if k + 1 < len(order) else None
        keep.append(nxt is None or not (ts[nxt] < end[row] and end[nxt] <= end[row]))
    return order[np.array(keep, dtype=bool)] if len(order) else order


class _StepGraph:
    def __init__(self, table: EventTable, rows: np.ndarray, classes: np.ndarray):
        self.table, self.rows, self.classes = table, rows, classes
        self.g = nx.DiGraph()
        # Times from the step's first event: wall-clock microseconds near 1.7e15 keep only about 0.25 µs,
        # and a path sums thousands of differences of them.
        self.base = float(table.ts[rows].min()) if len(rows) else 0.0
        ts = table.ts - self.base
        end = ts + table.dur
        for row in rows:
            self.g.add_node(int(row), start=float(ts[row]), end=float(end[row]), dur=float(table.dur[row]))
        self.lanes: dict[tuple[int, int], list[int]] = defaultdict(list)
        for row in sorted(rows, key=lambda r: (ts[r], -table.dur[r])):
            self.lanes[(int(table.device[row]), int(table.lane[row]))].append(int(row))
        self.lane_starts = {key: [self.g.nodes[r]["start"] for r in members] for key, members in self.lanes.items()}

    def add(self, u, v, kind: str) -> None:
        if u == v or self.g.has_edge(u, v):
            return
        self.g.add_edge(u, v, kind=kind)

    def event_at(self, end: FlowEnd, device_codes: dict[Device, int]) -> int | None:
        code = device_codes.get(end.device)
        lane = self.table.code_of(end.lane)
        members = self.lanes.get((code, lane)) if code is not None else None
        if not members:
            return None
        starts = self.lane_starts[(code, lane)]
        ts = end.ts - self.base
        k = bisect.bisect_right(starts, ts + _EPS_US) - 1
        # the latest-starting event of the lane that encloses the timestamp
        for j in range(k, max(k - 64, -1), -1):
            row = members[j]
            if self.g.nodes[row]["end"] >= ts - _EPS_US:
                return row
        return None


def _lane_edges(sg: _StepGraph) -> None:
    for members in sg.lanes.values():
        starts = [sg.g.nodes[r]["start"] for r in members]
        for row in members:
            k = bisect.bisect_left(starts, sg.g.nodes[row]["end"])
            if k < len(members):
                sg.add(row, members[k], EDGE_LANE)


def _launch_edges(sg: _StepGraph) -> None:
    t = sg.table
    rows = sg.rows
    correlation = t.correlation[rows]
    worker = [d.worker for d in t.devices]
    device = t.device[rows]
    runtime = t.kind[rows] == Kind.RUNTIME
    calls = (runtime & (correlation >= 0)).tolist()
    is_gpu = np.array([d.kind == "gpu" for d in t.devices] or [False], dtype=bool)
    launched = (~runtime & (correlation >= 0) & is_gpu[device]).tolist()
    launches = {}
    for row, code, corr, call in zip(rows.tolist(), device.tolist(), correlation.tolist(), calls):
        if call:
            launches[(worker[code], corr)] = row
    for row, code, corr, work in zip(rows.tolist(), device.tolist(), correlation.tolist(), launched):
        if work:
            launch = launches.get((worker[code], corr))
            if launch is not None:
                sg.add(launch, row, EDGE_LAUNCH)


def _data_edges(sg: _StepGraph, node_inputs: Iterable[tuple[str, str]]) -> None:
    t = sg.table
    runs: dict[int, list[int]] = defaultdict(list)  # name code -> rows, by start
    for row in sorted(sg.rows, key=lambda r: t.ts[r]):
        runs[int(t.name[row])].append(int(row))
    code = {name: k for k, name in enumerate(t.strings)}
    by_end: dict[int, tuple[list[float], list[int]]] = {}
    for producer, consumer in node_inputs:
        p_code = code.get(producer, -1)
        p_runs, c_runs = runs.get(p_code), runs.get(code.get(consumer, -1))
        if not p_runs or not c_runs:
            continue
        if p_code not in by_end:
            ordered = sorted(p_runs, key=lambda r: sg.g.nodes[r]["end"])
            by_end[p_code] = ([sg.g.nodes[r]["end"] for r in ordered], ordered)
        ends, ordered = by_end[p_code]
        for c in c_runs:
            # the latest run of the producer that ended before this run of the consumer started
            k = bisect.bisect_right(ends, sg.g.nodes[c]["start"] + _EPS_US) - 1
            if k >= 0:
                sg.add(ordered[k], c, EDGE_DATA)


def _collective_groups(sg: _StepGraph, flows: Sequence[Flow],
                       rank_rows: Sequence[Sequence[int]]) -> list[list[int]]:
    t = sg.table
    device_codes = {d: k for k, d in enumerate(t.devices)}
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for flow in flows:
        if flow.kind != EDGE_COLLECTIVE:
            continue
        a, b = sg.event_at(flow.source, device_codes), sg.event_at(flow.target, device_codes)
        if a is not None and b is not None:
            parent[find(a)] = find(b)
    groups: dict[int, list[int]] = defaultdict(list)
    for x in list(parent):
        groups[find(x)].append(x)
    found = [sorted(g) for g in groups.values() if len(g) > 1]
    if rank_rows:
        # collectives matched across ranks as ``comm`` matches them (``collectives.matched_rows``)
        in_step = set(int(r) for r in sg.rows)
        for rows in rank_rows:
            members = [r for r in rows if r in in_step]
            if len(members) > 1:
                found.append(members)
    return found


def _join(sg: _StepGraph, members: list[int]) -> None:
    for m in members:
        entry = ("entry", m)
        if entry in sg.g:
            return  # already a member of another group
    for m in members:
        entry = ("entry", m)
        node = sg.g.nodes[m]
        sg.g.add_node(entry, start=node["start"], end=node["start"], dur=0.0)
        for pred in list(sg.g.predecessors(m)):
            sg.g.add_edge(pred, entry, **sg.g.edges[pred, m])
            sg.g.remove_edge(pred, m)
    for m in members:
        for other in members:
            sg.add(("entry", other), m, EDGE_COLLECTIVE)


def _weigh(g: nx.DiGraph) -> None:
    for v in g.nodes:
        preds = list(g.predecessors(v))
        if preds:
            latest = max(g.nodes[p]["end"] for p in preds)
            for p in preds:
                g.edges[p, v]["wait"] = g.nodes[v]["start"] - latest


def build_step_graph(table: EventTable, step: int, dependencies: Dependencies = Dependencies(),
                     classes: np.ndarray | None = None) -> nx.DiGraph:
    """The DAG of one step: nodes are table rows (and ``("entry", row)`` for collective members)."""
    classes = classify(table) if classes is None else classes
    return _build(table, step, dependencies, classes, _rank_rows(table, dependencies)).g


def _rank_rows(table: EventTable, dependencies: Dependencies) -> list[list[int]]:
    """The rows of each collective matched across the table's ranks (none unless ``match_ranks``)."""
    from rnnprof.analyzers.collectives import matched_rows

    return matched_rows(table) if dependencies.match_ranks else []


def _build(table: EventTable, step: int, dependencies: Dependencies, classes: np.ndarray,
           rank_rows: Sequence[Sequence[int]] = ()) -> _StepGraph:
    selected = np.flatnonzero((table.step == step) & (classes != EventClass.ANNOTATION) & (table.dur >= 0))
    host = np.array([d.kind == "host" for d in table.devices] or [False], dtype=bool)
    rows = [selected[~host[table.device[selected]]]]
    on_host = selected[host[table.device[selected]]]
    for lane_key in {(int(table.device[r]), int(table.lane[r])) for r in on_host}:
        lane_rows = on_host[(table.device[on_host] == lane_key[0]) & (table.lane[on_host] == lane_key[1])]
        rows.append(_leaves(table.ts, table.end, lane_rows))
    sg = _StepGraph(table, np.sort(np.concatenate(rows)).astype(np.int64), classes)
    _lane_edges(sg)
    _launch_edges(sg)
    _data_edges(sg, dependencies.node_inputs)
    device_codes = {d: k for k, d in enumerate(table.devices)}
    for flow in dependencies.flows:
        if flow.kind in (EDGE_DATA, EDGE_TRANSFER):
            a, b = sg.event_at(flow.source, device_codes), sg.event_at(flow.target, device_codes)
            if a is not None and b is not None and sg.g.nodes[a]["start"] <= sg.g.nodes[b]["start"]:
                sg.add(a, b, flow.kind)
    for members in _collective_groups(sg, dependencies.flows, rank_rows):
        _join(sg, members)
    # Time-consistent edges only: a dependency that would close a cycle (clock skew) is dropped.
    if not nx.is_directed_acyclic_graph(sg.g):
        for u, v in list(sg.g.edges):
            if sg.g.nodes[v]["start"] + _EPS_US < sg.g.nodes[u]["start"]:
                sg.g.remove_edge(u, v)
        while not nx.is_directed_acyclic_graph(sg.g):
            cycle = nx.find_cycle(sg.g)
            sg.g.remove_edge(*cycle[-1][:2])
    _weigh(sg.g)
    return sg


# -- the report ----------------------------------------------------------------------------------------


def _class_name(classes: np.ndarray, row: int) -> str:
    return CLASS_NAMES.get(EventClass(int(classes[row])), "compute")


def _step_path(table: EventTable, step: int, dependencies: Dependencies, classes: np.ndarray,
               what_if_ops: int, rank_rows: Sequence[Sequence[int]] = ()) -> StepPath | None:
    sg = _build(table, step, dependencies, classes, rank_rows)
    g = sg.g
    if not sg.rows.size:
        return None
    weighted = _Weighted(g)
    path, length = weighted.longest()
    base = float(min(table.ts[sg.rows]))
    span = float(max(table.end[sg.rows])) - base
    events = [n for n in path if not isinstance(n, tuple)]
    links = []
    by_device: dict[str, float] = defaultdict(float)
    by_class: dict[str, float] = defaultdict(float)
    wait, into = 0.0, ""
    for k, node in enumerate(path):
        if k:
            wait += g.edges[path[k - 1], node]["wait"]
            into = into or g.edges[path[k - 1], node]["kind"]
        if isinstance(node, tuple):  # a collective entry: its wait belongs to the member that follows
            continue
        edge = ""
        for j in range(k + 1, len(path)):  # the kind of the edge on to the next event (through an entry)
            edge = g.edges[path[j - 1], path[j]]["kind"] if not edge or edge == EDGE_LANE else edge
            if not isinstance(path[j], tuple):
                break
        row = int(node)
        device = table.devices[table.device[row]]
        cls = _class_name(classes, row)
        dur = float(table.dur[row])
        links.append(Link(name=str(table.text(table.name[row])), op_type=str(table.text(table.op_type[row])),
                          device=device.label, lane=str(table.text(table.lane[row])),
                          start_us=float(table.ts[row]) - base, dur_us=dur, event_class=cls, edge=edge,
                          wait_us=float(wait), ts_us=float(table.ts[row]), event=row))
        # a negative wait is overlap with the predecessor: that part of the event is not on the path
        by_device[device.label] += dur + min(wait, 0.0) + max(wait, 0.0)
        by_class[cls] += dur + min(wait, 0.0)
        if wait > 0:
            # between two events of one host thread, the thread ran the operators enclosing them
            by_class["host" if into == EDGE_LANE and device.kind == "host" else WAIT] += wait
        wait, into = 0.0, ""
    edges = defaultdict(int)
    for _, _, kind in g.edges(data="kind"):
        edges[kind] += 1
    return StepPath(step=step, length_us=length, span_us=span, links=tuple(links), by_device=dict(by_device),
                    by_class=dict(by_class), what_if=tuple(_what_if(weighted, table, events, length, what_if_ops)),
                    events=int(sg.rows.size), edges=dict(edges))


def _what_if(weighted: _Weighted, table: EventTable, events: list, length: float, top: int) -> list[WhatIf]:
    g = weighted.graph
    result = []
    for row in sorted(events, key=lambda r: -g.nodes[r]["dur"])[:top]:
        dur = g.nodes[row]["dur"]
        if dur <= 0:
            continue
        _, shorter = weighted.longest(without=row)
        result.append(WhatIf(name=str(table.text(table.name[row])), device=table.devices[table.device[row]].label,
                             dur_us=dur, saving_us=max(0.0, length - shorter)))
    return sorted(result, key=lambda w: -w.saving_us)


def analyze_critical_path(table: EventTable, dependencies: Dependencies = Dependencies(),
                          steps: Iterable[int] | None = None, comm_patterns: Iterable[str] = (),
                          what_if_ops: int = WHAT_IF_OPS, classes: np.ndarray | None = None) -> CriticalPathReport:
    """The critical path of each step (``steps``: those of the table by default; -1: events of no step);
    ``classes``: ``classify(table, comm_patterns)``, when the caller has it already."""
    classes = classify(table, comm_patterns) if classes is None else classes
    if steps is None:  # a trace without step markers (a TF1 timeline) is one step, numbered -1
        steps = table.steps() if len(table.steps()) else ([-1] if len(table) else [])
    wanted = [int(s) for s in steps]
    rank_rows = _rank_rows(table, dependencies)
    paths = [p for p in (_step_path(table, s, dependencies, classes, what_if_ops, rank_rows) for s in wanted)
             if p is not None]
    return CriticalPathReport(steps=tuple(paths), lacks=tuple(dependencies.lacks),
                              workers=tuple(sorted({d.worker for d in table.devices} - {""})))
