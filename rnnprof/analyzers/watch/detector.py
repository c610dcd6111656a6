"""The watch's detector: each rank's step series fed as it comes, the rules (``rules``) run on every step that
every live rank has finished, the anomalies raised once each, and the live view of the job.

``feed(series)`` takes what a rank added (``events.series.RankSeries``); ``advance()`` judges the job's steps
that every rank still writing has finished, in order, and returns the anomalies raised on them: a kind raised on
several ranks at one step is one anomaly naming them. A rank's anomaly of a kind stays raised (it is not raised
again) until its rule has been quiet for ``RECENT`` steps (``MEMORY_WINDOW`` for memory); a shift (a regression, a
straggler, an input stall) is raised once it has stood out ``CONFIRM`` steps in a row; a spike a rank spent half of
waiting for a core is the machine's (``machine_spikes``), not raised. ``stop(rank, why)``: a
rank whose series has stopped (it died, its disk is full) is no longer waited for. Only the last ``KEEP`` steps
of each rank are kept. A baseline's median and jitter are computed again every ``REFRESH`` steps; each step's
recent median is checked against them first, and judged in full (``noise.significance``) only when it stands out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rnnprof.analyzers.noise import K
from rnnprof.events.series import MEMORY_RSS, RankSeries

from . import rules
from .result import (INPUT_STALL, MEMORY_GROWTH, REGRESSION, SPIKE, STRAGGLER, Anomaly, JobView, RankView)

KEEP = 4096  # steps kept of each rank (the whole series is in the run directory)
REFRESH = 2 * rules.RECENT  # steps between two computations of a baseline's median and jitter
MEMORY_EVERY = rules.RECENT // 2  # steps between two judgements of memory growth
CONFIRM = rules.RECENT // 2  # steps in a row a shift must stand out before it is raised
SHIFTS = (REGRESSION, INPUT_STALL, STRAGGLER)
SPIKE_CONFIRM = rules.RECENT // 2  # steps after a spike that must be back near the baseline (else: a regression)
STILL = object()  # a raised anomaly whose steps are still at its new level: no new anomaly, not quiet
COLLECTIVE_WAITS, OWN_PHASES = "collective waits", "the ranks' own phases"  # what a lateness was measured by
_STORED = ("step", "end", "step_s", "data_s", "forward_s", "optimizer_s", "comm_wait_s", "runqueue_s", "memory",
           "late", "memory_less_windows")


@dataclass
class _Base:
    """A column's baseline at the time it was computed: where it ended, its median, its jitter and the largest
    sustained excursion of the history before it (``rules.sustained``)."""

    end: int
    median: float
    jitter: float
    sustained: float = 0.0


class _Store:
    """One rank's judged steps (no flag), the last ``KEEP``, a growing array per stored column; ``late`` is
    filled by the detector (the rank's lateness, ``rules.rank_lateness``); ``memory_less_windows``: the memory less
    every change the rank's flagged steps made (a window's profiled steps and its export keep the profiler's and
    the trace's own memory, not the job's), which the memory rule judges."""

    def __init__(self):
        self.data = {name: np.full(256, np.nan) for name in _STORED}
        self.size = 0
        self.last_step = -1  # the last step the rank wrote, judged or not
        self.bases: dict[str, _Base] = {}
        self.excursions: list[float] = []  # each judged step's excursion above its baseline (spike history)
        self.last_memory = float("nan")  # the memory at the last step written, judged or not
        self.flagged_memory = 0.0  # the memory the flagged steps added, summed

    def add(self, series: RankSeries) -> None:
        steps = series["step"]
        if len(steps):
            self.last_step = int(steps[-1])
        keep = series.judged()
        less_windows = self._less_windows(series["memory"], keep)
        n = int(keep.sum())
        if not n:
            return
        if self.size + n > len(self.data["step"]):
            self._grow(self.size + n)
        for name in _STORED:
            if name == "memory_less_windows":
                self.data[name][self.size:self.size + n] = less_windows[keep]
            elif name != "late":
                self.data[name][self.size:self.size + n] = series[name][keep]
        self.size += n

    def _less_windows(self, memory: np.ndarray, judged: np.ndarray) -> np.ndarray:
        """``memory`` less what the flagged steps added, these and every one before them (``flagged_memory``)."""
        changes = np.diff(np.concatenate([[self.last_memory], memory]))
        added = np.cumsum(np.where(~judged & np.isfinite(changes), changes, 0.0))
        if len(memory):
            self.flagged_memory += float(added[-1])
            self.last_memory = float(memory[-1]) if np.isfinite(memory[-1]) else self.last_memory
            return memory - (self.flagged_memory - float(added[-1]) + added)
        return memory

    def _grow(self, need: int) -> None:
        drop = self.size - KEEP if need > 2 * KEEP else 0  # the oldest go: what the rules read is far shorter
        capacity = max(need - drop, 2 * len(self.data["step"]) if not drop else len(self.data["step"]))
        for name in _STORED:
            grown = np.full(capacity, np.nan)
            grown[:self.size - drop] = self.data[name][drop:self.size]
            self.data[name] = grown
        self.size -= drop
        for base in self.bases.values():
            base.end -= drop

    def upto(self, step: int) -> int:
        """How many stored steps are at or before ``step``."""
        return int(np.searchsorted(self.data["step"][:self.size], step, side="right"))

    def index_of(self, step: int) -> int | None:
        """The stored index of ``step``, None where it is not a judged step of this rank."""
        i = int(np.searchsorted(self.data["step"][:self.size], step))
        return i if i < self.size and self.data["step"][i] == step else None

    def base(self, name: str, end: int, key: str = "") -> _Base | None:
        """The baseline of column ``name`` for recent steps ending at ``end`` (see ``rules``), refreshed every
        ``REFRESH`` steps (kept under ``key``, by default the column's name); None while too few steps are
        stored."""
        key = key or name
        base_end = end - rules.RECENT
        base_start = max(rules.SETTLE, base_end - rules.BASELINE)
        if base_end - base_start < rules.MIN_BASELINE:
            return None
        cached = self.bases.get(key)
        if cached is not None and abs(base_end - cached.end) < REFRESH:
            return cached
        values = self.data[name][base_start:base_end]
        if not np.isfinite(values).all():
            return None
        median = _median(values)
        history = self.data[name][max(rules.SETTLE, base_end - rules.SPIKE_HISTORY):base_end]
        self.bases[key] = _Base(base_end, median, rules.jitter(values),
                                rules.sustained(history[np.isfinite(history)], median))
        return self.bases[key]

    def window(self, name: str, end: int) -> tuple[np.ndarray, np.ndarray]:
        """(recent, baseline) of column ``name`` for recent steps ending at ``end``."""
        base_end = end - rules.RECENT
        base_start = max(rules.SETTLE, base_end - rules.BASELINE)
        column = self.data[name]
        return column[base_end:end], column[base_start:base_end]


def _median(values: np.ndarray) -> float:
    ordered = sorted(values.tolist())
    n = len(ordered)
    return ordered[n // 2] if n % 2 else 0.5 * (ordered[n // 2 - 1] + ordered[n // 2])


@dataclass
class _Raised:
    """A raised anomaly of one rank: the level it rose from and to (a shift: it stays raised while the recent steps
    are above the middle of the two), and the steps its rule has been quiet since."""

    level: float = 0.0
    value: float = 0.0
    quiet: int = 0


@dataclass
class Detector:
    """See the module. ``gpu``: the ranks are GPU ranks (the floor between processes is ``noise``'s GPU one)."""

    gpu: bool = False
    memory_source: str = MEMORY_RSS
    stores: dict[int, _Store] = field(default_factory=dict)
    stopped: dict[int, str] = field(default_factory=dict)
    judged_step: int = -1  # the last job step judged
    last: Anomaly | None = None
    unmeasured: dict[str, str] = field(default_factory=dict)  # what some rank could not measure, and why
    machine_spikes: list[Anomaly] = field(default_factory=list)  # spikes spent waiting for a core, to be said
    _late_source: str = ""
    _pending: dict[tuple[str, int], int] = field(default_factory=dict)  # steps a shift has stood out in a row
    _raised: dict[tuple[str, int], _Raised] = field(default_factory=dict)

    def feed(self, series: RankSeries) -> None:
        self.stores.setdefault(series.rank, _Store()).add(series)
        self.memory_source = series.memory_source
        for name, why in series.unmeasured.items():
            self.unmeasured.setdefault(name, why)

    def stop(self, rank: int, why: str) -> None:
        self.stopped.setdefault(rank, why)

    def live(self) -> list[int]:
        return sorted(r for r in self.stores if r not in self.stopped)

    def job_step(self) -> int:
        """The last step every live rank has written (every rank has stopped: the last any wrote)."""
        live = self.live()
        if not live:
            return max((s.last_step for s in self.stores.values()), default=self.judged_step)
        return min(self.stores[r].last_step for r in live)

    def advance(self) -> list[Anomaly]:
        """Judge every job step not judged yet (see the module); the anomalies raised, in order."""
        raised: list[Anomaly] = []
        ranks = self.live() or sorted(self.stores)  # every rank stopped: what they wrote is judged to its end
        for step in range(self.judged_step + 1, self.job_step() + 1):
            raised += self._judge_step(step, ranks)
            self.judged_step = step
        if raised:
            self.last = raised[-1]
        return raised

    # -- one job step -----------------------------------------------------------------------------------

    def _judge_step(self, step: int, ranks: list[int]) -> list[Anomaly]:
        ends = {}
        for rank in ranks:
            i = self.stores[rank].index_of(step)
            if i is not None:
                ends[rank] = i + 1
        found: dict[str, list[tuple]] = {}
        if len(ends) >= 2:
            self._fill_lateness(ends)
        for rank, end in ends.items():
            for kind, hit in self._rank_rules(rank, end).items():
                found.setdefault(kind, []).append((rank, *hit))
        judged = {rank: (None if end % MEMORY_EVERY == 0 else MEMORY_GROWTH) for rank, end in ends.items()}
        return self._raise(judged, found)

    def _raise(self, judged: dict[int, str | None], found: dict) -> list[Anomaly]:
        """The anomalies of this step not raised before; the others' quiet counts (``judged``: rank -> the kind
        its rules did not judge at this step)."""
        new = []
        for kind, hits in found.items():
            fresh = [h for h in hits if (kind, h[0]) not in self._raised and h[1] is not STILL
                     and self._confirmed(kind, h[0])]
            for h in fresh:
                self._raised[(kind, h[0])] = _Raised(level=h[4], value=h[3])
            for h in hits:
                if (kind, h[0]) in self._raised:
                    self._raised[(kind, h[0])].quiet = 0
            if fresh:
                anomaly = _anomaly(kind, fresh)
                if kind == SPIKE and anomaly.machines:  # one step the machine took from the job: said, not raised
                    self.machine_spikes.append(anomaly)
                else:
                    new.append(anomaly)
        for key in list(self._pending):  # a shift not seen at this step starts its count again
            if not any(h[0] == key[1] for h in found.get(key[0], ())):
                del self._pending[key]
        for key in list(self._raised):
            kind, rank = key
            if rank in judged and judged[rank] != kind and not any(h[0] == rank for h in found.get(kind, ())):
                self._raised[key].quiet += 1
                if self._raised[key].quiet >= (rules.MEMORY_WINDOW if kind == MEMORY_GROWTH else rules.RECENT):
                    del self._raised[key]
        return new

    def _confirmed(self, kind: str, rank: int) -> bool:
        """A shift is raised once it has stood out ``CONFIRM`` steps in a row (a burst at the threshold does not);
        the others at once."""
        if kind not in SHIFTS:
            return True
        self._pending[(kind, rank)] = self._pending.get((kind, rank), 0) + 1
        return self._pending[(kind, rank)] >= CONFIRM

    def _rank_rules(self, rank: int, end: int) -> dict:
        """The per-rank rules on the rank's stored steps up to ``end``: kind -> (step, significance, value,
        baseline, onset, source[, cost])."""
        store, hits = self.stores[rank], {}
        steps = store.data["step"]
        for kind, column, jitter_of, floor in ((REGRESSION, "step_s", None, 0.0),
                                               (INPUT_STALL, "data_s", "step_s", 0.0),
                                               (STRAGGLER, "late", None, rules.rank_floor_s(self.gpu))):
            base = store.base(column, end)
            scale = store.base(jitter_of, end) if jitter_of else base
            if base is None or scale is None:
                continue
            recent = store.data[column][end - rules.RECENT:end]
            raised = self._raised.get((kind, rank))
            if raised is not None:  # it stays raised while the steps stay above the middle of its two levels
                if _median(recent) > (raised.level + raised.value) / 2:
                    hits[kind] = (int(steps[end - 1]), STILL)
                continue
            least = max(floor, base.sustained)
            if _median(recent) - base.median <= max(K * scale.jitter, least):
                continue  # the common case, decided without the full judgement
            now, baseline = store.window(column, end)
            verdict = rules.shift(now, baseline, store.window(jitter_of, end)[1] if jitter_of else None, least)
            if verdict.significant and verdict.difference_us > 0:
                onset = _onset(now, base.median + max(K * scale.jitter, least))
                value = _median(now[onset:] if len(now) - onset >= 3 else now)  # since the change: its cost now
                if value <= base.median:
                    continue
                hits[kind] = (int(steps[end - 1]), verdict, value, base.median,
                              int(steps[end - rules.RECENT + onset]), self._source(kind), value - base.median,
                              _waited(store, end - rules.RECENT + onset, end))
        self._spike(hits, store, end)
        if end % MEMORY_EVERY == 0:
            self._memory(hits, store, end)
        return hits

    def _source(self, kind: str) -> str:
        return self._late_source if kind == STRAGGLER else ""

    def _spike(self, hits: dict, store: _Store, end: int) -> None:
        """A spike ``SPIKE_CONFIRM`` steps back, confirmed by the steps after it (back near the baseline)."""
        at = end - 1 - SPIKE_CONFIRM
        base = store.base("step_s", at + 1, key="spike")
        if base is None:
            return
        value = float(store.data["step_s"][at])
        store.excursions.append(max(0.0, value - base.median))
        if value - base.median <= rules.SPIKE_K * base.jitter:
            return
        _, baseline = store.window("step_s", at + 1)
        history = np.asarray(store.excursions[-rules.SPIKE_HISTORY - 1:-1])
        verdict = rules.spike(value, baseline, history)
        after = store.data["step_s"][at + 1:end]
        if verdict is not None and _median(after) - base.median < verdict.threshold_us / rules.US / 2:
            hits[SPIKE] = (int(store.data["step"][at]), verdict, value, base.median, int(store.data["step"][at]), "",
                           value - base.median, _waited(store, at, at + 1))

    def _memory(self, hits: dict, store: _Store, end: int) -> None:
        measured = store.data["memory"][rules.SETTLE:end]
        memory = store.data["memory_less_windows"][rules.SETTLE:end]  # judged without the windows' own memory
        if len(memory) < rules.MEMORY_WINDOW + rules.MIN_BASELINE or not np.isfinite(memory).all():
            return
        grows = rules.memory_growth(memory[rules.MIN_BASELINE:])
        if grows is None:
            return
        verdict, span = grows
        first = max(0, len(memory) - 2 * span)
        since = memory[first:]
        onset = rules.growth_onset(since)
        steps = store.data["step"][rules.SETTLE:end]
        level = float(np.median(measured[first:first + onset])) if onset else float(measured[first])
        hits[MEMORY_GROWTH] = (int(steps[-1]), verdict, float(measured[-1]), level, int(steps[first + onset]),
                               self.memory_source, rules.growth_rate(since[onset:]))

    def _fill_lateness(self, ends: dict[int, int]) -> None:
        """Each judged rank's lateness at this step (``rules.rank_lateness``): by its collective waits, or where a rank
        measured none, by its own phases."""
        ranks = list(ends)
        waits = np.array([[self.stores[r].data["comm_wait_s"][ends[r] - 1]] for r in ranks])
        own = not np.isfinite(waits).all()
        if own:
            waits = -np.array([[sum(self.stores[r].data[c][ends[r] - 1] for c in ("data_s", "forward_s",
                                                                                   "optimizer_s"))] for r in ranks])
        late = rules.rank_lateness(waits)
        self._late_source = OWN_PHASES if own else COLLECTIVE_WAITS
        for k, rank in enumerate(ranks):
            self.stores[rank].data["late"][ends[rank] - 1] = late[k, 0]

    # -- the live view ----------------------------------------------------------------------------------

    def view(self, recent: int = rules.RECENT, step: int | None = None) -> JobView:
        """The job now (see ``JobView``), from each rank's last ``recent`` judged steps; or at job step ``step``, from
        each rank's last judged step up to it."""
        ranks = sorted(self.stores)
        rows = {r: _rank_medians(self.stores[r], 1 if step is not None else recent,
                                 None if step is None else self.stores[r].upto(step)) for r in ranks}
        own = [rows[r]["step_s"] - np.nan_to_num(rows[r]["comm_wait_s"]) for r in ranks if r not in self.stopped]
        middle = float(np.median(own)) if own else 0.0
        views = tuple(RankView(rank=r, step=self.stores[r].last_step, step_s=rows[r]["step_s"],
                               data_s=rows[r]["data_s"], comm_wait_s=rows[r]["comm_wait_s"],
                               skew_s=float(rows[r]["step_s"] - np.nan_to_num(rows[r]["comm_wait_s"]) - middle),
                               memory=rows[r]["memory"], stopped=self.stopped.get(r, "")) for r in ranks)
        return JobView(step=self.job_step() if step is None else step, ranks=views, steps_per_s=self._throughput(),
                       last=self.last, memory_source=self.memory_source)

    def _throughput(self, steps: int = 50) -> float:
        """Steps a second over the last ``steps`` of the slowest live rank, by its steps' end times."""
        rates = []
        for r in self.live():
            store = self.stores[r]
            n = min(steps, store.size)
            if n >= 2:
                ends = store.data["end"][store.size - n:store.size]
                numbers = store.data["step"][store.size - n:store.size]
                if ends[-1] > ends[0]:
                    rates.append((numbers[-1] - numbers[0]) / (ends[-1] - ends[0]))
        return float(min(rates)) if rates else 0.0


def _onset(recent: np.ndarray, level: float) -> int:
    """The index of the first of ``recent``'s last run of values above ``level``."""
    above = recent > level
    k = len(recent)
    while k > 0 and above[k - 1]:
        k -= 1
    return min(k, len(recent) - 1)


def _rank_medians(store: _Store, recent: int, end: int | None = None) -> dict[str, float]:
    end = store.size if end is None else end
    n = min(recent, end)
    out = {}
    for name in _STORED:
        values = store.data[name][end - n:end]
        out[name] = float(np.median(values[np.isfinite(values)])) if n and np.isfinite(values).any() else float("nan")
    return out


def _waited(store: _Store, start: int, end: int) -> float | None:
    """How much more the rank's training thread waited for a core a step over ``start`` .. ``end`` than in its
    baseline (seconds), None where it is not measured."""
    base = store.base("runqueue_s", start)
    recent = store.data["runqueue_s"][start:end]
    if base is None or not len(recent) or not np.isfinite(recent).all():
        return None
    return max(0.0, _median(recent) - base.median)


def _anomaly(kind: str, hits: list[tuple]) -> Anomaly:
    """One anomaly of ``kind`` from the ranks' hits (rank, step, significance, value, baseline, onset, source
    [, cost[, waited]]): the costliest rank's figures, every rank named."""
    hits = sorted(hits, key=lambda h: -h[2].difference_us)
    rank, step, verdict, value, baseline, onset, source = hits[0][:7]
    cost = hits[0][7] if len(hits[0]) > 7 else verdict.difference_us / rules.US
    waits = [h[8] for h in hits if len(h) > 8 and h[8] is not None]
    waited = max(waits) if waits else None  # the named rank that waited most for a core
    return Anomaly(kind=kind, step=step, ranks=tuple(sorted(h[0] for h in hits)), value=value, baseline=baseline,
                   cost=cost, judged=verdict.as_dict("bytes" if kind == MEMORY_GROWTH else "ms"), onset=onset, source=source, waited=waited)
