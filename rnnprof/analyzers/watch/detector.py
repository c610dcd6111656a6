"""The watch's detector: each rank's step series fed as it comes, the rules (``rules``) run on every step that
every live rank has finished, the anomalies raised once each, and the live view of the job.

``feed(series)`` takes what a rank added (``events.series.RankSeries``); ``advance()`` judges the job's steps
that every rank still writing has finished, in order, and returns the anomalies raised on them: a kind raised on
several ranks at one step is one anomaly naming them. A rank's anomaly of a kind stays raised (it is not raised
again) until the rule has been quiet for ``RECENT`` steps. ``stop(rank, why)``: a rank whose series has stopped
(it died, its disk is full) is no longer waited for. Only the last ``KEEP`` steps of each rank are kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rnnprof.analyzers.noise import Significance
from rnnprof.events.series import COLUMNS, MEMORY_RSS, RankSeries

from . import rules
from .result import (INPUT_STALL, MEMORY_GROWTH, REGRESSION, SPIKE, STRAGGLER, Anomaly, JobView, RankView)

KEEP = 4096  # steps kept of each rank (the whole series is in the run directory)
_STORED = ("step", "end", "step_s", "data_s", "forward_s", "optimizer_s", "comm_wait_s", "memory")


class _Store:
    """One rank's judged steps (no flag), the last ``KEEP``, a growing array per stored column."""

    def __init__(self):
        self.data = {name: np.zeros(256) for name in _STORED}
        self.size = 0
        self.last_step = -1  # the last step the rank wrote, judged or not
        self.seen = 0  # steps written, judged or not
        self.excursions: list[float] = []  # each judged step's excursion above its baseline (spike history)

    def add(self, series: RankSeries) -> None:
        keep = series.judged()
        steps = series["step"]
        if len(steps):
            self.last_step = int(steps[-1])
            self.seen += len(steps)
        n = int(keep.sum())
        if not n:
            return
        if self.size + n > len(self.data["step"]):
            self._grow(self.size + n)
        for name in _STORED:
            self.data[name][self.size:self.size + n] = series[name][keep]
        self.size += n

    def _grow(self, need: int) -> None:
        if need > KEEP * 2:  # drop the oldest: what the rules read is far shorter
            drop = self.size - KEEP
            for name in _STORED:
                self.data[name][:self.size - drop] = self.data[name][drop:self.size]
            self.size -= drop
            need -= drop
        capacity = max(need, 2 * len(self.data["step"]))
        for name in _STORED:
            grown = np.zeros(capacity)
            grown[:self.size] = self.data[name][:self.size]
            self.data[name] = grown

    def upto(self, step: int) -> int:
        """How many stored steps are at or before ``step``."""
        return int(np.searchsorted(self.data["step"][:self.size], step, side="right"))

    def column(self, name: str, end: int) -> np.ndarray:
        return self.data[name][:end]


@dataclass
class _Raised:
    step: int
    quiet: int = 0  # steps the rule has been quiet since


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
        """The last step every live rank has written."""
        live = self.live()
        return min(self.stores[r].last_step for r in live) if live else self.judged_step

    def advance(self) -> list[Anomaly]:
        """Judge every job step not judged yet (see the module); the anomalies raised, in order."""
        raised: list[Anomaly] = []
        ranks = self.live()
        for step in range(self.judged_step + 1, self.job_step() + 1):
            raised += self._judge_step(step, ranks)
            self.judged_step = step
        if raised:
            self.last = raised[-1]
        return raised

    # -- one job step -----------------------------------------------------------------------------------

    def _judge_step(self, step: int, ranks: list[int]) -> list[Anomaly]:
        found: dict[str, list[tuple[int, Significance, float, float, int | None, str]]] = {}
        ends = {r: self.stores[r].upto(step) for r in ranks}
        judged = [r for r in ranks if ends[r] and self.stores[r].data["step"][ends[r] - 1] == step]
        for rank in judged:
            for kind, hit in self._rank_rules(rank, ends[rank]).items():
                found.setdefault(kind, []).append((rank, *hit))
        if len(judged) >= 2:
            hit = self._straggler(judged, ends)
            if hit is not None:
                found.setdefault(STRAGGLER, []).append(hit)
        return self._raise(step, judged, found)

    def _raise(self, step: int, judged: list[int], found: dict) -> list[Anomaly]:
        """The anomalies of this step not raised before; the quiet count of the others."""
        new = []
        for kind, hits in found.items():
            fresh = [h for h in hits if (kind, h[0]) not in self._raised]
            for h in hits:
                self._raised[(kind, h[0])] = _Raised(self._raised.get((kind, h[0]), _Raised(step)).step)
            if fresh:
                new.append(_anomaly(kind, step, fresh))
        hit_keys = {(kind, h[0]) for kind, hits in found.items() for h in hits}
        for key in list(self._raised):
            if key[1] in judged and key not in hit_keys:
                self._raised[key].quiet += 1
                if self._raised[key].quiet >= rules.RECENT:
                    del self._raised[key]
        return new

    def _rank_rules(self, rank: int, end: int) -> dict:
        """The per-rank rules on the rank's stored steps up to ``end``: kind -> (significance, value, baseline,
        onset, source)."""
        store = self.stores[rank]
        recent_start = end - rules.RECENT
        base_start = max(rules.SETTLE, recent_start - rules.BASELINE)
        if recent_start - base_start < rules.MIN_BASELINE:
            return {}
        hits = {}
        step_s = store.column("step_s", end)
        recent, baseline = step_s[recent_start:], step_s[base_start:recent_start]
        self._check(hits, REGRESSION, rules.shift(recent, baseline), recent, baseline)
        self._spike(hits, store, step_s[-1], baseline)
        data = store.column("data_s", end)
        if np.isfinite(data[recent_start:]).all() and np.isfinite(data[base_start:recent_start]).all():
            self._check(hits, INPUT_STALL, rules.shift(data[recent_start:], data[base_start:recent_start],
                                                       jitter_of=baseline), data[recent_start:],
                        data[base_start:recent_start])
        self._memory(hits, store, end, base_start)
        return hits

    @staticmethod
    def _check(hits: dict, kind: str, verdict: Significance, recent: np.ndarray, baseline: np.ndarray) -> None:
        if verdict.significant and verdict.difference_us > 0:
            hits[kind] = (verdict, float(np.median(recent)), float(np.median(baseline)), None, "")

    def _spike(self, hits: dict, store: _Store, value: float, baseline: np.ndarray) -> None:
        verdict = rules.spike(value, baseline, np.asarray(store.excursions[-rules.SPIKE_HISTORY:]))
        store.excursions.append(max(0.0, value - float(np.median(baseline))))
        if verdict is not None:
            hits[SPIKE] = (verdict, value, float(np.median(baseline)), None, "")

    def _memory(self, hits: dict, store: _Store, end: int, base_start: int) -> None:
        memory = store.column("memory", end)
        window_start = end - rules.MEMORY_WINDOW
        if window_start - base_start < rules.MIN_BASELINE or not np.isfinite(memory[base_start:]).all():
            return
        recent, baseline = memory[window_start:], memory[base_start:window_start]
        verdict = rules.memory_growth(recent, baseline)
        if verdict is None or not verdict.significant or verdict.difference_us <= 0:
            return
        since = memory[base_start:]
        onset = rules.growth_onset(since, baseline)
        rate = rules.growth_rate(since[onset:])
        step = store.column("step", end)
        hits[MEMORY_GROWTH] = (verdict, float(recent[-1]), float(np.median(baseline)), int(step[base_start + onset]),
                               self.memory_source, rate)

    def _straggler(self, ranks: list[int], ends: dict[int, int]):
        """The rank the others wait for, beyond its baseline: (rank, significance, value, baseline, onset, source),
        or None."""
        span = min(ends[r] for r in ranks)
        if span - rules.RECENT - rules.SETTLE < rules.MIN_BASELINE:
            return None
        start = max(rules.SETTLE, span - rules.RECENT - rules.BASELINE)
        waits = np.array([self.stores[r].column("comm_wait_s", ends[r])[ends[r] - (span - start):] for r in ranks])
        source = "collective waits"
        if not np.isfinite(waits).all():
            own = [sum(self.stores[r].column(c, ends[r])[ends[r] - (span - start):]
                       for c in ("data_s", "forward_s", "optimizer_s")) for r in ranks]
            waits, source = -np.array(own), "the ranks' own phases"
            if not np.isfinite(waits).all():
                return None
        late = rules.lateness(waits)
        best = None
        for k, rank in enumerate(ranks):
            recent, baseline = late[k, -rules.RECENT:], late[k, :-rules.RECENT]
            verdict = rules.shift(recent, baseline, floor_s=rules.rank_floor_s(self.gpu))
            if verdict.significant and verdict.difference_us > 0 and (
                    best is None or verdict.difference_us > best[1].difference_us):
                best = (rank, verdict, float(np.median(recent)), float(np.median(baseline)), None, source)
        return best

    # -- the live view ----------------------------------------------------------------------------------

    def view(self, recent: int = rules.RECENT) -> JobView:
        """The job now (see ``JobView``), from each rank's last ``recent`` judged steps."""
        ranks = sorted(self.stores)
        rows = {r: _rank_medians(self.stores[r], recent) for r in ranks}
        own = [rows[r]["step_s"] - np.nan_to_num(rows[r]["comm_wait_s"]) for r in ranks if r not in self.stopped]
        middle = float(np.median(own)) if own else 0.0
        views = tuple(RankView(rank=r, step=self.stores[r].last_step, step_s=rows[r]["step_s"],
                               data_s=rows[r]["data_s"], comm_wait_s=rows[r]["comm_wait_s"],
                               skew_s=rows[r]["step_s"] - np.nan_to_num(rows[r]["comm_wait_s"]) - middle,
                               memory=rows[r]["memory"], stopped=self.stopped.get(r, "")) for r in ranks)
        return JobView(step=self.job_step(), ranks=views, steps_per_s=self._throughput(),
                       last=self.last, memory_source=self.memory_source)

    def _throughput(self, steps: int = 50) -> float:
        """Steps a second over the last ``steps`` of the slowest live rank, by its steps' end times."""
        rates = []
        for r in self.live():
            store = self.stores[r]
            n = min(steps, store.size)
            if n >= 2:
                ends, numbers = store.data["end"][store.size - n:store.size], store.data["step"][store.size - n:store.size]
                if ends[-1] > ends[0]:
                    rates.append((numbers[-1] - numbers[0]) / (ends[-1] - ends[0]))
        return float(min(rates)) if rates else 0.0


def _rank_medians(store: _Store, recent: int) -> dict[str, float]:
    n = min(recent, store.size)
    if not n:
        return {name: float("nan") for name in _STORED}
    return {name: float(np.nanmedian(store.data[name][store.size - n:store.size]))
            if np.isfinite(store.data[name][store.size - n:store.size]).any() else float("nan") for name in _STORED}


def _anomaly(kind: str, step: int, hits: list[tuple]) -> Anomaly:
    """One anomaly of ``kind`` at ``step`` from the ranks' hits (rank, significance, value, baseline, onset, source
    [, rate]): the costliest rank's figures, every rank named."""
    hits = sorted(hits, key=lambda h: -h[1].difference_us)
    rank, verdict, value, baseline, onset, source = hits[0][:6]
    cost = hits[0][6] if len(hits[0]) > 6 else verdict.difference_us / rules.US
    return Anomaly(kind=kind, step=step, ranks=tuple(sorted(h[0] for h in hits)), value=value, baseline=baseline,
                   cost=cost, judged=verdict.as_dict(), onset=onset, source=source)
