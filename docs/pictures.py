"""Make the pictures in docs/ from the current code: ``make pictures`` (``python docs/pictures.py``).

* ``report.png``: ``rnnprof report`` of the two gloo rank files in tests/data, the top of the page as
  headless Chromium shows it (``apt-get install chromium`` where it is missing);
* ``explain.png``: ``rnnprof explain --plot`` (vl-convert, from the chart's Vega-Lite spec) of the sweep the
  explain page shows, made here with ``rnnprof scale ... --explain`` (a few minutes on 2 cores) unless
  ``--sweep DIR`` names one already made.

``--only report`` or ``--only explain`` makes one of them.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent
DATA = DOCS.parent / "tests" / "data"
REPORT_INPUTS = (DATA / "torch-gloo-rank0.json.gz", DATA / "torch-gloo-rank1.json.gz")
SWEEP_ARGS = ("--model", "rnnlm", "--preset", "small", "--devices", "1,2", "--variable-update",
              "replicated,parameter_server", "--warmup", "1", "--batches", "3", "--explain")
WINDOW = "1280,1500"  # wide enough for the report's two-column layout, tall enough for the findings and a chart


def rnnprof(*args: str) -> None:
    """Run an rnnprof command of this checkout; stop with its exit code when it fails."""
    done = subprocess.run([sys.executable, "-m", "rnnprof", *args])
    if done.returncode:
        sys.exit(f"pictures: rnnprof {args[0]} failed (exit {done.returncode})")


def chromium() -> str:
    """The headless browser's executable."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return name
    sys.exit("pictures: no chromium for the report's screenshot (apt-get install -y chromium)")


def report_picture(out: Path, work: Path) -> None:
    """Write the report of the gloo rank pair and screenshot its top into ``out``."""
    html = work / "report.html"
    rnnprof("report", *map(str, REPORT_INPUTS), "-o", str(html), "--force")
    subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--virtual-time-budget=10000", f"--window-size={WINDOW}", f"--screenshot={out}",
                    html.as_uri()], check=True, capture_output=True)


def explain_picture(out: Path, work: Path, sweep: Path | None) -> None:
    """Plot the lost-speedup chart of ``sweep`` (made first when None) into ``out``."""
    if sweep is None:
        sweep = work / "sweep"
        rnnprof("scale", *SWEEP_ARGS, "--out", str(sweep))
    rnnprof("explain", str(sweep), "--plot", str(out))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("report", "explain"), help="make one picture (default: both)")
    parser.add_argument("--sweep", type=Path, help="a sweep made by rnnprof scale --explain (default: make one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rnnprof-pictures-") as tmp:
        if args.only in (None, "report"):
            report_picture(DOCS / "report.png", Path(tmp))
        if args.only in (None, "explain"):
            explain_picture(DOCS / "explain.png", Path(tmp), args.sweep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
