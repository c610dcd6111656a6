"""Changes applied to one step's replay graph: new durations, host work, delays and edges (docs/commands/whatif.md
says what each change does to which nodes)."""

from __future__ import annotations

import dataclasses
import re
import statistics
from collections import defaultdict
import numpy as np

from rnnprof.analyzers.audit.input_stalls import INPUT_RANGE
from rnnprof.analyzers.classify import EventClass
from rnnprof.analyzers.critical_path import EDGE_COMPLETE, EDGE_LANE, EDGE_LAUNCH
from rnnprof.analyzers.replay.comm_changes import comm, named_collectives, prefetch
from rnnprof.analyzers.replay.families import family_members
from rnnprof.analyzers.replay.pipeline_changes import pipeline
from rnnprof.analyzers.replay.graph import (ARRIVAL, EDGE_ARRIVAL, EDGE_DONE, EDGE_SYNC, EVENT, DONE, SYNC_END,
                                            ReplayGraph)
from rnnprof.analyzers.replay.result import (COMM, COMM_GROUP, DELAY, EVEN_HOST, EVEN_INPUT, EVEN_WORK, FAMILY,
                                             GRAPH_LAUNCH, MICRO_BATCHES, MOVE_LAYER, NO_COPIES, NO_SYNCS, OVERLAP,
                                             PREFETCH, SCALE, SCALE_HOST, Change)
from rnnprof.analyzers.replay.step_graph import Knobs, StepGraph
from rnnprof.analyzers.copies import COPY_KINDS, copy_kind_of_rows
from rnnprof.analyzers.syncs import SYNC_CALL
from rnnprof.events import EventTable, Kind


def apply(change: Change, sg: StepGraph, knobs: Knobs, rank: str) -> int:
    """Apply ``change`` (``rank``: the rank an even-host, -input or -work change is about); the nodes it changed."""
    handler = {SCALE: _scale, SCALE_HOST: _scale, FAMILY: _scale, EVEN_HOST: _even_host, EVEN_INPUT: _even_input,
               EVEN_WORK: _even_work, COMM: comm, COMM_GROUP: comm, PREFETCH: prefetch, MICRO_BATCHES: pipeline,
               MOVE_LAYER: pipeline, OVERLAP: _overlap,
               NO_COPIES: _no_copies, NO_SYNCS: _no_syncs, GRAPH_LAUNCH: _graph_launch, DELAY: _delay}[change.kind]
    return handler(change, sg, knobs, rank)


def _codes(table: EventTable, names) -> np.ndarray:
    return np.array([k for k, s in enumerate(table.strings) if s in names], dtype=np.int64)


def _named(table: EventTable, rows: np.ndarray, codes: np.ndarray) -> np.ndarray:
    wanted = _wanted(table, codes)
    return wanted[table.name[rows]] | wanted[table.op_type[rows]]


def _wanted(table: EventTable, codes: np.ndarray) -> np.ndarray:
    """Per string code, whether it is one of ``codes``."""
    wanted = np.zeros(max(len(table.strings), 1), dtype=bool)
    wanted[codes] = True
    return wanted


def _named_spans(sg: StepGraph, codes: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Per thread (``_thread_keys``), the spans of the table's events named by ``codes`` (by name or op type): their
    starts in order and the latest end so far; looked up once for every step's graph of the table."""
    key = ("named", codes.tobytes())
    if key not in sg.shared:
        t = sg.table
        wanted = _wanted(t, codes)
        named = np.flatnonzero(wanted[t.name] | wanted[t.op_type])
        (thread,) = _thread_keys(t, named)
        spans = []
        for k in np.unique(thread).tolist():
            ops = named[thread == k]
            start, end = t.ts[ops], t.ts[ops] + t.dur[ops]
            order = np.argsort(start)
            spans.append((k, start[order], np.maximum.accumulate(end[order])))
        sg.shared[key] = spans
    return sg.shared[key]


def _inside(sg: StepGraph, codes: np.ndarray, at: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Whether each node's time ``at`` (from the window's start) falls inside an event named by ``codes`` on the
    node's thread (an operator enclosing a host thread's leaves and gaps). A thread is its lane on its worker's
    host side: a rank's annotations (``rank0/host``) and its operators (``rank0/cpu:0`` on a CPU rank) on one
    thread share the lane; a GPU's streams are threads of their own device."""
    found = np.zeros(len(sg.graph.rows), dtype=bool)
    spans = _named_spans(sg, codes)
    if not spans or not nodes.any():
        return found
    (node_key,) = _thread_keys(sg.table, sg.graph.rows)
    when = sg.window_start + at
    for k, s, reach in spans:
        sel = np.flatnonzero(nodes & (node_key == k))
        p = np.searchsorted(s, when[sel], side="right") - 1
        found[sel] = (p >= 0) & (reach[np.maximum(p, 0)] > when[sel])
    return found


def _thread_keys(t: EventTable, *row_sets: np.ndarray) -> list[np.ndarray]:
    """For each of ``row_sets``, each row's thread: its lane on its device's side (``_thread_side``), one number
    (the sides and the table's lane count computed once for all the sets)."""
    side, lanes = _thread_side(t), int(t.lane.max(initial=0)) + 1
    return [side[t.device[rows]] * lanes + t.lane[rows] for rows in row_sets]


def _thread_side(t: EventTable) -> np.ndarray:
    """Per device, a number shared by the host-side devices of one worker (host and logical CPUs), distinct for
    each GPU."""
    sides: dict[tuple, int] = {}
    out = [sides.setdefault((d.worker,) if d.kind != "gpu" else (d.worker, d.kind, d.index), len(sides))
           for d in t.devices]
    return np.array(out or [0], dtype=np.int64)


def _launchers(g: ReplayGraph) -> np.ndarray:
    mask = np.zeros(g.size, dtype=bool)
    mask[g.src[g.edge_kind(EDGE_LAUNCH)]] = True
    return mask


def _scale(change: Change, sg: StepGraph, knobs: Knobs, rank: str, on: np.ndarray | None = None,
           codes: np.ndarray | None = None) -> int:
    """The named operators' time (their nodes, the nodes inside them and the gaps between, the kernels they
    launched) times ``change.factor``; ``on``: only these nodes (one rank's), ``codes``: these names."""
    g, t = sg.graph, sg.table
    names = family_members(change.subject) if change.kind == FAMILY else {change.subject}
    codes = _codes(t, names) if codes is None else codes
    if not len(codes):
        return 0
    on = np.ones(g.size, dtype=bool) if on is None else on
    direct = sg.is_event & _named(t, g.rows, codes)
    inside = (_inside(sg, codes, (g.start + g.end) / 2, g.host) | direct) & on
    gap = _inside(sg, codes, g.start - g.pre / 2, g.host & (g.pre > 0)) & on
    if change.kind == SCALE_HOST:
        work = inside & g.host & ~_launchers(g)
    else:
        launch = g.edge_kind(EDGE_LAUNCH)
        launched = np.zeros(g.size, dtype=bool)
        launched[g.dst[launch][inside[g.src[launch]]]] = True
        work = inside | launched
    knobs.dur[work] *= change.factor
    knobs.pre[gap] *= change.factor
    return int(work.sum() + gap.sum())


def _even_work(change: Change, sg: StepGraph, knobs: Knobs, rank: str) -> int:
    """``rank``'s operators whose name no other rank runs in the step (a compute straggler's extra work) take no
    time, with what they enclose and launched (``_scale`` at 0 on ``rank``'s nodes: an operator with children is
    no node itself). Operators only: a range of one rank's own (an annotation) may enclose work the others do too."""
    t = sg.table
    ops = (t.kind == Kind.HOST_OP) & np.isin(t.step, np.unique(t.step[sg.graph.rows]))
    mine = np.array([(d.worker or "host") == rank for d in t.devices] or [False], dtype=bool)[t.device]
    only = np.setdiff1d(np.unique(t.name[ops & mine]), np.unique(t.name[ops & ~mine]))
    if not len(only):
        return 0
    return _scale(dataclasses.replace(change, kind=SCALE, factor=0.0), sg, knobs, rank, sg.worker == rank, only)


def _lane_keys(sg: StepGraph, nodes: np.ndarray) -> list[tuple]:
    """A key per host node that names its place in the program on any rank: its lane's rank among its rank's
    lanes (by how many nodes they hold), its name, its step, and how many nodes of that name and step came before
    it there (the previous step's last work in the window on one rank and not the other shifts no count)."""
    t, g = sg.table, sg.graph
    rows = g.rows[nodes]
    lane = list(zip(sg.worker[nodes].tolist(), t.device[rows].tolist(), t.lane[rows].tolist()))
    counts: dict[tuple, int] = defaultdict(int)
    for key in lane:
        counts[key] += 1
    ordinal: dict[tuple, int] = {}
    for worker in set(k[0] for k in counts):
        mine = sorted((k for k in counts if k[0] == worker), key=lambda k: (-counts[k], k))
        ordinal.update({k: i for i, k in enumerate(mine)})
    seen: dict[tuple, int] = defaultdict(int)
    keys = []
    names, steps = t.name[rows].tolist(), t.step[rows].tolist()
    for k in np.argsort(g.start[nodes], kind="stable").tolist():
        base = (lane[k][0], ordinal[lane[k]], t.strings[names[k]], steps[k])
        keys.append((k, (*base[1:], seen[base])))
        seen[base] += 1
    keys.sort()
    return [key for _, key in keys]


def _even_host(change: Change, sg: StepGraph, knobs: Knobs, rank: str) -> int:
    """Each gap of ``rank``'s threads at the median of the same gap (``_lane_keys``) on the other ranks, where
    that is shorter."""
    g = sg.graph
    nodes = np.flatnonzero(g.host)
    keys = _lane_keys(sg, nodes)
    others: dict[tuple, list[float]] = defaultdict(list)
    workers = sg.worker[nodes].tolist()
    for node, key, worker in zip(nodes.tolist(), keys, workers):
        if worker != rank:
            others[key].append(float(g.pre[node]))
    changed = 0
    for node, key, worker in zip(nodes.tolist(), keys, workers):
        if worker == rank and key in others:
            knobs.pre[node] = min(knobs.pre[node], statistics.median(others[key]))  # a fix never lengthens it
            changed += 1
    return changed


def _delay(change: Change, sg: StepGraph, knobs: Knobs, rank: str) -> int:
    """``change.delay_ms`` of host work on rank ``change.subject``, before its first host node of the step (the
    earliest starting), or with ``change.before``: before its first host node that starts once the step's first
    event matching that regex on the rank has started, on that event's thread (an enclosing range such as
    ``Optimizer.zero_grad#...`` or a leaf operator alike)."""
    g, t = sg.graph, sg.table
    mine = g.host & g.own & (g.node_kind == EVENT) & (sg.worker == change.subject)
    nodes = np.flatnonzero(mine)
    if change.before and len(nodes):
        found = _first_matching(sg, change.subject, change.before, np.unique(t.step[g.rows[nodes]]))
        if found is None:
            return 0
        at, key = found
        (node_key,) = _thread_keys(t, g.rows[nodes])
        nodes = nodes[(node_key == key) & (g.start[nodes] >= at - _EPS_US)]
    if not len(nodes):
        return 0
    first = nodes[np.lexsort((nodes, g.start[nodes]))[0]]
    knobs.pre[first] += 1000.0 * change.delay_ms
    return 1


_EPS_US = 1e-3


def _first_matching(sg: StepGraph, rank: str, pattern: str, steps: np.ndarray) -> tuple[float, int] | None:
    """The start (from the window's start; before it for a range that closed before the window opened) and the
    thread key (``_thread_keys``) of the first event of ``steps`` on ``rank``'s host side whose name matches
    ``pattern``; None where none does."""
    t = sg.table
    compiled = re.compile(pattern)
    codes = np.array([k for k, s in enumerate(t.strings) if compiled.search(s)], dtype=np.int64)
    worker = np.array([d.worker for d in t.devices] or [""], dtype=object)
    host_side = np.array([d.kind != "gpu" for d in t.devices] or [False], dtype=bool)
    # the step's events, where the table has steps: a range (a data loader's) may close before the window, the
    # step's first operator, opens; else those that end in the window
    of_step = np.isin(t.step, steps) if (steps >= 0).any() else t.ts + t.dur >= sg.window_start - _EPS_US
    rows = np.flatnonzero(np.isin(t.name, codes) & (worker[t.device] == rank) & host_side[t.device] & of_step)
    if not len(rows):
        return None
    row = rows[np.argmin(t.ts[rows])]
    (key,) = _thread_keys(t, np.array([row]))
    return float(t.ts[row] - sg.window_start), int(key[0])


def _even_input(change: Change, sg: StepGraph, knobs: Knobs, rank: str) -> int:
    """``rank``'s data loading (its work and gaps inside ``INPUT_RANGE``) scaled to the others' median."""
    t, g = sg.table, sg.graph
    codes = np.array([k for k, s in enumerate(t.strings) if INPUT_RANGE.match(s)], dtype=np.int64)
    if not len(codes):
        return 0
    work = _inside(sg, codes, (g.start + g.end) / 2, g.host)
    gap = _inside(sg, codes, g.start - g.pre / 2, g.host & (g.pre > 0))
    spent = defaultdict(float)
    for w, d, p, a, b in zip(sg.worker.tolist(), g.dur.tolist(), g.pre.tolist(), work.tolist(), gap.tolist()):
        spent[w] += d * a + p * b
    ranks = set(sg.worker[g.host].tolist())
    if len(ranks) < 2:  # one rank: its data loading hidden by prefetching
        rank = next(iter(ranks), rank)
    mine = spent.get(rank, 0.0)
    rest = [v for w, v in spent.items() if w != rank and w in ranks]
    if mine <= 0:
        return 0
    factor = statistics.median(rest) / mine if rest else 0.0
    sel_w, sel_g = work & (sg.worker == rank), gap & (sg.worker == rank)
    knobs.dur[sel_w] *= factor
    knobs.pre[sel_g] *= factor
    return int(sel_w.sum() + sel_g.sum())


def _overlap(change: Change, sg: StepGraph, knobs: Knobs, rank: str) -> int:
    """No thread or stream waits for communication: the edges from a collective to the threads that waited for
    it, gloo's complete edges and syncs on communication go; a lane's compute after communication follows the
    compute before it. With a subject, only the collectives it names (``comm_changes.named_collectives``: a type
    or process groups)."""
    g = knobs.graph
    comm = ((sg.cls == EventClass.COMMUNICATION) & sg.is_event) | (g.node_kind == DONE)
    if change.subject:
        comm &= named_collectives(sg, change.subject)
    drop = (g.edge_kind(EDGE_DONE) & (g.node_kind[g.dst] == EVENT) & (g.group[g.dst] < 0) & comm[g.src])
    drop |= (g.edge_kind(EDGE_COMPLETE) & comm[g.src]) | (g.edge_kind(EDGE_SYNC) & comm[g.src])
    lane = g.edge_kind(EDGE_LANE) & knobs.keep
    cut = lane & comm[g.src] & ~comm[g.dst]
    drop |= cut
    knobs.keep &= ~drop
    pred = {int(v): int(u) for u, v in zip(g.src[lane].tolist(), g.dst[lane].tolist())}
    # a collective member's lane edge comes into its arrival, the arrival's into the member
    joins = g.edge_kind(EDGE_ARRIVAL) & (g.node_kind[g.src] == ARRIVAL) & (g.node_kind[g.dst] == EVENT)
    pred.update({int(v): int(u) for u, v in zip(g.src[joins].tolist(), g.dst[joins].tolist())})
    src, dst = [], []
    for v in g.dst[cut].tolist():
        u = pred.get(int(v))
        while u is not None and (comm[u] or g.node_kind[u] == ARRIVAL):
            u = pred.get(u)
        if u is not None:
            src.append(u)
            dst.append(int(v))
    knobs.add_edges(src, dst, EDGE_LANE)
    return int(drop.sum())


def _copies(sg: StepGraph, kind: str = "") -> np.ndarray:
    """The step's copies and memsets; ``kind``: its copies of that kind alone (HtoD, DtoH, DtoD, PtoP, HtoH)."""
    copies = sg.is_event & np.isin(sg.cls, [EventClass.MEMCPY, EventClass.MEMSET]) & (sg.graph.node_kind == EVENT)
    if kind:
        found = np.flatnonzero(copies)
        copies[found] = copy_kind_of_rows(sg.table, sg.graph.rows[found]) == COPY_KINDS.index(kind)
    return copies


def _no_copies(change: Change, sg: StepGraph, knobs: Knobs, rank: str) -> int:
    g = knobs.graph
    copies = _copies(sg, change.subject)
    launch = g.edge_kind(EDGE_LAUNCH) & copies[g.dst]
    calls = np.zeros(g.size, dtype=bool)
    calls[g.src[launch]] = True
    sync = g.edge_kind(EDGE_SYNC)
    ends = np.zeros(g.size, dtype=bool)
    ends[g.dst[sync & copies[g.src]]] = True
    knobs.keep &= ~(sync & copies[g.src])
    sel = copies | calls | ends
    knobs.dur[sel] = 0.0
    return int(copies.sum())


def _no_syncs(change: Change, sg: StepGraph, knobs: Knobs, rank: str) -> int:
    g, t = knobs.graph, sg.table
    names = np.array([bool(SYNC_CALL.match(s)) for s in t.strings] or [False], dtype=bool)
    calls = sg.is_event & names[t.name[g.rows]]
    sync = g.edge_kind(EDGE_SYNC) & (g.node_kind[g.src] != SYNC_END) & ~calls[g.src]
    knobs.keep &= ~sync
    knobs.dur[calls] = 0.0
    return int((calls & (g.node_kind == EVENT)).sum())


def _graph_launch(change: Change, sg: StepGraph, knobs: Knobs, rank: str) -> int:
    """Kernels follow each other on their stream, launched at once: only each stream's first kernel of the
    window waits for its launch; launch calls take no time, nor does the host work before each but a thread's
    first (the dispatch that issues a kernel); the gaps between kernels go."""
    g, t = knobs.graph, sg.table
    launch = g.edge_kind(EDGE_LAUNCH) & knobs.keep
    if not launch.any():
        return 0
    targets = g.dst[launch]
    lane = t.device[g.rows[targets]].astype(np.int64) * (int(t.lane.max(initial=0)) + 1) + t.lane[g.rows[targets]]
    order = np.lexsort((g.start[targets], lane))
    first = np.zeros(len(targets), dtype=bool)
    first[order[np.concatenate([[True], lane[order][1:] != lane[order][:-1]])]] = True
    idx = np.flatnonzero(launch)
    knobs.keep[idx[~first]] = False
    calls = np.unique(g.src[launch])
    knobs.dur[calls] = 0.0
    # the host work before each launch (the framework's dispatch that issues the kernel) is not done for a graph's
    # kernels either: only the first launch of each thread keeps the work before it
    (thread,) = _thread_keys(t, g.rows[calls])
    by_time = np.lexsort((g.start[calls], thread))
    later = np.concatenate([[False], thread[by_time][1:] == thread[by_time][:-1]])
    knobs.pre[calls[by_time[later]]] = 0.0
    gpu = np.zeros(g.size, dtype=bool)
    gpu[targets] = True
    on_lane = g.edge_kind(EDGE_LANE) & gpu[g.dst]
    knobs.lag[on_lane] = np.minimum(knobs.lag[on_lane], 0.0)
    return int(len(targets))
