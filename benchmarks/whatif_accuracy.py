"""Benchmark: does ``rnnprof whatif`` predict the step time of a run that really was changed?

    python benchmarks/whatif_accuracy.py [--only NAME ...] [--keep DIR]

For each planted DDP fault of ``benchmarks/diagnosis.py`` whose fix a replay can express (a rank that sleeps
40 ms a step, one rank's slow data loader) and its control (the same job without the fault; gloo, CPU, 2
ranks), both captured as the diagnosis benchmark captures them: the control's step time predicted from the
planted run by replaying the fix (``rnnprof whatif RUN --fix PF001:rank1 --json``, the median predicted step),
against the control's step measured by the job's own clock (its slowest rank's median untraced step, with its
median absolute deviation as the noise). Beside it, the prediction a bound gives: the planted run's clocked
step less the audit's saving for the fault's rule before the replay (``bound_ms``). Prints one table; exits 0
(a measurement, no target).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import diagnosis

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


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=list(CASES), choices=list(CASES))
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs in DIR")
    args = parser.parse_args()
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
