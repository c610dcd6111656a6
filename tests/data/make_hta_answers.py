"""HTA 0.5.0's answers for the Kineto traces of this folder, written to ``hta-answers.json``: the oracle
``tests/test_comm_hta_steps.py`` holds rnnprof's step selection, breakdown, overlap and idle causes to.

    python tests/data/make_hta_answers.py            # every trace the tests ask about (about a minute)
    python tests/data/make_hta_answers.py --check NAME  # HTA on one stored key again; exit 1 if it differs

Each answer is HTA's ``get_temporal_breakdown``, ``get_comm_comp_overlap`` and ``get_idle_time_breakdown`` (at
each ``consecutive_kernel_delay`` of ``DELAYS``) for a folder holding the named traces, with
``include_last_profiler_step`` as keyed. HTA parses ranks in a fork pool: run this as a script, not in a test's
process.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ANSWERS = HERE / "hta-answers.json"
# HTA's consecutive_kernel_delay: 30 is its default (compared with µs timestamps), 0.03 is 30 ns.
DELAYS = ("30", "0.03")
NCCL = ("kineto-2rank-nccl-rank0.json.gz",)
SAMPLED = ("kineto-sampled-rank0.json.gz", "kineto-sampled-rank1.json.gz")


def key(names, include_last: bool) -> str:
    """The answers' key of a folder of ``names`` read with ``include_last``."""
    return "+".join(names) + ("|whole" if include_last else "|drop-last")


def asked(kineto, cannot_read) -> list[tuple[tuple[str, ...], bool]]:
    """Every (trace names, include_last) the tests ask HTA about."""
    singles = [((name,), False) for name in kineto if name not in cannot_read and (name,) != NCCL]
    return [(NCCL, True), (NCCL, False), (SAMPLED, True), (SAMPLED, False), *singles]


def analyse(folder: str, include_last: bool) -> dict:
    """HTA's figures for the traces in ``folder``."""
    warnings.simplefilter("ignore")
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    from hta.trace_analysis import TraceAnalysis

    analysis = TraceAnalysis(trace_dir=folder, include_last_profiler_step=include_last)
    ranks = sorted(analysis.t.traces)
    out = {"breakdown": {}, "idle": {}}
    breakdown = analysis.get_temporal_breakdown(visualize=False).set_index("rank")
    overlap = analysis.get_comm_comp_overlap(visualize=False).set_index("rank")
    for rank, row in breakdown.iterrows():
        span = row["kernel_time(us)"]
        out["breakdown"][str(rank)] = {"idle_pct": 100 * row["idle_time(us)"] / span,
                                       "compute_pct": 100 * row["compute_time(us)"] / span,
                                       "non_compute_pct": 100 * row["non_compute_time(us)"] / span,
                                       "span_us": span, "overlap_pct": overlap.loc[rank, "comp_comm_overlap_pctg"]}
    for delay in DELAYS:
        idle, _ = analysis.get_idle_time_breakdown(ranks=ranks, visualize=False, consecutive_kernel_delay=float(delay))
        out["idle"][delay] = [[int(r.rank), int(r.stream), r.idle_category, float(r.idle_time)]
                              for r in idle.itertuples()]
    return out


def answer(names, include_last: bool) -> dict:
    """HTA's figures for a fresh folder holding copies of ``names``, as JSON reads them back (NaN kept)."""
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            shutil.copy(HERE / name, Path(folder) / name)
        return json.loads(json.dumps(analyse(folder, include_last)))


def _same(a, b) -> bool:
    """Equal, NaN equal to NaN."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", metavar="KEY", help="run HTA on one stored key again and compare")
    args = parser.parse_args(argv)
    if args.check:
        stored = json.loads(ANSWERS.read_text())[args.check]
        names, _, setting = args.check.partition("|")
        fresh = answer(names.split("+"), setting == "whole")
        print(json.dumps({"same": _same(stored, fresh), "fresh": fresh}))
        return 0 if _same(stored, fresh) else 1
    sys.path.insert(0, str(HERE.parent))
    from fixtures import KINETO
    from test_comm_hta_steps import HTA_CANNOT_READ

    answers = {key(names, last): answer(names, last) for names, last in asked(KINETO, HTA_CANNOT_READ)}
    import hta

    answers["_made_by"] = f"HTA {getattr(hta, '__version__', '0.5.0')}, tests/data/make_hta_answers.py"
    ANSWERS.write_text(json.dumps(answers, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
