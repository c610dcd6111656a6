"""Shared by the benchmarks: run a measurement in a fresh process, summarize repeats, check targets."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass, field


# Children import this to measure the peak memory of their whole process tree: a loader may
# fork workers, whose memory ``ru_maxrss`` of the parent does not count.
TREE_RSS = """
import os, resource, threading

def _tree_rss_kb(pid=os.getpid()):
    total, todo = 0, [str(pid)]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo.extend(f.read().split())
        except (OSError, StopIteration):
            pass
    return total

_peak_kb = [0]

def _sample():
    while True:
        _peak_kb[0] = max(_peak_kb[0], _tree_rss_kb())
        threading.Event().wait(0.05)  # a rank holds its memory for seconds; a walk of /proc costs CPU

threading.Thread(target=_sample, daemon=True).start()

def peak_rss_mb():
    # The sampled sum over this process and its children (shared pages counted in each: an upper
    # bound), or this process's exact peak (``ru_maxrss``) when that is higher. Linux keeps
    # ``ru_maxrss`` across fork and exec, so the benchmark itself must stay small.
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return max(own, _peak_kb[0], _tree_rss_kb()) / 1024
"""


def run_child(code: str, *argv: str) -> dict:
    """Run ``code`` in a new interpreter (its own peak RSS), with Python's bytecode cache on, as a user's is; it
    prints one JSON line last.

    ``peak_rss_mb()`` is defined for ``code``: the peak RSS of its process and any it starts.
    """
    code = TREE_RSS + code
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's modules are compiled once, not in every process
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
        self.rows.append((name, f"{measured:,.2f}{unit} (target >= {limit:,.2f}{unit})", measured >= limit))

    def check(self, name: str, ok: bool, text: str) -> None:
        self.rows.append((name, text, ok))

    def report(self) -> int:
        print("targets:")
        for name, text, ok in self.rows:
            print(f"  {'met    ' if ok else 'MISSED '} {name}: {text}")
        return 0 if all(ok for _, _, ok in self.rows) else 1


def ratio_spread(numerators: list[float], denominators: list[float]) -> tuple[float, str]:
    """The ratio of the medians, and its spread over repeats: each repeat's own ratio (its runs of the
    two sides, measured one after the other), as min-max of n."""
    ratio = statistics.median(numerators) / statistics.median(denominators)
    return ratio, spread_of([a / b for a, b in zip(numerators, denominators)])


def spread_of(ratios: list[float], digits: int = 2) -> str:
    """The spread of repeats' own ratios, as min-max of n."""
    if len(ratios) == 1:
        return "1 repeat"
    return f"repeats {min(ratios):.{digits}f}-{max(ratios):.{digits}f}, n={len(ratios)}"
