"""What ``rnnprof report`` reads of a watched job's run directory (``rnnprof watch``): its ranks' series, its
anomalies and verdicts (``anomalies.jsonl``) and the manifest's ``watch`` object (its windows; where the watch was
killed before it wrote one, the windows found on disk), summed up by ``analyzers.watch.summary``."""

from __future__ import annotations

from pathlib import Path

from rnnprof import rundir
from rnnprof.analyzers.watch.summary import WatchSummary, watch_summary
from rnnprof.errors import InputError
from rnnprof.rundir.manifest import read_manifest_json
from rnnprof.rundir.series import read_series
from rnnprof.rundir.windows import read_lines, window_dirs


def is_watched_run(path: str | Path) -> bool:
    """A run directory that ``rnnprof watch`` wrote (it has ranks' series)."""
    return (Path(path) / rundir.SERIES_DIR).is_dir() and rundir.is_run_dir(Path(path))


def _windows_on_disk(run_dir: Path) -> list[dict]:
    """The windows in ``windows/``, as the manifest would list them, for a run whose watch wrote no summary."""
    found = []
    for folder in window_dirs(run_dir):
        first = rundir.window_first_step(folder.name)
        try:
            ranks = read_manifest_json(folder).get("ranks") or []
            steps = max((len(r.get("steps") or []) for r in ranks), default=0)
        except InputError:
            steps = 0
        if first is not None:
            found.append({"name": folder.name, "first_step": first, "steps": steps, "reason": ""})
    return found


def watched_summary(path: str | Path) -> WatchSummary:
    run_dir = Path(path)
    try:
        watch = read_manifest_json(run_dir).get("watch") or {}
    except InputError:
        watch = {}
    if not watch.get("windows"):
        watch = {**watch, "windows": _windows_on_disk(run_dir)}
    return watch_summary(read_series(run_dir), read_lines(run_dir), watch)
