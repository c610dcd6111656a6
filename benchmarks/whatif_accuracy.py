"""Benchmark: does ``rnnprof whatif`` predict the step time of a run that really was changed?

    python benchmarks/whatif_accuracy.py [--only NAME ...] [--keep DIR]
    python benchmarks/whatif_accuracy.py --parallel [--only NAME ...] [--rounds N] [--keep DIR | --runs DIR]

For each planted DDP fault of ``benchmarks/diagnosis.py`` whose fix a replay can express (a rank that sleeps
40 ms a step, one rank's slow data loader) and its control (the same job without the fault; gloo, CPU, 2
ranks), both captured as the diagnosis benchmark captures them: the control's step time predicted from the
planted run by replaying the fix (``rnnprof whatif RUN --fix PF001:rank1 --json``, the median predicted step),
against the control's step measured by the job's own clock (its slowest rank's median untraced step, with its
median absolute deviation as the noise). Beside it, the prediction a bound gives: the planted run's clocked
step less the audit's saving for the fault's rule before the replay (``bound_ms``). Prints one table; exits 0
(a measurement, no target).

With ``--parallel``: the changes of sharded and pipelined jobs (``PARALLEL``), each a pair of built-in Transformer
LM runs on 2 gloo ranks (``rnnprof trace --parallel ...``) that differ by the change really made: FSDP's forward
prefetch off and on (``--forward-prefetch 0`` and ``1``, both with ``--unshard-async``, without which FSDP2 waits
on a CPU for a prefetched all-gather at once), a pipeline's micro-batches 4 -> 8, a layer moved between its two
stages (``--stage-layers 3,1`` -> ``2,2``). The two configurations take turns, ``--rounds`` runs each. Each run of
the first is replayed with the change (``whatif RUN <change> --json``); its prediction for the changed run is its
own median step by the replay's measure plus the median over its steps of (predicted - measured). Each changed run
is measured the same way (``whatif RUN --comm 1``: no change). A round's error is its prediction against the
changed run of the same round; the case's error is the median of the rounds' (and the largest, in brackets). Each
round's line gives the two runs' steps, the measured and the replayed ratio of the change, and, per traced step, the
time both ranks of each run sat at once in a ``c10d::send`` of 1 ms or more (``_send_stalls``: two gloo ranks
sending to each other at the same moment on a 2-core machine stall for a few ms, which no replay of the first run
can know). ``--runs DIR`` replays the runs an earlier ``--keep DIR`` kept, traced nothing (the same rounds, the
model as it is now). The
noise rule: the targets are median |error| <= 5 % and each <= 10 %, where the runs allow it: a case whose
|error| is within the noise (the median absolute deviation of the changed configuration's round medians plus that
of the first configuration's, over its median) is within the runs' own noise, said as such. Exits 1 where a case
misses the targets beyond its noise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import diagnosis
import numpy as np

from rnnprof.analyzers.intervals import overlap_length
from rnnprof.traces import load_events

CASES = {"straggler-rank": "PF001:rank1", "slow-loader": "PF001:rank1"}


def _whatif(run: Path, fix: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "rnnprof", "whatif", str(run), "--fix", fix, "--json"],
                          capture_output=True, text=True, env=diagnosis._env(), cwd=diagnosis.ROOT, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"whatif failed on {run}: {done.stderr.strip()}")
    return json.loads(done.stdout)


def _bound_ms(doc: dict, rule: str) -> float | None:
    found = [f for f in doc["findings"] if f["rule"] == rule]
    return found[0]["evidence"].get("bound_ms", found[0]["saving_ms"]) if found else None


# the built-in Transformer LM on 2 gloo ranks, large enough that its collectives and micro-batches show
MODEL = ["--framework", "torch", "--model", "transformer", "--layers", "4", "--units", "128", "--heads", "4",
         "--vocab-size", "500", "--src-max-len", "32", "--optimizer", "sgd", "--devices", "2", "--warmup", "2",
         "--batches", "4", "--trace-steps", "4"]
# case -> (the first configuration's flags, the changed configuration's, whatif's change)
PARALLEL = {
    "fsdp-prefetch": (["--parallel", "fsdp", "--batch-size", "8", "--unshard-async", "--forward-prefetch", "0"],
                      ["--parallel", "fsdp", "--batch-size", "8", "--unshard-async", "--forward-prefetch", "1"],
                      ["--prefetch"]),
    "pp-micro-batches": (["--parallel", "pp", "--batch-size", "16", "--micro-batches", "4"],
                         ["--parallel", "pp", "--batch-size", "16", "--micro-batches", "8"],
                         ["--micro-batches", "8"]),
    "pp-move-layer": (["--parallel", "pp", "--batch-size", "16", "--stage-layers", "3,1"],
                      ["--parallel", "pp", "--batch-size", "16", "--stage-layers", "2,2"],
                      ["--move-layer", "3,1:2,2"]),
}
MEDIAN_TARGET, EACH_TARGET = 5.0, 10.0  # |error| in %


def _trace(flags: list[str], out: Path) -> Path:
    done = subprocess.run([sys.executable, "-m", "rnnprof", "trace", *MODEL, *flags, "--out", str(out)],
                          capture_output=True, text=True, env=diagnosis._env(), cwd=diagnosis.ROOT, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"trace {' '.join(flags)} failed: {done.stderr.strip()[-800:]}")
    return out


def _replayed(run: Path, change: list[str]) -> tuple[float, float]:
    """(the run's median step by the replay's measure, the median change the replay predicts), in ms."""
    doc = _whatif_flags(run, change)
    steps = doc["steps"]
    measured = statistics.median(s["measured_us"] for s in steps) / 1000
    return measured, statistics.median(s["predicted_us"] - s["measured_us"] for s in steps) / 1000


def _whatif_flags(run: Path, flags: list[str]) -> dict:
    done = subprocess.run([sys.executable, "-m", "rnnprof", "whatif", str(run), *flags, "--json"],
                          capture_output=True, text=True, env=diagnosis._env(), cwd=diagnosis.ROOT, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"whatif failed on {run}: {done.stderr.strip()}")
    return json.loads(done.stdout)


def _send_stalls(run: Path) -> float:
    """ms per traced step in which two ranks both sat in a ``c10d::send`` of 1 ms or more, at the same time (NaN
    where the run holds no rank files)."""
    files = sorted((run / "torch").glob("rank*.json*"))
    if not files:
        return float("nan")
    t = load_events([str(p) for p in files])
    code = t.strings.index("c10d::send") if "c10d::send" in t.strings else -1
    rows = np.flatnonzero((t.name == code) & (t.dur >= 1000.0))
    worker = t.worker_codes()[t.device[rows]]
    sends = [(t.ts[rows[worker == w]], t.ts[rows[worker == w]] + t.dur[rows[worker == w]]) for w in np.unique(worker)]
    both = sum(overlap_length(a, b) for i, a in enumerate(sends) for b in sends[i + 1:])
    return both / 1000 / max(len(t.steps()), 1)


def _mad(values: list[float]) -> float:
    middle = statistics.median(values)
    return statistics.median(abs(v - middle) for v in values)


def parallel_case(name: str, rounds: int, root: Path, kept: bool = False) -> dict:
    """One case of ``PARALLEL``, its configurations taking turns: per round the prediction and the changed run's
    step (ms), and the noise (%); ``kept``: the runs are in ``root`` already (``--runs``)."""
    first, changed, change = PARALLEL[name]
    predicted, measured, base = [], [], []
    for k in range(rounds):
        run, other = root / name / f"first-{k}", root / name / f"changed-{k}"
        if not kept:
            _trace(first, run)
            _trace(changed, other)
        elif not (run.is_dir() and other.is_dir()):
            raise SystemExit(f"--runs {root}: no round {k} of {name} kept there ({run.name}, {other.name})")
        step, delta = _replayed(run, change)
        base.append(step)
        predicted.append(step + delta)
        measured.append(_replayed(other, ["--comm", "1"])[0])
        print(f"  {name} round {k}: first {step:.1f} ms, changed {measured[-1]:.1f} ms; ratio measured "
              f"{measured[-1] / step:.3f}, replayed {predicted[-1] / step:.3f}; sends stalled on both ranks "
              f"{_send_stalls(run):.1f} and {_send_stalls(other):.1f} ms a step", flush=True)
    errors = [100 * (p - m) / m for p, m in zip(predicted, measured)]
    noise = 100 * (_mad(measured) + _mad(base)) / statistics.median(measured)
    return {"case": name, "first_ms": statistics.median(base), "changed_ms": statistics.median(measured),
            "predicted_ms": statistics.median(predicted), "errors": errors, "noise_pct": noise}


def parallel_main(names: list[str], rounds: int, root: Path, kept: bool = False) -> int:
    rows = [parallel_case(name, rounds, root, kept) for name in names]
    print(f"{'case':<18}{'first ms':>9}{'changed ms':>11}{'predicted':>10}{'error':>8}{'largest':>9}{'noise':>7}"
          f"  verdict")
    missed = False
    for r in rows:
        median = statistics.median(r["errors"])
        largest = max(r["errors"], key=abs)
        met = abs(median) <= MEDIAN_TARGET and abs(largest) <= EACH_TARGET
        within = abs(median) <= r["noise_pct"]
        verdict = "met" if met else "within the runs' noise" if within else "missed"
        missed = missed or verdict == "missed"
        print(f"{r['case']:<18}{r['first_ms']:>9.1f}{r['changed_ms']:>11.1f}{r['predicted_ms']:>10.1f}"
              f"{median:>+7.1f}%{largest:>+8.1f}%{r['noise_pct']:>6.1f}%  {verdict}")
    return 1 if missed else 0


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--parallel", action="store_true", help="the sharded and pipelined jobs' changes")
    parser.add_argument("--only", nargs="*", default=None, choices=[*CASES, *PARALLEL])
    parser.add_argument("--rounds", type=int, default=None,
                        help="--parallel: runs of each configuration (default 3; with --runs, the rounds kept)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs in DIR")
    parser.add_argument("--runs", type=Path, default=None, help="--parallel: replay the runs --keep kept in DIR")
    args = parser.parse_args()
    if args.runs:
        names = [n for n in (args.only or PARALLEL) if n in PARALLEL]
        if not names:
            parser.error(f"--runs replays the --parallel cases ({', '.join(PARALLEL)}), not {', '.join(args.only)}")
        rounds = args.rounds or min(len(list((args.runs / n).glob("first-*"))) for n in names)
        return parallel_main(names, rounds, args.runs, True)
    args.rounds = args.rounds or 3
    if args.parallel:
        with tempfile.TemporaryDirectory(prefix="rnnprof-whatif-") as tmp:
            return parallel_main([n for n in (args.only or PARALLEL) if n in PARALLEL], args.rounds,
                                 args.keep or Path(tmp))
    args.only = [n for n in (args.only or CASES) if n in CASES]
    rows = []
    with tempfile.TemporaryDirectory(prefix="rnnprof-whatif-") as tmp:
        root = args.keep or Path(tmp)
        for name in args.only:
            run, (planted_ms, planted_mad) = diagnosis.run_ddp(name, False, root / name / "planted")
            _, (control_ms, control_mad) = diagnosis.run_ddp(name, True, root / name / "control")
            predicted_ms = _whatif(run, CASES[name])["median"]["predicted_us"] / 1000
            bound = _bound_ms(diagnosis.audit([run]), CASES[name].split(":")[0])
            by_bound = None if bound is None else planted_ms - bound
            rows.append((name, planted_ms, control_ms, control_mad, predicted_ms, by_bound))
    print(f"{'fault':<16}{'planted ms':>11}{'control ms':>11}{'noise':>7}{'replay ms':>10}{'error':>8}"
          f"{'bound ms':>10}{'error':>8}")
    for name, planted, control, noise, predicted, by_bound in rows:
        err = 100 * (predicted - control) / control
        berr = "" if by_bound is None else f"{100 * (by_bound - control) / control:+.0f}%"
        print(f"{name:<16}{planted:>11.1f}{control:>11.1f}{noise:>7.1f}{predicted:>10.1f}{err:>+7.0f}%"
              f"{'' if by_bound is None else f'{by_bound:.1f}':>10}{berr:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
