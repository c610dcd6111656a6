"""A watched job summed up for ``rnnprof report``: each rank's steps split into their parts and its memory, the
series thinned to at most ``MAX_POINTS`` points a rank (each point the median of its bucket of steps, so that a
million steps still draw), and the anomalies with their windows and verdicts, in the order they came."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rnnprof.events.series import PARTS, RankSeries

from .result import Anomaly

MAX_POINTS = 1000
SPLIT = (*PARTS, "other_s")  # a step's parts, what is left of it last


@dataclass(frozen=True)
class WatchedRank:
    """One rank: its steps, the median step time and of each part (seconds; NaN where not measured), its collective
    wait, and its memory at the first and last step and at its highest (bytes)."""

    rank: int
    steps: int
    step_s: float
    parts: dict[str, float]
    comm_wait_s: float
    memory_first: float
    memory_last: float
    memory_max: float
    profiled: int  # steps run under the profiler (windows) or the export of their traces
    stopped: str = ""


@dataclass(frozen=True)
class Point:
    """A bucket of a rank's steps: its first step, and the median of each column over its judged steps."""

    rank: int
    step: int
    step_s: float
    parts: dict[str, float]
    comm_wait_s: float
    memory: float


@dataclass(frozen=True)
class WatchedWindow:
    name: str
    reason: str
    first_step: int
    steps: int
    verdict: str = ""


@dataclass(frozen=True)
class WatchSummary:
    ranks: tuple[WatchedRank, ...]
    points: tuple[Point, ...]
    anomalies: tuple[tuple[Anomaly, str | None], ...]  # each anomaly and the window it opened or joined
    windows: tuple[WatchedWindow, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    memory_source: str = ""
    machine: tuple[Anomaly, ...] = ()  # steps the machine took from the job (a rank waited for a core): no window
    data_source: str = ""  # what the data wait is (``events.series.DATA_LOADER`` or ``DATA_BEFORE_FORWARD``)


def _median(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(np.median(finite)) if len(finite) else float("nan")


def rank_summary(series: RankSeries, stopped: str = "") -> WatchedRank:
    judged = series.judged()
    memory = series["memory"]
    finite = memory[np.isfinite(memory)]
    return WatchedRank(rank=series.rank, steps=len(series), step_s=_median(series["step_s"][judged]),
                       parts={p: _median(series[p][judged]) for p in SPLIT},
                       comm_wait_s=_median(series["comm_wait_s"][judged]),
                       memory_first=float(finite[0]) if len(finite) else float("nan"),
                       memory_last=float(finite[-1]) if len(finite) else float("nan"),
                       memory_max=float(finite.max()) if len(finite) else float("nan"),
                       profiled=int((~judged).sum()), stopped=stopped)


def thinned(series: RankSeries, max_points: int = MAX_POINTS) -> list[Point]:
    """The rank's series from its step 1 (its step 0 holds the process's start: imports, the model built) in at
    most ``max_points`` buckets of consecutive steps (every step where it has fewer)."""
    n = len(series)
    if n < 2:
        return []
    size = max(1, -(-(n - 1) // max_points))
    judged = series.judged()
    points = []
    for start in range(1, n, size):
        keep = slice(start, start + size)
        mask = judged[keep]
        take = (lambda name: series[name][keep][mask]) if mask.any() else (lambda name: series[name][keep])
        points.append(Point(rank=series.rank, step=int(series["step"][start]), step_s=_median(take("step_s")),
                            parts={p: _median(take(p)) for p in SPLIT}, comm_wait_s=_median(take("comm_wait_s")),
                            memory=_median(series["memory"][keep])))
    return points


def watch_summary(series: dict[int, RankSeries], lines: list[dict], manifest_watch: dict | None = None) -> WatchSummary:
    """The job from its ranks' series, its ``anomalies.jsonl`` records (``lines``) and the manifest's ``watch``
    object (its windows and the ranks that stopped)."""
    watch = manifest_watch or {}
    stopped = watch.get("stopped") or {}
    ranks = tuple(rank_summary(s, str(stopped.get(str(r), "")) if stopped.get(str(r)) != "ended" else "")
                  for r, s in sorted(series.items()))
    points = tuple(p for _, s in sorted(series.items()) for p in thinned(s))
    anomalies = tuple((Anomaly.from_dict(line["anomaly"]), line.get("window")) for line in lines if "anomaly" in line)
    verdicts = {line["verdict"].get("window"): line["verdict"].get("text", "") for line in lines
                if isinstance(line.get("verdict"), dict)}
    windows = tuple(WatchedWindow(name=w["name"], reason=w.get("reason", ""), first_step=int(w["first_step"]),
                                  steps=int(w["steps"]), verdict=verdicts.get(w["name"]) or w.get("verdict") or "")
                    for w in watch.get("windows") or [] if "name" in w)
    notes = tuple(line["note"] for line in lines if "note" in line)
    source = next((s.memory_source for s in series.values()), "")
    data = next((s.data_source for s in series.values()), "")
    machine = tuple(Anomaly.from_dict(line["machine"]) for line in lines if "machine" in line)
    return WatchSummary(ranks=ranks, points=points, anomalies=anomalies, windows=windows, notes=notes,
                        memory_source=source, machine=machine, data_source=data)
