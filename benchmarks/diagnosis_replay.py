"""The diagnosis benchmark's predictions: ``rnnprof whatif`` on each DDP fault and its control, both ways.

* the fix: ``rnnprof whatif PLANTED_RUN <the fix> --json`` predicts the control's step;
* the fault: the control's step with the fault replayed on it: ``--delay RANK=MS@OP``, the fault's host time on
  its rank just before the operator it precedes in every step.

A prediction in ms by the job's own clock is the run's clock step plus the replay's change: the median over the
traced steps of (predicted - measured) from ``whatif --json``, added to the measured step of the run it was made
from (a traced step also carries the profiler's cost, which the change leaves). Each round's run predicts, and is
measured against the other configuration in the same run: its untraced steps take turns with it
(``diagnosis.SWAP_STEPS``), so that the prediction and what it predicts ran at the host's same speed. The error is
the median over the rounds of each run's error; its noise, the median over the rounds of the two configurations'
MADs in the run, summed. Beside it, the column ``runs``: the prediction against the other configuration's own runs
(median of their medians), as measured before the runs took turns.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ZERO_GRAD = r"^Optimizer\.zero_grad#"
LOADING = r"^enumerate\(DataLoader\)#"
MEDIAN_LIMIT, EACH_LIMIT, COMBINED_LIMIT = 0.05, 0.10, 0.10  # |error| of the predictions, the targets


@dataclass(frozen=True)
class Grow:
    """A fault as host time on one rank: ``ms`` (None: the job's own clock of it, ``extra_s``) before the first
    operator matching ``before`` in each step on that rank's main thread."""

    rank: str
    before: str
    ms: float | None = None


@dataclass(frozen=True)
class Replay:
    fix: tuple[str, ...]  # whatif's change flags that fix the fault, on the planted run
    fault: tuple[Grow, ...]  # the fault, replayed on the control


# The fixes: the audit's finding's (``--fix RULE:SUBJECT``; a slow loader's first finding is PF001, cause input),
# or the operator removed.
REPLAYS = {
    "straggler-rank": Replay(("--fix", "PF001:rank1"), (Grow("rank1", ZERO_GRAD, 40.0),)),
    "slow-loader": Replay(("--fix", "PF001:rank1"), (Grow("rank1", LOADING, 40.0),)),
    "extra-op": Replay(("--scale", "aten::bmm=0"), (Grow("rank1", ZERO_GRAD),)),
    "two-faults": Replay(("--fix", "PF001:rank1", "--fix", "PF005:rank0"),
                         (Grow("rank1", ZERO_GRAD, 40.0), Grow("rank0", LOADING, 20.0))),
}


@dataclass
class Prediction:
    """One direction of one case: ``measured_ms`` (its noise) by the clock, ``predicted_ms`` from the replay,
    ``bound_ms`` the audit's bound for the same step where it has one (planted step minus the savings)."""

    case: str
    direction: str  # "fix": the control predicted from the planted run; "fault": the planted run from the control
    change: str
    measured_ms: float
    noise_ms: float
    predicted_ms: float | None
    per_round: tuple[float, ...] = ()
    measured_per_round: tuple[float, ...] = ()  # the same runs' swapped steps, where the runs took turns
    other_runs_ms: float | None = None  # the other configuration's step over its own runs
    bound_ms: float | None = None
    failure: str = ""
    combined: bool = False  # two faults fixed at once
    traced: tuple[float, float] | None = None  # the same step measured in the traced steps, and predicted there
    source_per_round: tuple[float, ...] = ()  # per round, the step of the run the prediction was made from

    @property
    def traced_error(self) -> float | None:
        """The prediction against the other configuration's traced steps (no clock): the replay's own error."""
        return None if self.traced is None else (self.traced[1] - self.traced[0]) / self.traced[0]

    @property
    def error(self) -> float | None:
        """Where the runs took turns, the median of each run's error against its own swapped steps."""
        if self.predicted_ms is None:
            return None
        if self.measured_per_round and len(self.measured_per_round) == len(self.per_round):
            return statistics.median((p - m) / m for p, m in zip(self.per_round, self.measured_per_round))
        return (self.predicted_ms - self.measured_ms) / self.measured_ms

    @property
    def change_error(self) -> float | None:
        """The error as a share of the change measured (the other configuration's step less the run's own, in
        the same run), the median over the rounds: what the prediction gets wrong of what the fault costs,
        whatever the step's size."""
        rounds = list(zip(self.per_round, self.measured_per_round, self.source_per_round))
        if self.predicted_ms is None or not rounds or len(rounds) != len(self.per_round):
            return None
        return statistics.median((p - m) / abs(m - s) if m != s else float("inf") for p, m, s in rounds)

    @property
    def runs_error(self) -> float | None:
        """The prediction against the other configuration's own runs."""
        if self.predicted_ms is None or self.other_runs_ms is None:
            return None
        return (self.predicted_ms - self.other_runs_ms) / self.other_runs_ms

    @property
    def bound_error(self) -> float | None:
        return None if self.bound_ms is None else (self.bound_ms - self.measured_ms) / self.measured_ms

    @property
    def noise(self) -> float:
        return self.noise_ms / self.measured_ms


class WhatIfFailed(RuntimeError):
    pass


def whatif_steps_ms(run: Path, flags: list[str], env: dict) -> tuple[float, float, float]:
    """From ``rnnprof whatif --json`` on the run's traced steps: the median of (predicted - measured), the median
    measured and the median predicted step, ms."""
    done = subprocess.run([sys.executable, "-m", "rnnprof", "whatif", str(run), *flags, "--json"], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=600)
    if done.returncode != 0:
        raise WhatIfFailed(f"rnnprof whatif {' '.join(flags)}: exit {done.returncode}: "
                           f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    steps = json.loads(done.stdout)["steps"]
    if not steps:
        raise WhatIfFailed(f"rnnprof whatif {' '.join(flags)}: no step")
    return (statistics.median((s["predicted_us"] - s["measured_us"]) / 1000 for s in steps),
            statistics.median(s["measured_us"] / 1000 for s in steps),
            statistics.median(s["predicted_us"] / 1000 for s in steps))


def delay_flags(fault: tuple[Grow, ...], costs_ms: dict[str, float]) -> list[str]:
    """The ``--delay`` flags that replay ``fault`` (``costs_ms``: per rank, the cost of a ``Grow`` without ``ms``)."""
    flags = []
    for grow in fault:
        cost_ms = grow.ms if grow.ms is not None else costs_ms[grow.rank]
        flags += ["--delay", f"{grow.rank}={cost_ms:g}@{grow.before}"]
    return flags


@dataclass(frozen=True)
class Config:
    """One configuration's runs: per round its run folder and clock step and MAD (ms); its step and noise over
    them; per round, the other configuration's step and MAD in its swapped steps (``swapped``), where the runs
    took turns."""

    runs: tuple[tuple[Path, tuple[float, float]], ...]
    step_ms: float
    noise_ms: float
    swapped: tuple[tuple[float, float], ...] = ()


def _by_clock(runs, replayed, env: dict) -> tuple[tuple[float, ...], float, float]:
    """Per round, the prediction by the clock: the round's step plus the replay's change (``replayed(run)``: the
    run to replay and the change's flags); and over the rounds, the median measured and predicted traced step."""
    got = [whatif_steps_ms(*replayed(run), env) for run, _ in runs]
    return (tuple(step + change for (_, (step, _)), (change, _, _) in zip(runs, got)),
            statistics.median(m for _, m, _ in got), statistics.median(p for _, _, p in got))


def predict(name: str, planted: Config, control: Config, env: dict, costs_ms: dict[str, float],
            saving_ms: float | None) -> list[Prediction]:
    """Both directions of case ``name``: the fix on the planted runs, the fault on the controls; ``saving_ms``:
    the audit's savings of the alarms that diagnose the case's faults, summed (None: no alarm diagnoses one)."""
    replay = REPLAYS[name]
    out = []
    faulty = delay_flags(replay.fault, costs_ms)
    directions = (("fix", " ".join(replay.fix), planted, control, lambda run: (run, list(replay.fix)),
                   None if saving_ms is None else planted.step_ms - saving_ms),
                  ("fault", _describe(replay.fault, costs_ms), control, planted,
                   lambda run: (run, faulty),
                   None if saving_ms is None else control.step_ms + saving_ms))
    traced = {}  # direction -> (the source's measured traced step, the predicted one)
    for direction, change, source, target, replayed, bound in directions:
        try:
            rounds, traced_measured, traced_predicted = _by_clock(source.runs, replayed, env)
            predicted, failure = statistics.median(rounds), ""
            traced[direction] = (traced_measured, traced_predicted)
        except WhatIfFailed as exc:
            rounds, predicted, failure = (), None, str(exc)
        measured, noise = measured_against(source, target)
        out.append(Prediction(name, direction, change, measured, noise, predicted, rounds,
                              tuple(m for m, _ in source.swapped), target.step_ms, bound, failure,
                              combined=direction == "fix" and len(replay.fault) > 1,
                              source_per_round=tuple(step for _, (step, _) in source.runs)))
    if len(traced) == 2:  # each direction's traced prediction against the other's measured traced step
        out[0].traced = (traced["fault"][0], traced["fix"][1])
        out[1].traced = (traced["fix"][0], traced["fault"][1])
    return out


def measured_against(source: Config, target: Config) -> tuple[float, float]:
    """What a prediction from ``source``'s runs is measured against, and its noise (ms): where the runs took turns,
    the median of their swapped steps, and the median of each run's two MADs summed; else ``target``'s step over
    its own runs, and the two configurations' noises summed."""
    if source.swapped:
        return (statistics.median(m for m, _ in source.swapped),
                statistics.median(own + other for (_, (_, own)), (_, other) in zip(source.runs, source.swapped)))
    return target.step_ms, source.noise_ms + target.noise_ms


def _describe(fault: tuple[Grow, ...], costs_ms: dict[str, float]) -> str:
    return " + ".join(f"{g.rank} +{g.ms if g.ms is not None else costs_ms[g.rank]:.1f} ms" for g in fault)


def extra_ms(clocks: list[Path], rank: str, first: int) -> dict[str, float]:
    """A job's own clock of its planted operator (``extra_s``) on ``rank``: the median of its runs' medians over
    their steps from ``first`` on (as the step times are combined), ms; empty where the job times none."""
    medians = []
    for clock in clocks:
        path = clock / f"{rank}.json"
        record = json.loads(path.read_text()) if path.exists() else {}
        values = [1000 * v for v in (record.get("extra_s") or [])[first:] if isinstance(v, (int, float))]
        medians += [statistics.median(values)] if values else []
    return {rank: statistics.median(medians)} if medians else {}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.1f}%"


def print_predictions(predictions: list[Prediction]) -> None:
    print(f"\n{'case':<15} {'way':<5} {'measured ms':>11} {'noise':>6} {'predicted':>9} {'error':>7} "
          f"{'bound':>6} {'error':>7} {'traced':>7} {'runs':>7} {'of cost':>7}  change replayed")
    for p in predictions:
        print(f"{p.case:<15} {p.direction:<5} {p.measured_ms:>11.1f} {100 * p.noise:>5.1f}% "
              f"{'-' if p.predicted_ms is None else f'{p.predicted_ms:.1f}':>9} {_pct(p.error):>7} "
              f"{'-' if p.bound_ms is None else f'{p.bound_ms:.1f}':>6} {_pct(p.bound_error):>7} "
              f"{_pct(p.traced_error):>7} {_pct(p.runs_error):>7} {_pct(p.change_error):>7}  {p.change}"
              + (f" ({p.failure})" if p.failure else ""))
    print("(fix = the control's step predicted from the planted runs by replaying the fix; fault = the planted "
          "step predicted from the controls by replaying the fault; measured by the job's own clock in the same "
          "runs, where they took turns with the other configuration, median of the rounds; error = the median of "
          "the runs' errors; noise = the MADs of the two configurations' steps in a run, summed, median of the "
          "rounds; bound = the same step from the audit rules' bounds, the planted step minus them or the "
          "control's plus them; traced = the replay's prediction against the other configuration's traced steps, "
          "no clock: the profiled steps both; runs = the prediction against the other configuration's own runs; "
          "of cost = the error as a share of the fault's cost measured in the same run, the step's size aside)")


def check_predictions(predictions: list[Prediction], targets) -> None:
    """The replay's targets: the median |error| at most 5 %; each at most 10 %, or within its noise where that
    is wider; two faults fixed at once within 10 % (or the noise) of the measured control."""
    if not predictions:
        return
    errors = [abs(p.error) if p.error is not None else float("inf") for p in predictions]
    targets.at_most("replay: median |error| of the predicted steps", 100 * statistics.median(errors),
                    100 * MEDIAN_LIMIT, "%")
    off = [p for p in predictions if not _within(p, EACH_LIMIT)]
    targets.check(f"replay: every prediction within {EACH_LIMIT:.0%} (or its noise)", not off,
                  f"{len(predictions) - len(off)} of {len(predictions)}"
                  + ("" if not off else " (off: " + ", ".join(f"{p.case} {p.direction} {_pct(p.error)}"
                                                               for p in off) + ")"))
    for p in (p for p in predictions if p.combined):
        targets.check(f"replay: {p.case} fixed at once within {COMBINED_LIMIT:.0%} of the control",
                      _within(p, COMBINED_LIMIT), f"{_pct(p.error)} (noise {100 * p.noise:.1f}%)")


def _within(p: Prediction, limit: float) -> bool:
    return p.error is not None and abs(p.error) <= max(limit, p.noise)
