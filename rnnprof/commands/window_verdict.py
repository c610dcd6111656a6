"""The analysis of one capture window of a watched run, in a process of its own at the lowest priority
(``rnnprof watch`` starts one as each window is written, so that a crash or a slow analysis is the analysis's
alone, and the job's cores go to the job first): the window's audit, its comparison with the baseline window
(``diff``), and the verdict (``analyzers.watch.verdict``) written beside the window as ``verdict.json``.

    python -m rnnprof.commands.window_verdict WINDOW [--baseline BASELINE_WINDOW] [--anomalies FILE]

``--anomalies``: a JSON file of the anomalies that opened the window (``Anomaly.as_dict()`` each). A part that
fails (a trace that cannot be read) is said in the verdict's notes; the verdict is written all the same.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from rnnprof import rundir
from rnnprof.analyzers.audit import audit
from rnnprof.analyzers.diff import IncompatibleSides, diff
from rnnprof.analyzers.watch import Anomaly
from rnnprof.analyzers.watch.verdict import window_verdict
from rnnprof.commands import audit_inputs
from rnnprof.commands.diff import read_side
from rnnprof.errors import RnnprofError
from rnnprof.rundir.writer import atomic_write_json
from rnnprof.reports.watch import verdict_text


def verdict_document(window: Path, baseline: Path | None, anomalies: list[Anomaly]) -> dict:
    """The verdict on ``window`` as ``verdict.json`` holds it (``WindowVerdict.as_dict()``, ``audited`` and its
    ``text``)."""
    notes = []
    result = None
    try:
        result = audit(audit_inputs.read_audit_input([str(window)]))
    except (RnnprofError, ValueError, OSError) as exc:
        notes.append(f"the window could not be audited: {exc}")
    compared = None
    if baseline is not None:
        try:
            compared = diff(read_side([str(baseline)]), read_side([str(window)]))
        except (RnnprofError, IncompatibleSides, ValueError, OSError) as exc:
            notes.append(f"the window could not be compared with the baseline window: {exc}")
    verdict = window_verdict(window.name, anomalies, result, compared, baseline.name if baseline else None, notes)
    document = {**verdict.as_dict(), "audited": result is not None}
    document["text"] = verdict_text(document)
    return document


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rnnprof.commands.window_verdict")
    parser.add_argument("window", type=Path)
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--anomalies", type=Path, default=None)
    args = parser.parse_args(argv)
    anomalies = [Anomaly.from_dict(a) for a in json.loads(args.anomalies.read_text())] if args.anomalies else []
    document = verdict_document(args.window, args.baseline, anomalies)
    atomic_write_json(args.window / rundir.VERDICT, document)
    return 0


if __name__ == "__main__":
    sys.exit(main())
