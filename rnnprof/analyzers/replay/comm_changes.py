"""Changes to a step's collectives by what they are (``events.collectives``): the transfers of one collective type
or of one process group scaled, and FSDP's forward prefetch (docs/commands/whatif.md, "Changes")."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rnnprof.analyzers.classify import EventClass, collective_types
from rnnprof.analyzers.collectives import forward_prefetches
from rnnprof.analyzers.critical_path import EDGE_ENQUEUE
from rnnprof.analyzers.replay.graph import ARRIVAL, DONE, EVENT
from rnnprof.analyzers.replay.result import COMM, COMM_GROUP, PREFETCH, Change, ChangeError
from rnnprof.analyzers.replay.step_graph import Knobs, StepGraph
from rnnprof.events import EventTable, ProcessGroup
from rnnprof.events.names import (ALL_GATHER, COLLECTIVE_TYPES, CPU_COLLECTIVE_CALL, FORWARD, FSDP_UNPREFETCHED,
                                  UNKNOWN_COLLECTIVE)

GROUPS_JOINED = "+"  # between the names of the process groups a group change is about
GROUP_PREFIX = "group:"  # a subject naming process groups (an overlap's), not a collective type


def collective_kind(text: str) -> str | None:
    """The collective type (``names.COLLECTIVE_TYPES``) ``text`` names (any case, ``_`` for ``-``: all_gather);
    None where it names none."""
    wanted = text.strip().lower().replace("_", "-")
    found = [kind for kind in COLLECTIVE_TYPES if kind == wanted and kind != UNKNOWN_COLLECTIVE]
    return found[0] if found else None


def known_groups(groups: Sequence[ProcessGroup], table: EventTable | None = None) -> tuple[ProcessGroup, ...]:
    """The process groups an input lists, and those its collective records name that it does not list (their
    members unknown)."""
    found = {g.name: g for g in groups}
    if table is not None:
        for code in np.unique(table.collectives.group).tolist():
            name = table.strings[code]
            if name and name not in found:
                found[name] = ProcessGroup(name)
    return tuple(found.values())


def recorded_collectives(table: EventTable) -> frozenset[tuple[str, str]]:
    """The (operation, phase) of the table's collective records."""
    records = table.collectives
    pairs = set(zip(records.collective.tolist(), records.phase.tolist()))
    return frozenset((table.strings[a], table.strings[b]) for a, b in pairs)


def check_collectives(change: Change, found: frozenset[tuple[str, str]]) -> None:
    """A ``ChangeError`` for a change about collectives the input has none of (``found``: ``recorded_collectives``):
    a type it never runs, forward all-gathers to prefetch."""
    kinds = {kind for kind, _ in found}
    if change.kind == COMM and change.subject and change.subject not in kinds:
        raise ChangeError(f"{change.describe()}: no {change.subject} in the input (its collectives: "
                          f"{', '.join(sorted(kinds - {''})) or 'none known'})")
    if change.kind == PREFETCH and (ALL_GATHER, FORWARD) not in found:
        raise ChangeError(f"{change.describe()}: no all-gather in the input's forward phase (an FSDP job's, whose "
                          f"parameters each block gathers)")


def group_change(kind: str, selector: str, factor: float, groups: Sequence[ProcessGroup]) -> Change:
    """``--comm GROUP=F`` (``COMM_GROUP``) or ``--overlap-comm GROUP`` (``OVERLAP``) on an input of ``groups``: GROUP
    is a group's name, its description (``mesh_shard``: every group so described) or its members' ranks (``0,1``);
    a ``ChangeError`` names the groups where none matches."""
    text = selector.strip()
    ranks = _ranks(text)
    names = [g.name for g in groups if g.name == text or (g.description and g.description == text)
             or (ranks is not None and g.ranks and tuple(sorted(g.ranks)) == ranks)]
    if not names:
        listed = "; ".join(f"{g.label()} ranks {','.join(map(str, g.ranks)) or '?'}" for g in groups) or "none"
        said = f"--comm {selector}={factor:g}" if kind == COMM_GROUP else f"--overlap-comm {selector}"
        raise ChangeError(f"{said}: no process group {selector!r} in the input (by name, "
                          f"description or ranks; its groups: {listed})")
    names = sorted(set(names), key=lambda name: (not name.isdigit(), int(name) if name.isdigit() else 0, name))
    joined = GROUPS_JOINED.join(names)
    return Change(COMM_GROUP, joined, factor) if kind == COMM_GROUP else Change(kind, GROUP_PREFIX + joined)


def _ranks(text: str) -> tuple[int, ...] | None:
    parts = [p.strip() for p in text.split(",")]
    if len(parts) < 2 or not all(p.isdigit() for p in parts):
        return None
    return tuple(sorted(int(p) for p in parts))


def _record_of(table: EventTable, rows: np.ndarray) -> np.ndarray:
    """Each row's index among the table's collective records; -1 where it has none."""
    records = table.collectives.row
    if not len(records) or not len(rows):
        return np.full(len(rows), -1, dtype=np.int64)
    k = np.minimum(np.searchsorted(records, rows), len(records) - 1)
    return np.where(records[k] == rows, k, -1)


def _group_names(table: EventTable, rows: np.ndarray) -> np.ndarray:
    """Each row's process group as its collective record names it ("" where none does)."""
    k = _record_of(table, rows)
    names = np.asarray(table.strings, dtype=object)[table.collectives.group[np.maximum(k, 0)]] \
        if len(table.collectives) else np.full(len(rows), "", dtype=object)
    return np.where(k >= 0, names, "")


def named_collectives(sg: StepGraph, subject: str) -> np.ndarray:
    """Per node of the step's graph, whether its row is a collective of ``subject``: a collective type
    (``names.COLLECTIVE_TYPES``), or ``GROUP_PREFIX`` and process groups' names joined by ``GROUPS_JOINED``. A
    group's collectives are those its records name, and on each rank whose records of a type all name the group,
    the communication of that type no record covers: the calls that hand them over and wait for them."""
    g, t = sg.graph, sg.table
    kinds = np.asarray(COLLECTIVE_TYPES, dtype=object)[collective_types(t, g.rows)]
    if not subject.startswith(GROUP_PREFIX):
        return kinds == subject
    names = _group_names(t, g.rows)
    recorded = _record_of(t, g.rows) >= 0
    mine = np.isin(names, subject.removeprefix(GROUP_PREFIX).split(GROUPS_JOINED)) & recorded
    calls = (sg.cls == EventClass.COMMUNICATION) & ~recorded
    for worker, kind in set(zip(sg.worker[mine].tolist(), kinds[mine].tolist())):
        same = recorded & (sg.worker == worker) & (kinds == kind)
        if np.array_equal(same, same & mine):
            mine |= calls & (sg.worker == worker) & (kinds == kind)
    return mine


def comm(change: Change, sg: StepGraph, knobs: Knobs, rank: str) -> int:
    """Collectives' transfers (done nodes), and communication of one rank only (its whole time), times the
    factor; not the host calls that hand a collective to gloo's thread (``c10d::*``). With a subject, only the
    collectives of that type (``COMM``) or of those process groups (``COMM_GROUP``)."""
    g, t = sg.graph, sg.table
    calls = np.array([bool(CPU_COLLECTIVE_CALL.match(s)) for s in t.strings] or [False], dtype=bool)
    alone = sg.is_event & (g.group < 0) & (sg.cls == EventClass.COMMUNICATION) & ~calls[t.name[g.rows]]
    sel = (g.node_kind == DONE) | alone
    if change.subject:
        sel &= named_collectives(sg, GROUP_PREFIX + change.subject if change.kind == COMM_GROUP else change.subject)
    knobs.dur[sel] *= change.factor
    return int(sel.sum())


def prefetch(change: Change, sg: StepGraph, knobs: Knobs, rank: str) -> int:
    """FSDP's forward prefetch, overlapped: on each rank, its forward all-gathers in order, each from the third on
    (the first is the root's, the second the first block's, issued as its forward begins) issued where the one
    before it was issued: its enqueue edge, from the leaf of the call that handed it to gloo's thread, comes from
    the leaf that handed over the one before it, with the same delay. What waited for its result still waits
    where it did (the block that uses it), so the transfer runs beside the block before. Those the trace's own
    prefetch issued stay (as many as the rank's ``FSDP::forward_prefetch`` ranges of the step, the latest), and so
    do backward's all-gathers, which FSDP prefetches already."""
    g, t = knobs.graph, sg.table
    edges = np.flatnonzero(g.edge_kind(EDGE_ENQUEUE) & knobs.keep & np.isin(g.node_kind[g.dst], [ARRIVAL, EVENT]))
    if not len(edges):
        return 0
    k = _record_of(t, g.rows[g.dst[edges]])
    strings = np.asarray(t.strings, dtype=object)
    kind = np.where(k >= 0, strings[t.collectives.collective[np.maximum(k, 0)]], "")
    phase = np.where(k >= 0, strings[t.collectives.phase[np.maximum(k, 0)]], "")
    edges = edges[(kind == ALL_GATHER) & (phase == FORWARD)]
    worker = sg.worker[g.dst[edges]]
    steps = set(np.unique(t.step[g.rows[g.own]]).tolist())
    done: dict[str, int] = {}
    for (w, s), n in forward_prefetches(t).items():
        if s in steps:
            done[w] = done.get(w, 0) + n
    src, dst, lag, dropped = [], [], [], []
    for w in np.unique(worker).tolist():
        mine = edges[worker == w]
        mine = mine[np.lexsort((g.dst[mine], g.start[g.dst[mine]]))]  # in the order they were handed over
        pairs = list(zip(mine[FSDP_UNPREFETCHED - 1:-1].tolist(), mine[FSDP_UNPREFETCHED:].tolist()))
        for before, edge in pairs[:max(len(pairs) - done.get(w, 0), 0)]:  # those a prefetch issued stay
            src.append(int(g.src[before]))
            dst.append(int(g.dst[edge]))
            lag.append(float(knobs.lag[edge]))
            dropped.append(edge)
    knobs.keep[dropped] = False
    knobs.add_edges(src, dst, EDGE_ENQUEUE, lag)
    return len(dropped)
