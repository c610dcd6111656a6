"""What a replayed step says: its time, the chain that set it, and each rank's waits."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from rnnprof.analyzers.replay.step_graph import StepGraph
from rnnprof.analyzers.replay.engine import Schedule
from rnnprof.analyzers.replay.graph import ARRIVAL, DONE, EDGE_ARRIVAL, EDGE_SYNC, NODE_KINDS, SYNC_END, ReplayGraph
from rnnprof.analyzers.replay.result import ChainLink, RankWaits

CHAIN_LINKS = 8  # the chain's longest links that a step keeps


def replayed_step_time(graph: ReplayGraph, end: np.ndarray) -> float:
    """The step's time (``end``: measured or replayed): the last end of its own events and of its collectives'
    transfers (communication moved off the compute's dependencies still ends within the step), less the last end
    of the earlier steps' GPU work in its window, or less the window's start where there is none. Where a host
    runs ahead of its GPU, or waits at the top of a step for the GPU work of the step before, the windows
    overlap, and the time from the previous step's end to this one's is the step's share of the loop: counting
    from the window's start would count the overlap in both steps."""
    own = graph.own if graph.own.any() else graph.node_kind == 0
    last = float(end[own | (graph.node_kind == DONE)].max(initial=0.0))
    before = graph.earlier & (end <= last)
    return last - float(end[before].max(initial=0.0))


def chain(sg: StepGraph, schedule: Schedule, dur: np.ndarray, pre: np.ndarray
          ) -> tuple[tuple[ChainLink, ...], int, dict[str, float]]:
    """The chain that set the replayed step: from the own event that ends last back through what each node
    waited for; its longest links, its length in nodes, and its time by device (work and host work)."""
    g, t = sg.graph, sg.table
    own = np.flatnonzero(g.own if g.own.any() else g.node_kind == 0)
    if not len(own):
        return (), 0, {}
    v = int(own[np.argmax(schedule.end[own])])
    nodes = []
    bind = schedule.bind
    while v >= 0 and len(nodes) <= g.size:
        nodes.append(v)
        v = int(bind[v])
    nodes = np.array(nodes[::-1], dtype=np.int64)
    labels = [d.label for d in t.devices]
    device = [labels[d] for d in t.device[g.rows[nodes]].tolist()]
    by_device: dict[str, float] = defaultdict(float)
    for dev, d, p in zip(device, dur[nodes].tolist(), pre[nodes].tolist()):
        by_device[dev] += d + p
    weight = dur[nodes] + pre[nodes]
    top = sorted(np.argsort(-weight, kind="stable")[:CHAIN_LINKS].tolist())
    links = tuple(ChainLink(name=t.strings[t.name[g.rows[nodes[k]]]], device=device[k],
                            node=NODE_KINDS[int(g.node_kind[nodes[k]])], dur_us=float(dur[nodes[k]]),
                            pre_us=float(pre[nodes[k]]), start_us=float(schedule.start[nodes[k]]))
                  for k in top if weight[k] > 0)
    return links, len(nodes), dict(by_device)


def rank_waits(sg: StepGraph, schedule: Schedule) -> dict[str, float]:
    """Per rank, the time its collectives waited for their last member and its synchronizing calls for the GPU."""
    g = sg.graph
    waits: dict[str, float] = defaultdict(float)
    arrival = g.edge_kind(EDGE_ARRIVAL) & (g.node_kind[g.dst] == DONE) & (g.node_kind[g.src] == ARRIVAL)
    for a, d in zip(g.src[arrival].tolist(), g.dst[arrival].tolist()):
        waits[sg.worker[a]] += max(0.0, float(schedule.ready[d] - schedule.end[a]))
    ends = np.flatnonzero(g.node_kind == SYNC_END)
    if len(ends):
        sync = g.edge_kind(EDGE_SYNC) & (g.node_kind[g.dst] == SYNC_END)
        call_of = {int(v): int(u) for u, v in zip(g.src[sync].tolist(), g.dst[sync].tolist()) if g.rows[u] == g.rows[v]}
        for e in ends.tolist():
            c = call_of.get(e)
            if c is not None:
                waits[sg.worker[e]] += max(0.0, float(schedule.start[e] - schedule.start[c]))
    for w in set(sg.worker[g.host].tolist()):
        waits.setdefault(w, 0.0)
    return dict(waits)


def waits_by_rank(before: dict[str, float], after: dict[str, float]) -> tuple[RankWaits, ...]:
    ranks = sorted(set(before) | set(after))
    return tuple(RankWaits(r, before.get(r, 0.0), after.get(r, 0.0)) for r in ranks)
