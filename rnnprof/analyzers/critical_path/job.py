"""The critical path of a whole job, rank by rank: each rank alone gives its DAG candidates and their lookups
(``rank_part``) and a small summary (``RankSummary``); the summaries give the step windows and the collectives
matched across ranks (``job_plan``); a step's path is then found on the candidates of every rank that overlap
its window (``job_step_path``), the same rows, numbers and tie-breaks as ``analyze_critical_path`` of the ranks
merged into one table, without the whole job in memory. Kineto rank files only: their clocks are absolute
(``time_base_us`` 0), so a rank's times are the merged table's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np

from rnnprof.analyzers.classify import EventClass
from rnnprof.analyzers.collectives import instances, matched_groups, matched_sends
from rnnprof.analyzers.critical_path.analysis import step_path
from rnnprof.analyzers.critical_path.result import WHAT_IF_OPS, CriticalPathReport, Dependencies, StepPath
from rnnprof.analyzers.critical_path.table_index import Intervals, TableIndex
from rnnprof.events import Device, EventTable, concat
from rnnprof.events.collectives import CollectiveRecords, collective_records


@dataclass(frozen=True)
class RankPart:
    """One rank's DAG candidates in start order: ``arrays`` holds their table columns, ``row`` (their rows in the
    rank's table), ``classes``, ``reach`` (the running last end, for a window's rows; ``ts_marks`` and
    ``reach_marks``: every ``_MARK``-th of ``ts`` and ``reach``), their collective records (``record_*``: what
    each collective is, group and operation, as ``events.collectives`` has it), ``enqueue``/``complete``
    (gloo pairs, as candidate positions), ``apart`` (the collective runs kept apart from their lane:
    ``table_index._collective_runs``), ``is_thread`` (per device)
    and the unions of each device's events (``busy_*``) and each host lane's operators (``lane_*``)."""

    arrays: dict
    strings: tuple[str, ...]
    devices: tuple[Device, ...]


@dataclass(frozen=True)
class RankSummary:
    rows: int  # rows of the rank's table: the next rank's rows follow them in the merged table
    steps: tuple[int, ...]  # the table's steps
    spans: dict  # step (-1 too) -> (first start, last end) of its candidates
    span_all: tuple[float, float] | None  # of every candidate
    instances: dict  # worker -> its collectives (``collectives.instances``), rows of the rank's table
    workers: tuple[str, ...] = ()  # of its devices
    first_ops: dict = field(default_factory=dict)  # step -> first start of its host operators, enclosing ones too


@dataclass(frozen=True)
class JobPlan:
    steps: tuple[int, ...]  # to analyse
    windows: dict  # step -> window
    groups: tuple[tuple[int, ...], ...]  # merged-table rows of each collective matched across ranks
    offsets: tuple[int, ...]  # each rank's first row in the merged table
    has_steps: bool
    senders: tuple[int, ...] = ()  # the merged-table rows among them that are sends (``collectives.matched_sends``)


_MARK = 256  # a window's first and last candidate are looked up in every 256th start and running end
_LANE_KEY = 1 << 32  # a host lane's key: its device's code times this, plus its lane's string code


def _position(sorted_rows: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The position of each of ``rows`` in ``sorted_rows``; -1 where it is not there."""
    if not len(sorted_rows):
        return np.full(len(rows), -1, dtype=np.int64)
    k = np.minimum(np.searchsorted(sorted_rows, rows), len(sorted_rows) - 1)
    return np.where(sorted_rows[k] == rows, k, -1)


def _flat_intervals(table: EventTable, rows: np.ndarray, key: np.ndarray, prefix: str) -> dict:
    """``Intervals`` of ``rows`` grouped by ``key``, as flat arrays: ``key``, ``ptr``, ``s``, ``e`` and ``cum``
    (one longer per group: group k's is ``cum[ptr[k] + k : ptr[k + 1] + k + 1]``), each name after ``prefix``."""
    keys = np.unique(key)
    made = [Intervals(table.ts[rows[key == k]], table.end[rows[key == k]]) for k in keys.tolist()]
    flat = {"key": keys.astype(np.int64),
            "ptr": np.concatenate([[0], np.cumsum([len(m.s) for m in made], dtype=np.int64)]).astype(np.int64)}
    for name in ("s", "e", "cum"):
        parts = [getattr(m, name) for m in made]
        flat[name] = np.concatenate(parts) if parts else np.zeros(0)
    return {prefix + name: value for name, value in flat.items()}


def _of_flat(arrays, prefix: str, key: int) -> Intervals:
    keys = arrays[prefix + "key"]
    k = int(np.searchsorted(keys, key))
    if k >= len(keys) or int(keys[k]) != key:
        return Intervals(np.zeros(0), np.zeros(0))
    a, b = int(arrays[prefix + "ptr"][k]), int(arrays[prefix + "ptr"][k + 1])
    return Intervals.of(np.asarray(arrays[prefix + "s"][a:b]), np.asarray(arrays[prefix + "e"][a:b]),
                        np.asarray(arrays[prefix + "cum"][a + k:b + k + 1]))


def rank_part(table: EventTable, classes: np.ndarray) -> tuple[RankPart, RankSummary]:
    """What one rank's table gives the job's critical path (``classes``: ``classify`` of it)."""
    tt = TableIndex(table, classes, Dependencies(match_ranks=False))
    cand = np.sort(tt.cand)
    by_ts = np.argsort(table.ts[cand], kind="stable")
    rows = cand[by_ts]  # in start order: a window's candidates are a run of them
    arrays = {c: getattr(table, c)[rows] for c in EventTable.COLUMNS}
    arrays.update(row=rows, classes=classes[rows], is_thread=tt.is_thread, apart=np.isin(rows, tt.apart),
                  reach=np.maximum.accumulate(table.end[rows]) if len(rows) else table.end[rows])
    arrays.update(ts_marks=arrays["ts"][::_MARK].copy(), reach_marks=arrays["reach"][::_MARK].copy())
    at = np.empty(len(cand), dtype=np.int64)
    at[by_ts] = np.arange(len(cand))
    for name, (a, b) in (("enqueue", tt.enqueue), ("complete", tt.complete)):
        pa, pb = _position(cand, a), _position(cand, b)
        keep = (pa >= 0) & (pb >= 0)
        arrays[name] = np.stack([at[pa[keep]], at[pb[keep]]]).astype(np.int64)
    arrays.update(_records(table.collectives, cand, at))
    busy = np.flatnonzero((classes != EventClass.ANNOTATION) & (table.dur > 0))
    arrays.update(_flat_intervals(table, busy, table.device[busy].astype(np.int64), "busy_"))
    ops = tt.host_ops
    arrays.update(_flat_intervals(table, ops, table.device[ops].astype(np.int64) * _LANE_KEY + table.lane[ops],
                                  "lane_"))
    step, ts, end = table.step[cand], table.ts[cand], table.end[cand]
    spans = {int(s): (float(ts[step == s].min()), float(end[step == s].max())) for s in np.unique(step).tolist()}
    summary = RankSummary(rows=len(table), steps=tuple(int(s) for s in table.steps()), spans=spans,
                          span_all=(float(ts.min()), float(end.max())) if len(cand) else None,
                          instances=instances(table), workers=tuple(d.worker for d in table.devices),
                          first_ops=tt.first_op_starts())
    return RankPart(arrays, table.strings, table.devices), summary


_RECORD = "record_"  # a part's collective records: ``record_at`` (the candidate's position), then each column


def _records(records: CollectiveRecords, cand: np.ndarray, at: np.ndarray) -> dict:
    """The collective records of the candidates (``cand``: their rows, sorted; ``at``: each one's position in the
    part), as arrays: ``record_at`` (the positions, in order) and each column but the row."""
    where = _position(cand, records.row)
    keep = np.flatnonzero(where >= 0)
    keep = keep[np.argsort(at[where[keep]], kind="stable")]
    found = {_RECORD + "at": at[where[keep]].astype(np.int64)}
    found.update({_RECORD + c: getattr(records, c)[keep] for c in CollectiveRecords.COLUMNS if c != "row"})
    return found


def _picked_records(part: RankPart, picked: np.ndarray) -> CollectiveRecords:
    """The part's collective records of its candidates ``picked`` (positions, in row order), pointing at their
    rows among them."""
    a = part.arrays
    by = np.argsort(picked, kind="stable")
    where = _position(picked[by], np.asarray(a[_RECORD + "at"]))
    keep = where >= 0
    columns = {c: np.asarray(a[_RECORD + c])[keep] for c in CollectiveRecords.COLUMNS if c != "row"}
    return collective_records(row=by[where[keep]], **columns)


def _windows(summaries: Sequence[RankSummary], wanted: Sequence[int]) -> dict:
    """``table_index.dag_windows`` of the ranks merged, from their spans."""
    known = sorted({s for x in summaries for s in x.spans if s >= 0})
    result: dict = {}
    reach = -np.inf
    for s in known:
        a = min(x.spans[s][0] for x in summaries if s in x.spans)
        b = max(x.spans[s][1] for x in summaries if s in x.spans)
        result[s] = (max(a, reach) if max(a, reach) < b else a, b)
        reach = max(reach, b)
    for s in wanted:
        if s not in result:
            spans = [x.spans[s] for x in summaries if s in x.spans] if known else \
                [x.span_all for x in summaries if x.span_all is not None]
            if spans:
                result[s] = (min(a for a, _ in spans), max(b for _, b in spans))
    return result


def job_plan(summaries: Sequence[RankSummary], steps: Sequence[int] | None = None,
             dependencies: Dependencies = Dependencies()) -> JobPlan:
    """The steps to analyse (``steps``, or every step of the job), their windows and the matched collectives."""
    offsets = tuple(int(x) for x in np.cumsum([0] + [s.rows for s in summaries])[:-1])
    known = sorted({s for x in summaries for s in x.steps})
    if steps is None:
        steps = known if known else ([-1] if any(x.rows for x in summaries) else [])
    wanted = [int(s) for s in steps]
    groups: list = []
    senders: list = []
    if dependencies.match_ranks:
        per_worker: dict = {}
        for offset, summary in zip(offsets, summaries):
            for worker, found in summary.instances.items():
                per_worker[worker] = [replace(i, row=i.row + offset) for i in found]
        if len(per_worker) >= 2:
            groups, senders = matched_sends(matched_groups(per_worker)[0])
    windows = _windows(summaries, wanted)
    return JobPlan(steps=tuple(s for s in wanted if s in windows), windows=windows,
                   groups=tuple(tuple(g) for g in groups), senders=tuple(senders), offsets=offsets,
                   has_steps=bool(known))


def steps_chosen(summaries: Sequence[RankSummary], choose: Callable | None) -> list[int] | None:
    """``choose(steps)`` of the job's sorted steps; None (every step) without ``choose``."""
    if choose is None:
        return None
    return choose(sorted({s for x in summaries for s in x.steps}))


def _window_rows(part: RankPart, window: tuple[float, float], has_steps: bool) -> np.ndarray:
    """The positions of the rank's candidates that ``TableIndex.overlapping`` gives for ``window``, in row order
    (a run of positions: only the pages of the window's rows are read)."""
    a = part.arrays
    if not has_steps:
        return np.argsort(np.asarray(a["row"]), kind="stable")
    ws, we = window
    # bounds from every _MARK-th value (a search of the whole arrays would read most of their pages)
    lo = _MARK * max(min(int(np.searchsorted(a["reach_marks"], ws, side="right")),
                         int(np.searchsorted(a["ts_marks"], ws))) - 1, 0)
    hi = max(min(_MARK * int(np.searchsorted(a["ts_marks"], we, side="right")), len(a["ts"])), lo)
    ts, dur = np.asarray(a["ts"][lo:hi]), np.asarray(a["dur"][lo:hi])
    e = ts + dur
    keep = np.flatnonzero((ts <= we) & ((e > ws) | ((ts >= ws) & (dur == 0))))
    return lo + keep[np.argsort(np.asarray(a["row"][lo:hi])[keep], kind="stable")]


class JobIndex:
    """What ``TableIndex`` gives a step's DAG, for the candidates of every rank that overlap one window: a table
    of them alone, with the merged table's string and device codes and row order."""

    def __init__(self, parts: Sequence[RankPart], plan: JobPlan, window: tuple[float, float]):
        picked = [_window_rows(p, window, plan.has_steps) for p in parts]
        self.table = concat([EventTable(**{c: np.asarray(p.arrays[c][k]) for c in EventTable.COLUMNS},
                                        strings=p.strings, devices=p.devices, collectives=_picked_records(p, k))
                             for p, k in zip(parts, picked)])
        t = self.table
        self.rows = np.concatenate([offset + np.asarray(p.arrays["row"][k])
                                    for offset, p, k in zip(plan.offsets, parts, picked)])  # merged-table rows
        self.classes = np.concatenate([np.asarray(p.arrays["classes"][k]) for p, k in zip(parts, picked)])
        self.apart = np.flatnonzero(np.concatenate([np.asarray(p.arrays["apart"][k]) for p, k in zip(parts, picked)]))
        self.cand = np.arange(len(t))
        self._owner = {}
        threads = set()
        for r, p in enumerate(parts):
            flags = np.asarray(p.arrays["is_thread"])
            for code, device in enumerate(p.devices):
                self._owner.setdefault(device, (r, code))
                if flags[code]:
                    threads.add(device)
        self.parts = parts
        self.is_thread = np.array([d in threads for d in t.devices] or [False], dtype=bool)
        self.is_gpu = np.array([d.kind == "gpu" for d in t.devices] or [False], dtype=bool)
        self.pcorr = t.process_correlation()
        self.rank_rows = [list(found[found >= 0]) for found in
                          (_position(self.rows, np.array(g, dtype=np.int64)) for g in plan.groups)]
        senders = _position(self.rows, np.array(plan.senders, dtype=np.int64))
        self.senders = senders[senders >= 0].tolist()
        first = np.cumsum([0] + [len(k) for k in picked])
        self.enqueue, self.complete = (self._pairs(name, picked, first) for name in ("enqueue", "complete"))
        self.lane_max = int(t.lane.max(initial=0)) + 1
        self.has_steps = plan.has_steps
        self._strings: dict[int, dict[str, int]] = {}

    def _pairs(self, name: str, picked, first) -> tuple[np.ndarray, np.ndarray]:
        """A rank's gloo pairs with both ends in the window, as rows of this table."""
        us, vs = [], []
        for p, k, base in zip(self.parts, picked, first.tolist()):
            pairs = np.asarray(p.arrays[name])
            by = np.argsort(k, kind="stable")
            u, v = _position(k[by], pairs[0]), _position(k[by], pairs[1])
            keep = (u >= 0) & (v >= 0)
            us.append(base + by[u[keep]])
            vs.append(base + by[v[keep]])
        return np.concatenate(us).astype(np.int64), np.concatenate(vs).astype(np.int64)

    def overlapping(self, start: float, end: float) -> np.ndarray:
        return self.cand  # the table holds the window's candidates only

    def busy(self, device: int) -> Intervals:
        r, code = self._owner[self.table.devices[device]]
        return _of_flat(self.parts[r].arrays, "busy_", code)

    def lane_ops(self, device: int, lane: int) -> Intervals:
        r, code = self._owner[self.table.devices[device]]
        part = self.parts[r]
        if r not in self._strings:
            self._strings[r] = {s: k for k, s in enumerate(part.strings)}
        local = self._strings[r].get(self.table.strings[lane], -1)
        return _of_flat(part.arrays, "lane_", code * _LANE_KEY + local)


def job_step_path(parts: Sequence[RankPart], plan: JobPlan, step: int, dependencies: Dependencies = Dependencies(),
                  what_if_ops: int = WHAT_IF_OPS) -> StepPath | None:
    """One step's path over the ranks' ``parts``, as ``analyze_critical_path`` of the ranks merged finds it (its
    links' ``event``: rows of that merged table)."""
    index = JobIndex(parts, plan, plan.windows[step])
    path = step_path(index, step, plan.windows[step], dependencies, what_if_ops)
    if path is not None:
        for link in path.links:
            if link.event >= 0:
                link.event = int(index.rows[link.event])
    return path


def job_report(paths: Sequence[StepPath | None], workers: Sequence[str],
               dependencies: Dependencies = Dependencies()) -> CriticalPathReport:
    """The job's report of its steps' paths (``workers``: the ranks' device workers)."""
    return CriticalPathReport(steps=tuple(p for p in paths if p is not None), lacks=tuple(dependencies.lacks),
                              workers=tuple(sorted(set(workers) - {""})))
