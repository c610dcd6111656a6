"""The events of a step's longest path: each one's wait, split by what its lane or device did meanwhile; the
path's shares by device and by class; its links."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from rnnprof.analyzers.critical_path.graph import StepDAG
from rnnprof.analyzers.critical_path.result import (CLASS_NAMES, EDGE_KINDS, EDGE_LANE, NEXT_STEP, NO_STEP,
                                                    OTHER_LANES, PREVIOUS_STEP, UNTRACED, UNTRACED_LINK_US, WAIT, Link)
from rnnprof.analyzers.critical_path.table_index import TableIndex
from rnnprof.events import EventTable


def _hop_kinds(dag: StepDAG, path: np.ndarray) -> np.ndarray:
    """The kind of each hop of the path (node to node)."""
    total = len(dag.n_start)
    keys = dag.src * total + dag.dst
    order = np.argsort(keys)
    hop = order[np.searchsorted(keys[order], path[:-1] * total + path[1:])] if len(path) > 1 else order[:0]
    return dag.kind[hop]


class PathEvents:
    """The events of a step's longest path, in order (collective entries folded into the member that follows):
    ``wait`` (from what it waited for, or from the window's start for the first), ``into`` (the kind of the edge
    that reached it) and ``edge`` (the kind of the edge on to the next event; through an entry: the join's kind,
    unless the first hop is not a lane edge)."""

    def __init__(self, table: EventTable, dag: StepDAG, path: np.ndarray):
        hop_kind = _hop_kinds(dag, path)
        is_event = path < dag.n
        at = np.flatnonzero(is_event)  # positions in the path of its events
        wait_in = dag.wait_in[path]
        wait_in[0] = dag.lead[path[0]]  # from the window's start
        # each event's wait: its own and its entry's (an entry's wait belongs to the member that follows)
        group = np.minimum(np.cumsum(np.concatenate([[0], is_event[:-1]])), len(at) - 1)
        self.wait = np.zeros(len(at))
        np.add.at(self.wait, group, wait_in)
        lane = EDGE_KINDS.index(EDGE_LANE)
        first_hop = at[:-1]  # the hop leaving each event (but the last)
        self.into = np.full(len(at), -1, dtype=np.int64)
        self.into[1:] = hop_kind[first_hop]
        if dag.lead[path[0]] > 0:
            self.into[0] = lane  # a thread's time before its first event in the window is its own
        edge = np.full(len(at), -1, dtype=np.int64)
        edge[:-1] = hop_kind[first_hop]
        through = (at[1:] - at[:-1]) > 1
        second = np.minimum(first_hop + 1, max(len(hop_kind) - 1, 0))
        edge[:-1] = np.where(through & (edge[:-1] == lane), hop_kind[second] if len(hop_kind) else edge[:-1],
                             edge[:-1])
        self.edge = edge
        self.nodes = path[at]
        self.rows = dag.rows[self.nodes]
        self.start, self.dur = dag.n_start[self.nodes], dag.n_dur[self.nodes]
        self.device = table.device[self.rows].astype(np.int64)
        self.of_steps = table.step[self.rows].astype(np.int64)

    def split_waits(self, tt: TableIndex, ws: float) -> None:
        """Positive waits: on a host thread reached along its lane (``host_gap``), the time its enclosing
        operators cover, the rest untraced; elsewhere (``other``), the time other lanes of the device were busy,
        the rest idle. Sets ``covered`` and ``rest`` (each event's wait, split) and ``gap_start``."""
        t = tt.table
        lanes = t.lane[self.rows]
        self.gap = gap = self.wait > 0
        self.gap_start = a = ws + self.start - self.wait
        b = ws + self.start
        self.host_gap = host_gap = gap & tt.is_thread[self.device] & (self.into == EDGE_KINDS.index(EDGE_LANE))
        self.other = other = gap & ~host_gap
        covered = np.zeros(len(self.rows))
        for d, ln in set(zip(self.device[host_gap].tolist(), lanes[host_gap].tolist())):
            sel = host_gap & (self.device == d) & (lanes == ln)
            covered[sel] = tt.lane_ops(d, ln).covered(a[sel], b[sel])
        for d in set(self.device[other].tolist()):
            sel = other & (self.device == d)
            covered[sel] = tt.busy(d).covered(a[sel], b[sel])
        self.covered = np.minimum(covered, np.maximum(self.wait, 0))
        self.rest = np.where(gap, self.wait - self.covered, 0.0)

    @property
    def share(self) -> np.ndarray:
        """Each event's duration less its overlap with the previous one (a negative wait)."""
        return self.dur + np.minimum(self.wait, 0.0)


def device_shares(table: EventTable, ev: PathEvents) -> tuple[dict[str, float], dict[str, float]]:
    """The path's time by device (events and their waits), and the idle waits (not covered by other lanes)."""
    n_dev = len(table.devices)
    labels = [d.label for d in table.devices]
    device, gap, other = ev.device, ev.gap, ev.other
    per_device = np.bincount(device, weights=ev.share, minlength=n_dev) + \
        np.bincount(device[gap], weights=ev.wait[gap], minlength=n_dev)
    by_device = {labels[d]: float(per_device[d]) for d in np.unique(device).tolist()}
    wait_dev = np.bincount(device[other], weights=ev.rest[other], minlength=n_dev)
    wait_by_device = {labels[d]: float(wait_dev[d]) for d in np.unique(device[other & (ev.rest > 0)]).tolist()}
    return by_device, wait_by_device


def class_shares(classes: np.ndarray, ev: PathEvents, step: int) -> dict[str, float]:
    """The path's time by class: each event's duration (less overlap) under its class, or under the step its
    work belongs to; each positive wait as ``split_waits`` split it."""
    class_names = {int(c): name for c, name in CLASS_NAMES.items()}
    of_steps = ev.of_steps
    owner = np.where(of_steps == step, classes[ev.rows].astype(np.int64),
                     np.where(of_steps < 0, -3, np.where(of_steps < step, -1, -2)))
    by_class: dict[str, float] = defaultdict(float)
    kinds, inverse = np.unique(owner, return_inverse=True)
    sums = np.bincount(inverse.reshape(-1), weights=ev.share)
    named = {-1: PREVIOUS_STEP, -2: NEXT_STEP, -3: NO_STEP}
    for kind, total in zip(kinds.tolist(), sums.tolist()):
        by_class[named.get(kind) or class_names.get(kind, "compute")] += total
    for key, mask, values in (("host", ev.host_gap, ev.covered), (UNTRACED, ev.host_gap, ev.rest),
                              (OTHER_LANES, ev.other, ev.covered), (WAIT, ev.other, ev.rest)):
        total = float(values[mask].sum())
        if total > 0:
            by_class[key] += total
    return {k: v for k, v in by_class.items() if v != 0 or k in CLASS_NAMES.values()}


def path_links(table: EventTable, classes: np.ndarray, ev: PathEvents, step: int, ws: float) -> tuple[Link, ...]:
    """The path's links, an untraced host gap long enough as a link of its own before its event."""
    strings = table.strings
    labels = [d.label for d in table.devices]
    workers = [d.worker or "host" for d in table.devices]
    class_names = {int(c): name for c, name in CLASS_NAMES.items()}
    rows = ev.rows
    names = [strings[c] for c in table.name[rows].tolist()]
    op_types = [strings[c] for c in table.op_type[rows].tolist()]
    lanes = [strings[c] for c in table.lane[rows].tolist()]
    cls_names = [class_names.get(c, "compute") for c in classes[rows].tolist()]
    edge_names = [EDGE_KINDS[e] if e >= 0 else "" for e in ev.edge.tolist()]
    untraced = ev.host_gap & (ev.rest >= UNTRACED_LINK_US)
    devices = [labels[d] for d in ev.device.tolist()]
    waits = np.where(untraced, ev.covered, ev.wait).tolist()  # an untraced stretch's link takes the rest
    links = list(map(Link, names, op_types, devices, lanes, ev.start.tolist(), ev.dur.tolist(), cls_names, edge_names,
                     waits, (ws + ev.start).tolist(), rows.tolist(), ev.of_steps.tolist()))
    if not untraced.any():
        return tuple(links)
    out: list[Link] = []
    before = set(np.flatnonzero(untraced).tolist())
    for k, link in enumerate(links):
        if k in before:
            dev = int(ev.device[k])
            out.append(Link(f"untraced host time on {workers[dev]}", "", link.device, link.lane,
                            float(ev.start[k] - ev.wait[k]), float(ev.rest[k]), UNTRACED, EDGE_LANE, 0.0,
                            float(ev.gap_start[k]), -1, step))
        out.append(link)
    return tuple(out)
