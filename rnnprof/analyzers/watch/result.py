"""What the watch's analyses give: an anomaly raised on the step series, the live view of the job, a capture
window's verdict."""

from __future__ import annotations

from dataclasses import dataclass, field

REGRESSION = "regression"  # the step time rose and stayed up
STRAGGLER = "straggler"  # a rank the others wait for, more than before
INPUT_STALL = "input_stall"  # the wait for the next batch rose
MEMORY_GROWTH = "memory_growth"  # memory rises step after step
SPIKE = "spike"  # one step far slower than any before it
REQUESTED = "requested"  # not an anomaly: a window asked for (a signal, another terminal)
BASELINE = "baseline"  # not an anomaly: the window captured early, that later windows are compared with
KINDS = (REGRESSION, STRAGGLER, INPUT_STALL, MEMORY_GROWTH, SPIKE)
# An incident's anomalies by what they say of its cause: a rank's own stall or growth before what follows
# from it (the others waiting for that rank, the job's step time).
CAUSE_ORDER = (INPUT_STALL, STRAGGLER, MEMORY_GROWTH, REGRESSION, SPIKE, REQUESTED, BASELINE)


@dataclass(frozen=True)
class Anomaly:
    """One anomaly: ``kind`` on ``ranks`` at job step ``step`` (the step whose data made it significant),
    ``onset`` the first step of the change where it can be told. ``value`` and ``baseline`` are the recent and
    the baseline medians of what the rule judges (seconds; bytes for memory); ``cost`` what it costs: seconds a
    step (for a straggler, how long the others wait for it), bytes a step for memory growth. ``judged``: the
    ``noise.Significance`` as a dict (difference, spread, jitter, threshold: ms, bytes for memory growth)."""

    kind: str
    step: int
    ranks: tuple[int, ...]
    value: float
    baseline: float
    cost: float
    judged: dict = field(default_factory=dict)
    onset: int | None = None
    source: str = ""  # what the rule read: "collective waits", "the ranks' own phases", "process_rss", ...
    waited: float | None = None  # of the cost, how much more a step the rank waited for a core (the machine's)

    @property
    def machines(self) -> bool:
        """Half of its cost or more was a rank's added wait for a core: the machine's load more than the job's."""
        return self.waited is not None and self.cost > 0 and self.waited >= self.cost / 2

    def as_dict(self) -> dict:
        return {"kind": self.kind, "step": int(self.step), "ranks": [int(r) for r in self.ranks],
                "value": float(self.value), "baseline": float(self.baseline), "cost": float(self.cost),
                "judged": {k: _plain(v) for k, v in self.judged.items()},
                "onset": None if self.onset is None else int(self.onset), "source": self.source,
                "waited": None if self.waited is None else float(self.waited)}

    @staticmethod
    def from_dict(data: dict) -> "Anomaly":
        return Anomaly(kind=str(data.get("kind", "")), step=int(data.get("step", 0)),
                       ranks=tuple(int(r) for r in data.get("ranks") or ()), value=float(data.get("value") or 0.0),
                       baseline=float(data.get("baseline") or 0.0), cost=float(data.get("cost") or 0.0),
                       judged=dict(data.get("judged") or {}), onset=data.get("onset"),
                       source=str(data.get("source") or ""), waited=data.get("waited"))


def _plain(value):
    """numpy's numbers as Python's (a float64 is a float, but JSON encoders want the builtin)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, float):
        return float(value)
    if isinstance(value, int):
        return int(value)
    return value


def by_cause(anomalies) -> list[Anomaly]:
    """``anomalies`` in ``CAUSE_ORDER``, the costliest first within a kind."""
    order = {kind: k for k, kind in enumerate(CAUSE_ORDER)}
    return sorted(anomalies, key=lambda a: (order.get(a.kind, len(order)), -abs(a.cost)))


@dataclass(frozen=True)
class RankView:
    """One rank in the live view: its last steps' medians (seconds, bytes), its skew against the median rank
    (its own time, collective waits left out, less the median rank's) and its last step."""

    rank: int
    step: int
    step_s: float
    data_s: float
    comm_wait_s: float
    skew_s: float
    memory: float
    stopped: str = ""  # why the rank's series stopped ("" while it goes on)


@dataclass(frozen=True)
class JobView:
    """The job as the live view shows it: each rank, the steps every rank has finished, the job's throughput
    (steps a second over its last steps) and the last anomaly raised."""

    step: int
    ranks: tuple[RankView, ...]
    steps_per_s: float
    last: Anomaly | None = None
    memory_source: str = ""


@dataclass(frozen=True)
class FindingSummary:
    """An audit finding of a window, as the verdict keeps it."""

    rule: str
    title: str
    severity: str
    rank: str | None
    saving_s: float | None

    def as_dict(self) -> dict:
        return {"rule": self.rule, "title": self.title, "severity": self.severity, "rank": self.rank,
                "saving_s": self.saving_s}


@dataclass(frozen=True)
class WindowVerdict:
    """What a capture window says: the anomaly that explains the incident best (``headline``, with the others
    raised with it), the window's audit (its findings, costliest first; ``agrees``: a finding names the same rank
    as the headline), the step time of the window and of the baseline window (seconds, by their traces, as
    ``diff`` measures them), the operators that grew most against the baseline window, and what could not be
    analysed."""

    window: str
    headline: Anomaly | None
    anomalies: tuple[Anomaly, ...]
    findings: tuple[FindingSummary, ...] = ()
    agrees: FindingSummary | None = None
    step_s: float | None = None
    baseline_step_s: float | None = None
    baseline_window: str | None = None
    grew: tuple[tuple[str, float], ...] = ()  # the operators that take more time a step than in the baseline
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {"window": self.window, "headline": self.headline.as_dict() if self.headline else None,
                "anomalies": [a.as_dict() for a in self.anomalies],
                "findings": [f.as_dict() for f in self.findings],
                "agrees": self.agrees.as_dict() if self.agrees else None, "step_s": self.step_s,
                "baseline_step_s": self.baseline_step_s, "baseline_window": self.baseline_window,
                "grew": [[name, seconds] for name, seconds in self.grew], "notes": list(self.notes)}
