"""A watched run's capture windows and anomalies in its run directory (``rnnprof watch``).

* ``windows/.request.json``: the window the ranks are asked to capture next (``WindowRequest``), replaced whole by
  the watch; each rank looks at it every ``REQUEST_POLL_S`` and captures a window once per number.
* ``windows/<k>-step<S>/``: window ``k``, a run directory of its own (its ranks' records and traces, its manifest),
  with ``verdict.json`` beside them once analysed.
* ``windows/.asks/``: windows asked for from another terminal (``rnnprof watch --capture RUN``): one file each,
  removed by the watch as it takes it, with its answer (``.answer``: the window's name, or why not) beside.
* ``anomalies.jsonl``: a line per anomaly as it was raised (``{"anomaly": ..., "window": name or null}``), a line
  per window's verdict (``{"verdict": ...}``), a line per note the watch made (``{"note": text, "step": n}``).
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec

from rnnprof import rundir
from rnnprof.files import atomic_write_bytes
from rnnprof.rundir.series import plain

REQUEST_POLL_S = 0.05  # how often a rank looks for a new window request
_ENCODE = msgspec.json.Encoder(enc_hook=plain).encode


@dataclass(frozen=True)
class WindowRequest:
    """Capture window ``number`` (folder ``name``) from step ``first_step``, for ``steps`` steps, on every rank."""

    number: int
    name: str
    first_step: int
    steps: int


def windows_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / rundir.WINDOWS_DIR


def write_request(run_dir: str | Path, request: WindowRequest) -> None:
    atomic_write_bytes(windows_dir(run_dir) / rundir.WINDOW_REQUEST, _ENCODE(request.__dict__))


def read_request(path: Path) -> WindowRequest | None:
    """The request in ``path`` (``request_path``), None where there is none or it cannot be read."""
    try:
        data = msgspec.json.decode(path.read_bytes())
        return WindowRequest(int(data["number"]), str(data["name"]), int(data["first_step"]), int(data["steps"]))
    except (OSError, msgspec.DecodeError, KeyError, TypeError, ValueError):
        return None


def request_path(run_dir: str | Path) -> Path:
    return windows_dir(run_dir) / rundir.WINDOW_REQUEST


def append_line(run_dir: str | Path, record: dict) -> str | None:
    """Append one record to ``anomalies.jsonl``; why not, where it could not be written."""
    try:
        with open(Path(run_dir) / rundir.ANOMALIES, "ab") as handle:
            handle.write(_ENCODE(record) + b"\n")
    except OSError as exc:
        return f"cannot write {Path(run_dir) / rundir.ANOMALIES}: {exc.strerror or exc}"
    return None


def keep_verdict(run_dir: str | Path, verdict: dict) -> str | None:
    """``verdict`` as the window's ``verdict.json`` where its folder exists and has none (the watch's own verdicts:
    an analysis that failed or had not ended); why not, where it could not be written."""
    folder = windows_dir(run_dir) / str(verdict.get("window", ""))
    path = folder / rundir.VERDICT
    if not verdict.get("window") or not folder.is_dir() or path.exists():
        return None
    try:
        atomic_write_bytes(path, _ENCODE(verdict))
    except OSError as exc:
        return f"cannot write {path}: {exc.strerror or exc}"
    return None


def read_lines(run_dir: str | Path) -> list[dict]:
    """Every whole record of ``anomalies.jsonl`` (none where it is missing)."""
    try:
        data = (Path(run_dir) / rundir.ANOMALIES).read_bytes()
    except OSError:
        return []
    found = []
    for line in data.split(b"\n"):
        try:
            value = msgspec.json.decode(line) if line.strip() else None
        except msgspec.DecodeError:
            continue
        if isinstance(value, dict):
            found.append(value)
    return found


def window_dirs(run_dir: str | Path) -> list[Path]:
    """The run's capture windows' folders, in order."""
    folder = windows_dir(run_dir)
    return sorted(p for p in folder.glob("*-step*") if p.is_dir()) if folder.is_dir() else []


def ask_for_window(run_dir: str | Path, wait_s: float) -> str | None:
    """Ask the watch of ``run_dir`` for a window now (another terminal): its answer within ``wait_s`` (the window's
    name, or why not), None where no watch took the ask."""
    asks = windows_dir(run_dir) / rundir.CAPTURE_ASKS
    asks.mkdir(parents=True, exist_ok=True)
    ask = asks / f"{time.time_ns()}-{os.getpid()}-{secrets.token_hex(3)}"
    answer = _answer(ask)
    atomic_write_bytes(ask, b"")
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if answer.exists():
            text = answer.read_text()
            answer.unlink(missing_ok=True)
            return text
        time.sleep(0.05)
    ask.unlink(missing_ok=True)
    return None


def take_asks(run_dir: str | Path) -> list[Path]:
    """The asks for a window waiting (``ask_for_window``), oldest first, removed as they are taken."""
    asks = windows_dir(run_dir) / rundir.CAPTURE_ASKS
    taken = []
    for path in sorted(asks.glob("*")) if asks.is_dir() else []:
        if path.name.endswith(ANSWER) or path.name.startswith("."):
            continue
        try:
            path.unlink()
        except OSError:
            continue
        taken.append(path)
    return taken


def _answer(ask: Path) -> Path:
    return ask.with_name(ask.name + ANSWER)


ANSWER = ".answer"


def answer_ask(ask: Path, text: str) -> None:
    try:
        atomic_write_bytes(_answer(ask), text.encode())
    except Exception:  # the asking terminal has gone: nothing to tell
        pass
