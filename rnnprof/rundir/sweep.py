"""A saved ``rnnprof scale`` sweep (``scale --out DIR``), written and read in one place.

    DIR/
      sweep.json                        the document ``scale --json`` prints, with "format": "rnnprof-sweep"
      configs/<mode>-<n>dev.json        one per measured configuration: its config and its result row

``rnnprof report DIR`` reads ``sweep.json``; the per-configuration files are for other tools.
"""

from __future__ import annotations

import json
from pathlib import Path

from rnnprof import limits
from rnnprof.errors import InputError, UsageError
from rnnprof.rundir.writer import atomic_write_json, safe_name

SWEEP_FILE = "sweep.json"
SWEEP_FORMAT = "rnnprof-sweep"
CONFIGS_DIR = "configs"
EXPECTED = "a folder written by rnnprof scale --out"


def check_sweep_out(path: str | Path) -> Path:
    """Refuse an ``--out`` that exists and holds anything, before any training."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise InputError(out, "exists and is not a directory", "a new or empty directory for the sweep")
    if out.is_dir() and any(out.iterdir()):
        raise UsageError(f"--out {out} exists and is not empty; choose a new directory for the sweep")
    return out


def write_sweep(out: str | Path, document: dict) -> Path:
    """``sweep.json`` and one file per configuration; every file written atomically."""
    out = Path(out)
    saved = {"format": SWEEP_FORMAT, **document}
    config = document.get("config", {})
    for row in document.get("rows", []):
        point = {**config, "devices": row["devices"], "variable_update": row["variable_update"]}
        name = safe_name(f"{row['variable_update']}-{row['devices']}dev") + ".json"
        atomic_write_json(out / CONFIGS_DIR / name, {"config": point, "result": row})
    atomic_write_json(out / SWEEP_FILE, saved)
    return out


def is_sweep_dir(path: str | Path) -> bool:
    return (Path(path) / SWEEP_FILE).is_file()


def read_sweep(path: str | Path) -> dict:
    """The saved document; one-line errors for anything that is not one."""
    file = Path(path) / SWEEP_FILE
    try:
        document = json.loads(limits.read_bytes(file))
    except (ValueError, RecursionError) as exc:
        raise InputError(file, f"unreadable sweep ({exc})", EXPECTED) from None
    if not isinstance(document, dict) or document.get("format") != SWEEP_FORMAT:
        raise InputError(file, f"not an rnnprof sweep (no \"format\": \"{SWEEP_FORMAT}\")", EXPECTED)
    rows = document.get("rows")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise InputError(file, "the sweep has no rows", EXPECTED)
    for row in rows:
        for key in ("devices", "variable_update", "words_per_second", "speedup"):
            if key not in row:
                raise InputError(file, f"a row lacks {key!r}", EXPECTED)
        if not isinstance(row["devices"], int) or not isinstance(row["words_per_second"], (int, float)):
            raise InputError(file, "a row's devices or words_per_second is not a number", EXPECTED)
    return document


# A sweep traced by scale --explain: each configuration's run directory under RUNS_DIR, the explanation in
# EXPLAIN_FILE.
RUNS_DIR = "runs"
EXPLAIN_FILE = "explain.json"


def run_dir_name(variable_update: str, devices: int, workers: int | None = None,
                 fake_location: str | None = None) -> str:
    """``<mode>-<n>dev``, ``<mode>-<w>x<n>dev`` on a cluster, ``-<location>`` for a ResNet's image location."""
    return (f"{variable_update}-" + (f"{workers}x" if workers else "") + f"{devices}dev"
            + (f"-{fake_location}" if fake_location else ""))
