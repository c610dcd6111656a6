"""Shared by the benchmarks: run a measurement in a fresh process, summarize repeats, check targets."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass, field


def run_child(code: str, *argv: str) -> dict:
    """Run ``code`` in a new interpreter (its own peak RSS); it prints one JSON line last."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"benchmark child failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def spread(values: list[float], unit: str = "s") -> str:
    if len(values) == 1:
        return f"{values[0]:.2f} {unit}"
    return f"best {min(values):.2f} {unit}, median {statistics.median(values):.2f} {unit} of {len(values)}"


@dataclass
class Targets:
    """Targets and what was measured; ``exit_code`` is 1 only when one is missed."""

    rows: list[tuple[str, str, bool]] = field(default_factory=list)

    def at_most(self, name: str, measured: float, limit: float, unit: str) -> None:
        self.rows.append((name, f"{measured:,.2f} {unit} (target <= {limit:,.2f} {unit})", measured <= limit))

    def at_least(self, name: str, measured: float, limit: float, unit: str) -> None:
        self.rows.append((name, f"{measured:,.1f}{unit} (target >= {limit:,.1f}{unit})", measured >= limit))

    def report(self) -> int:
        print("targets:")
        for name, text, ok in self.rows:
            print(f"  {'met    ' if ok else 'MISSED '} {name}: {text}")
        return 0 if all(ok for _, _, ok in self.rows) else 1
