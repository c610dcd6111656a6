"""Why a device-count sweep falls short of linear speedup: each run's step time split into parts.

Input: one traced run per device count N, analysed by ``rnnprof.analyzers.comm`` (and ``idle`` where the
trace links launches), and each run's timed step time. Per traced step the device that bounds the step (the
busiest) has its time split without remainder into compute that scaled, compute that did not (left on one
device, or on every device), exposed communication, input and copies, host and launch overhead, and waiting
for stragglers. The traced steps' parts are averaged and scaled to the timed step time, so they add up to
it, and their differences from the ideal parts (weak or strong scaling against the base run) to the gap;
the lost speedup is split by the parts' gaps in proportion.

The definitions: docs/commands/explain.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rnnprof.analyzers.classify import EventClass, classify
from rnnprof.analyzers.comm_result import CommReport
from rnnprof.analyzers.noise import MIN_STEPS, Significance, robust_spread, significance
from rnnprof.events import EventTable
from rnnprof.events.names import REPLICA_PART

SCALINGS = ("weak", "strong")
# The parts of a step, in the order of the table and the stacked chart.
PARTS = ("compute_not_scaled", "exposed_communication", "waiting", "host_overhead", "input")
# What a part below its ideal (a negative gap) is: time taken off the step, not a share of what was lost.
BETTER_THAN_IDEAL = {
    "compute_not_scaled": "compute scaled better than ideal",
    "exposed_communication": "less exposed communication than ideal",
    "waiting": "less waiting for stragglers than ideal",
    "host_overhead": "less host and launch overhead than ideal",
    "input": "less input and copying than ideal",
}
PART_LABELS = {
    "compute_scaled": "compute that scaled",
    "compute_not_scaled": "compute that did not scale",
    "exposed_communication": "exposed communication",
    "waiting": "waiting for stragglers",
    "host_overhead": "host and launch overhead",
    "input": "input and copies",
}
# Compute left on one device is said to bound the step where it is at least this share of the step: a share of the
# same run's step, which another process slowing the whole run does not move (a share of the compute that did not
# scale would: that is measured against a base run timed apart, and grows with whatever slowed this run alone).
LEFT_BOUNDS_SHARE = 0.10
IDEAL_DEFINITIONS = {
    "weak": "weak scaling (fixed batch per device): ideal step time = T_base, ideal speedup = N / base",
    "strong": "strong scaling (fixed total batch): ideal step time = T_base * base / N, ideal speedup = N / base",
}


class ExplainError(ValueError):
    """The runs cannot be explained together (no device activity, a device count given twice)."""


@dataclass(frozen=True)
class ExplainInput:
    """One traced run of the sweep."""

    devices: int  # N
    comm: CommReport  # of the traced steps
    timed_step_us: float | None = None  # the mean timed step; None: the traced steps are the measurement
    label: str = ""  # where it came from
    mode: str = ""  # variable update (or "") — points of different modes are explained separately
    timed_steps_us: tuple[float, ...] = ()  # each timed step, for the gap's significance; () where not recorded
    more_work_us: dict[tuple[str, int], float] | None = None  # more_work_us of its table; None: not known


@dataclass(frozen=True)
class Parts:
    """µs per step of the bounding device; ``total`` adds them up."""

    compute_scaled: float
    compute_not_scaled: float
    exposed_communication: float
    waiting: float
    host_overhead: float
    input: float
    left_on_one_device: float = 0.0  # of compute_not_scaled (the rest: on every device, duplicated or slower)

    @property
    def compute(self) -> float:
        return self.compute_scaled + self.compute_not_scaled

    @property
    def total(self) -> float:
        return self.compute + self.exposed_communication + self.waiting + self.host_overhead + self.input

    def as_dict(self) -> dict:
        return {"compute_scaled_us": self.compute_scaled, "compute_not_scaled_us": self.compute_not_scaled,
                "left_on_one_device_us": self.left_on_one_device,
                "on_every_device_us": self.compute_not_scaled - self.left_on_one_device,
                "exposed_communication_us": self.exposed_communication, "waiting_us": self.waiting,
                "host_overhead_us": self.host_overhead, "input_us": self.input, "total_us": self.total}


@dataclass(frozen=True)
class ExplainRow:
    mode: str
    devices: int
    label: str
    step_us: float  # measured (timed, or traced when no timed figure)
    traced_step_us: float
    ideal_step_us: float
    speedup: float
    ideal_speedup: float
    parts: Parts  # of step_us
    gap_us: dict[str, float]  # per part in PARTS: its contribution to step_us - ideal_step_us
    bounding_devices: tuple[str, ...]  # the busiest device of each traced step
    traced_steps: int
    idle_causes_known: bool
    gap_significance: Significance | None = None  # the gap against the timed steps' jitter; None: not timed
    traced_change_us: float = 0.0  # how much tracing changed the step: of this run or the base (as the ideal)

    @property
    def gap_total_us(self) -> float:
        return self.step_us - self.ideal_step_us

    @property
    def causes_ranked(self) -> bool:
        """Whether the parts say why: not where tracing changed this run's step, or the base run's, by as much
        as the gap they would split (the traced shares then describe the traced steps, not the timed ones). A
        run without a gap (the base) has nothing to rank."""
        gap = abs(self.gap_total_us)
        return gap == 0 or self.traced_change_us < gap

    def added_share(self, part: str) -> float | None:
        """A part above its ideal: its share of the time the parts above their ideal added (these shares add up
        to 1); None for a part at or below its ideal (its gap says what it took off), and where causes are not
        ranked."""
        added = sum(g for g in self.gap_us.values() if g > 0)
        gap = self.gap_us[part]
        return gap / added if self.causes_ranked and gap > 0 and added > 0 else None

    @property
    def lost_speedup(self) -> float:
        return self.ideal_speedup - self.speedup

    def lost(self, part: str) -> float:
        """The part's share of the lost speedup."""
        return self.ideal_speedup * self.gap_us[part] / self.step_us if self.step_us > 0 else 0.0

    @property
    def bound_by(self) -> str | None:
        """The device whose compute left above the devices' mean bounds the step: the busiest device of most
        traced steps, where it holds at least ``LEFT_BOUNDS_SHARE`` of the step above the mean; None otherwise."""
        if not self.bounding_devices or self.step_us <= 0:
            return None
        device = max(sorted(set(self.bounding_devices)), key=self.bounding_devices.count)
        if 2 * self.bounding_devices.count(device) <= len(self.bounding_devices) or not self.causes_ranked:
            return None
        return device if self.parts.left_on_one_device >= LEFT_BOUNDS_SHARE * self.step_us else None

    def share(self, part: str) -> float | None:
        """The part's share of the gap (None without a gap)."""
        gap = self.gap_total_us
        return self.gap_us[part] / gap if abs(gap) > 1e-9 else None

    def as_dict(self) -> dict:
        return {"mode": self.mode, "devices": self.devices, "source": self.label, "step_us": self.step_us,
                "traced_step_us": self.traced_step_us, "ideal_step_us": self.ideal_step_us,
                "gap_us": self.gap_total_us, "speedup": self.speedup, "ideal_speedup": self.ideal_speedup,
                "lost_speedup": self.lost_speedup, "parts": self.parts.as_dict(),
                "gap_by_part_us": dict(self.gap_us),
                "gap_share_by_part": {p: self.share(p) for p in PARTS},
                "added_share_by_part": {p: self.added_share(p) for p in PARTS},
                "traced_change_us": self.traced_change_us, "causes_ranked": self.causes_ranked,
                "lost_speedup_by_part": {p: self.lost(p) for p in PARTS},
                "bounding_devices": list(self.bounding_devices), "bound_by": self.bound_by,
                "traced_steps": self.traced_steps,
                "idle_causes_known": self.idle_causes_known,
                "gap_significance": self.gap_significance.as_dict() if self.gap_significance else None}


@dataclass(frozen=True)
class ExplainReport:
    scaling: str
    scaling_source: str  # how it was decided: the configuration, the flag
    rows: tuple[ExplainRow, ...]
    notes: tuple[str, ...] = ()

    @property
    def ideal_definition(self) -> str:
        return IDEAL_DEFINITIONS[self.scaling]

    def as_dict(self) -> dict:
        return {"scaling": self.scaling, "scaling_source": self.scaling_source,
                "ideal": self.ideal_definition, "parts": {p: PART_LABELS[p] for p in PARTS},
                "definitions": {
                    "step_us": "the mean timed step, total time of the timed steps / their number (the traced steps where no timed figure exists), µs",
                    "parts": "the busiest device's step split into parts, by their shares of the traced steps",
                    "traced_step_us": "the traced steps' mean window over all the devices (the first start to the "
                                      "last end of their work in the step): the time the parts split, which "
                                      "holds every device's work; rnnprof comm's step time is the step markers' "
                                      "duration, or the longest single device's window",
                    "left_on_one_device_us": "of compute_not_scaled: the bounding device's compute above the "
                                             "devices' mean, as far as it runs more op executions than they "
                                             "do (work left on one device)",
                    "bound_by": "the device whose compute left above the devices' mean bounds the step: the "
                                "busiest device of most traced steps, holding at least "
                                f"{LEFT_BOUNDS_SHARE:.0%} of the step above the mean; null where none does",
                    "on_every_device_us": "the rest of compute_not_scaled (work duplicated on every device, or "
                                          "the same work running slower, as on a device waiting for cores)",
                    "gap_by_part_us": "each part minus its ideal; they add up to step_us - ideal_step_us; "
                                      "a negative one took time off the step (e.g. compute that scaled better "
                                      "than ideal)",
                    "added_share_by_part": "a part above its ideal: its gap over the sum of the gaps above "
                                           "their ideal (they add up to 1); null for a part at or below its "
                                           "ideal, and where causes_ranked is false",
                    "traced_change_us": "how much tracing changed the step: |traced - timed| of the run, or of "
                                        "the base run as its ideal scales it, whichever is larger",
                    "causes_ranked": "false where traced_change_us is as large as the gap: the traced parts "
                                     "then describe the traced steps, not the timed ones, and no cause is "
                                     "ranked (nor bound_by named)",
                    "lost_speedup_by_part": "ideal_speedup * gap_by_part_us / step_us; they add up to "
                                            "lost_speedup",
                    "gap_significance": "each timed step minus the ideal step against the jitter of the timed "
                                        "steps of this run and of the base run (rnnprof.analyzers.noise); a "
                                        "gap within it is not split into a verdict"},
                "rows": [r.as_dict() for r in self.rows], "notes": list(self.notes)}


def _step_parts(comm, more_work: dict | None) -> tuple[list[dict], list[str], bool]:
    """Per traced step: the busiest device's parts (µs, unscaled) and the step window; and whether idle causes
    were known for every bounding device."""
    devices = list(comm.devices)
    if not devices:
        raise ExplainError("no device activity in the trace")
    steps = list(comm.steps) or [None]
    out, names, causes_known = [], [], True
    for step in steps:
        rows = []
        for d in devices:
            b = d.total if step is None else d.steps.get(step)
            if b is not None:
                rows.append((d, b))
        if not rows:
            continue
        window = max(b.end_us for _, b in rows) - min(b.start_us for _, b in rows)
        if window <= 0:
            continue
        mean_compute = float(np.mean([b.compute_us for _, b in rows]))
        device, b = max(rows, key=lambda r: r[1].busy_us)
        compute = b.compute_us
        left = compute - mean_compute  # as far as the device runs more op executions, where those are known
        if more_work is not None:
            left = min(max(left, 0.0), more_work.get((device.device.label, step), 0.0))
        exposed = float(np.clip(b.communication_us - b.overlap_us, 0.0, max(b.busy_us - compute, 0.0)))
        copies = max(b.busy_us - compute - exposed, 0.0)
        # comm's straggler figure: a device that starts its collectives before the last device does waits
        # inside them for that long (at most its exposed communication)
        starts = [r.first_comm_us for _, r in rows if r.first_comm_us is not None]
        straggled = 0.0
        if b.first_comm_us is not None and len(starts) > 1:
            straggled = float(np.clip(max(starts) - b.first_comm_us, 0.0, exposed))
        exposed -= straggled
        idle = max(window - b.busy_us, 0.0)
        causes = None
        if device.idle is not None:
            causes = device.idle.total if step is None else device.idle.steps.get(step)
        if causes is not None and causes.idle_us > 0:
            host = idle * (causes.host_wait_us + causes.kernel_wait_us) / causes.idle_us
        else:
            causes_known = causes_known and causes is not None
            host = idle
        out.append({"window": window, "compute": compute, "left": left, "comm": exposed,
                    "input": copies, "host": host, "waiting": idle - host + straggled})
        names.append(device.device.label)
    if not out:
        raise ExplainError("no step with device activity in the trace")
    return out, names, causes_known


@dataclass(frozen=True)
class _Measured:
    point: ExplainInput
    step_us: float
    traced_us: float
    compute: float
    left: float
    comm: float
    input: float
    host: float
    waiting: float
    bounding: tuple[str, ...]
    steps: int
    causes_known: bool


def _measure(point: ExplainInput) -> _Measured:
    steps, names, known = _step_parts(point.comm, point.more_work_us)
    traced = float(np.mean([s["window"] for s in steps]))
    step_us = point.timed_step_us if point.timed_step_us and point.timed_step_us > 0 else traced
    scale = step_us / traced  # the traced shares applied to the measured step

    def mean(key: str) -> float:
        return float(np.mean([s[key] for s in steps])) * scale

    return _Measured(point, step_us, traced, mean("compute"), mean("left"), mean("comm"), mean("input"),
                     mean("host"), mean("waiting"), tuple(names), len(steps), known)


def explain_sweep(points: Sequence[ExplainInput], scaling: str, scaling_source: str = "",
                  notes: Sequence[str] = ()) -> ExplainReport:
    """Explain every mode's sweep (points grouped by ``mode``, each against its smallest device count)."""
    if scaling not in SCALINGS:
        raise ExplainError(f"scaling {scaling!r} is not one of {', '.join(SCALINGS)}")
    if not points:
        raise ExplainError("no traced run to explain")
    out_notes = list(notes)
    rows: list[ExplainRow] = []
    by_mode: dict[str, list[ExplainInput]] = {}
    for p in points:
        by_mode.setdefault(p.mode, []).append(p)
    for mode, group in by_mode.items():
        counts = [p.devices for p in group]
        if len(set(counts)) != len(counts):
            raise ExplainError(f"device count given twice{f' for {mode}' if mode else ''}: "
                               f"{sorted(counts)} (one run per device count)")
        measured = sorted((_measure(p) for p in group), key=lambda m: m.point.devices)
        base = measured[0]
        if base.point.devices != 1:
            out_notes.append(f"{mode + ': ' if mode else ''}no 1-device run: the ideal is taken from the "
                             f"{base.point.devices}-device run")
        for m in measured:
            rows.append(_row(mode, m, base, scaling))
            out_notes += _gap_note(mode, rows[-1], base)
            out_notes += _tracing_note(mode, rows[-1], m, base)
    if any(not r.idle_causes_known for r in rows):
        out_notes.append("the traces link no launch call to the work of some devices (TensorFlow timelines, CPU "
                         "ranks): their idle time counts as host and launch overhead; waiting for another device "
                         "is the time spent in collectives before the last device started its own")
    return ExplainReport(scaling=scaling, scaling_source=scaling_source, rows=tuple(rows), notes=tuple(out_notes))


def _row(mode: str, m: _Measured, base: _Measured, scaling: str) -> ExplainRow:
    n, b = m.point.devices, base.point.devices
    factor = 1.0 if scaling == "weak" else b / n
    ideal_step = base.step_us * factor
    ideal_compute = base.compute * factor
    ideal = {"exposed_communication": base.comm * factor, "waiting": base.waiting * factor,
             "host_overhead": base.host * factor, "input": base.input * factor}
    not_scaled = m.compute - ideal_compute
    parts = Parts(compute_scaled=ideal_compute, compute_not_scaled=not_scaled, exposed_communication=m.comm,
                  waiting=m.waiting, host_overhead=m.host, input=m.input,
                  left_on_one_device=m.left)
    gap = {"compute_not_scaled": not_scaled,
           "exposed_communication": m.comm - ideal["exposed_communication"],
           "waiting": m.waiting - ideal["waiting"], "host_overhead": m.host - ideal["host_overhead"],
           "input": m.input - ideal["input"]}
    ideal_speedup = n / b
    speedup = ideal_speedup * ideal_step / m.step_us if m.step_us > 0 else 0.0
    return ExplainRow(mode=mode, devices=n, label=m.point.label, step_us=m.step_us, traced_step_us=m.traced_us,
                      ideal_step_us=ideal_step, speedup=speedup, ideal_speedup=ideal_speedup, parts=parts,
                      gap_us=gap, bounding_devices=m.bounding, traced_steps=m.steps,
                      idle_causes_known=m.causes_known,
                      gap_significance=_gap_significance(m, base, ideal_step, factor),
                      traced_change_us=max(_traced_change(m), _traced_change(base) * factor))


def _traced_change(m: _Measured) -> float:
    """How much tracing changed a run's step: traced against timed (0 where the traced steps are the measure)."""
    return abs(m.traced_us - m.step_us) if m.point.timed_step_us else 0.0


def _tracing_note(mode: str, row: ExplainRow, m: _Measured, base: _Measured) -> list[str]:
    """What tracing did to the step: where it changed it as much as the gap, that no cause is ranked; else, where
    it changed it by more than a tenth, that the parts are the traced shares applied to the timed step."""
    where = f"{mode + ' ' if mode else ''}N={row.devices}"
    if m is not base and not row.causes_ranked:
        run = m if _traced_change(m) >= _traced_change(base) else base
        whose = "" if run is m else f" (in the {base.point.devices}-device run, the ideal's)"
        return [f"{where}: tracing made the step {run.traced_us / run.step_us:.1f}x as long{whose} "
                f"({run.traced_us / 1000:.1f} ms traced against {run.step_us / 1000:.1f} ms timed), more than "
                f"the {abs(row.gap_total_us) / 1000:.1f} ms gap from the ideal: the traced parts do not describe "
                f"the timed step, so no cause is ranked (a larger model or batch, fewer ops per ms, is traced "
                f"with less change)"]
    if abs(m.traced_us / m.step_us - 1) > 0.10 and m.point.timed_step_us:
        return [f"{where}: traced steps took {m.traced_us / 1000:.1f} ms against {m.step_us / 1000:.1f} ms timed; "
                f"the parts are the traced steps' shares applied to the timed step"]
    return []


def _gap_significance(m: _Measured, base: _Measured, ideal_step: float, factor: float) -> Significance | None:
    """Each timed step's excess over the ideal against the larger of this run's and the base run's timed-step
    jitter (the base's scaled as the ideal is); None where either run's timed steps are not recorded, and for
    the base itself."""
    if m is base or not m.point.timed_steps_us or not base.point.timed_steps_us:
        return None
    jitter = max(robust_spread(base.point.timed_steps_us) * factor, robust_spread(m.point.timed_steps_us))
    return significance([t - ideal_step for t in m.point.timed_steps_us], jitter)


def _gap_note(mode: str, row: ExplainRow, base: _Measured) -> list[str]:
    """A note for a gap no larger than the timed steps' jitter: its split into parts is no verdict."""
    verdict = row.gap_significance
    if verdict is None or verdict.significant:
        return []
    return [f"{mode + ' ' if mode else ''}N={row.devices}: the gap from the ideal, {row.gap_total_us / 1000:.1f} ms "
            f"per step, is within the jitter of the timed steps (it would need {verdict.threshold_us / 1000:.1f} "
            f"ms over at least {MIN_STEPS} steps, against the {base.point.devices}-device run): its split "
            f"into parts is no verdict"]


def more_work_us(table: EventTable, classes: np.ndarray | None = None) -> dict[tuple[str, int], float]:
    """(device label, step) -> the device's compute in op executions beyond the devices' mean: per op (its name,
    tower and replica scopes made alike, ``names.REPLICA_PART``), the executions beyond the mean count of the
    step's devices, at the device's own mean duration of that op. Devices running the same ops (the towers of
    one model) have none, however long their ops took; a device with another's op pinned to it has its time.
    ``classes``: ``classify(table)``, when the caller has it already."""
    classes = classify(table) if classes is None else classes
    rows = np.flatnonzero((classes == EventClass.COMPUTE) & (table.step >= 0))
    rows = rows[np.array([table.devices[int(d)].kind != "host" for d in table.device[rows]], dtype=bool)]
    if not len(rows):
        return {}
    alike = {int(n): REPLICA_PART.sub("replica", table.strings[int(n)]) for n in np.unique(table.name[rows])}
    _, op = np.unique([alike[int(n)] for n in table.name[rows]], return_inverse=True)
    device, step, dur = table.device[rows].astype(np.int64), table.step[rows].astype(np.int64), table.dur[rows]
    out: dict[tuple[str, int], float] = {}
    for s in np.unique(step):
        here = step == s
        codes, dev = np.unique(device[here], return_inverse=True)
        count = np.zeros((len(codes), int(op.max()) + 1))
        total = np.zeros_like(count)
        np.add.at(count, (dev, op[here]), 1.0)
        np.add.at(total, (dev, op[here]), np.maximum(dur[here], 0.0))
        extra = np.maximum(count - count.mean(axis=0), 0.0) * total / np.maximum(count, 1.0)
        for k, code in enumerate(codes):
            out[(table.devices[int(code)].label, int(s))] = float(extra[k].sum())
    return out
