"""A watched job's step series in its run directory: ``series/rank<r>.jsonl``, one file per rank, appended a
step at a time as the rank runs (``rnnprof watch``; the columns: ``events.series``).

The file is JSON lines, written by msgspec: a header object (``{"format": "rnnprof-series", "version", "rank",
"pid", "host", "columns", "memory_source", "unmeasured", "started"}``), then one array a step, its values in the
header's ``columns`` order (null: not measured). Each step is one ``write`` to a file opened for appending, so a
rank killed at any moment leaves every step it finished; a line cut short (a rank killed in the middle of a write,
a full disk) has no newline and is not read. A rank started again (torchrun's restarts) appends a new header and
its steps after the old ones: the reader numbers them on from the last (``RankSeries.restarts``).

``SeriesWriter`` never raises into the training loop: a write that fails (a full disk, a folder made read-only)
stops the rank's series there, and ``error`` says why. ``SeriesTail`` reads what every rank has added since it last
looked (the watch, while the job runs); ``read_series`` reads a finished run's whole series.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from rnnprof import rundir
from rnnprof.events.series import (COLUMNS, DATA_BEFORE_FORWARD, MEMORY_RSS, SERIES_FORMAT, SERIES_VERSION,
                                   RankSeries, series_from_rows)

def plain(value):
    """What msgspec cannot encode as it is (its ``enc_hook``): numpy's numbers as Python's, anything else as text."""
    item = getattr(value, "item", None)
    return item() if callable(item) else str(value)


_ENCODE = msgspec.json.Encoder(enc_hook=plain).encode
_DECODER = msgspec.json.Decoder()


def series_path(run_dir: str | Path, rank: int) -> Path:
    return Path(run_dir) / rundir.SERIES_DIR / rundir.series_name(rank)


def series_header(rank: int, memory_source: str = MEMORY_RSS, unmeasured: dict[str, str] | None = None,
                  data_source: str = DATA_BEFORE_FORWARD) -> dict:
    """The first line of a rank's series: this process's pid and host, what the rank cannot measure and what its
    data wait is."""
    return {"format": SERIES_FORMAT, "version": SERIES_VERSION, "rank": int(rank), "pid": os.getpid(),
            "host": socket.gethostname(), "columns": list(COLUMNS), "memory_source": memory_source,
            "unmeasured": dict(unmeasured or {}), "data_source": data_source, "started": time.time()}


class SeriesWriter:
    """One rank's series file, appended a step at a time (see the module); never raises."""

    def __init__(self, path: str | Path, header: dict):
        self.path = Path(path)
        self.error: str | None = None  # why the series stopped, once it has
        self.rows = 0
        self._fd: int | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            if os.fstat(self._fd).st_size and not _ends_with_newline(self.path):  # a line cut short before
                os.write(self._fd, b"\n")
            os.write(self._fd, _ENCODE(header) + b"\n")
        except OSError as exc:
            self._fail(exc)

    def append(self, row: list) -> bool:
        """Add one step (values in ``COLUMNS`` order); False once the series has stopped."""
        if self._fd is None:
            return False
        try:
            os.write(self._fd, _ENCODE(row) + b"\n")
        except OSError as exc:
            self._fail(exc)
            return False
        self.rows += 1
        return True

    def _fail(self, exc: OSError) -> None:
        self.error = f"cannot write {self.path}: {exc.strerror or exc}"
        self.close()

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None


def _ends_with_newline(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) == b"\n"
    except OSError:
        return True


@dataclass
class _RankFile:
    """What has been read of one rank's file: where the next read starts, its header, its rows so far."""

    offset: int = 0
    header: dict = field(default_factory=dict)
    restarts: int = 0
    step_base: float = 0.0  # added to the steps of a restarted process, so that they go on from the last
    last_step: float = -1.0
    order: list[int] = field(default_factory=list)  # where each column of the file's rows goes in COLUMNS


def _parse(lines: list[bytes], state: _RankFile) -> list[list]:
    """The rows of complete ``lines`` in ``COLUMNS`` order, headers taken into ``state`` on the way."""
    rows = []
    for line in lines:
        try:
            value = _DECODER.decode(line)
        except msgspec.DecodeError:
            continue  # a damaged line is skipped, not the series
        if isinstance(value, dict):
            if value.get("format") == SERIES_FORMAT:
                _take_header(value, state)
            continue
        if not isinstance(value, list) or not state.order:
            continue
        row = [None] * len(COLUMNS)
        for where, item in zip(state.order, value):
            if where >= 0:
                row[where] = item if isinstance(item, (int, float)) else None
        if isinstance(row[0], (int, float)):
            row[0] = row[0] + state.step_base
            state.last_step = row[0]
        rows.append(row)
    return rows


def _take_header(header: dict, state: _RankFile) -> None:
    if state.header:  # a process started again: its steps go on from the last one read
        state.restarts += 1
        state.step_base = state.last_step + 1
    state.header = header
    columns = header.get("columns") or []
    state.order = [COLUMNS.index(c) if c in COLUMNS else -1 for c in columns]


def _read_new(path: Path, state: _RankFile) -> list[list]:
    """The rows ``path`` gained since ``state.offset`` (complete lines only); the offset moves past them."""
    try:
        with open(path, "rb") as handle:
            handle.seek(state.offset)
            data = handle.read()
    except OSError:
        return []
    end = data.rfind(b"\n")
    if end < 0:
        return []
    state.offset += end + 1
    return _parse(data[:end].split(b"\n"), state)


def _series(rank: int, rows: list[list], state: _RankFile) -> RankSeries:
    header = state.header
    return series_from_rows(rank, rows, pid=header.get("pid"), host=str(header.get("host") or ""),
                            memory_source=str(header.get("memory_source") or MEMORY_RSS),
                            unmeasured=dict(header.get("unmeasured") or {}), restarts=state.restarts,
                            data_source=str(header.get("data_source") or DATA_BEFORE_FORWARD))


def series_ranks(run_dir: str | Path) -> list[int]:
    """The ranks with a series file in ``run_dir``."""
    found = []
    for path in (Path(run_dir) / rundir.SERIES_DIR).glob(rundir.series_name("*")):
        rank = rundir.series_rank(path.name)
        if rank is not None:
            found.append(rank)
    return sorted(found)


class SeriesTail:
    """The steps every rank has added to its series since the last ``read()`` (the watch, while the job runs)."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self._files: dict[int, _RankFile] = {}

    def read(self) -> dict[int, RankSeries]:
        """rank -> its new steps (ranks with none left out)."""
        new = {}
        for rank in series_ranks(self.run_dir):
            state = self._files.setdefault(rank, _RankFile())
            rows = _read_new(series_path(self.run_dir, rank), state)
            if rows:
                new[rank] = _series(rank, rows, state)
        return new


def read_series(run_dir: str | Path) -> dict[int, RankSeries]:
    """Every rank's whole series (see the module): rank -> ``RankSeries``."""
    tail = SeriesTail(run_dir)
    found = tail.read()
    return {rank: found.get(rank) or _series(rank, [], state) for rank, state in tail._files.items()}
