"""Files written whole or not at all: a scratch file beside the target, synced, then renamed over it. A
reader never sees half a file, and a failed write leaves what was there before. Used by the run directory's
writer, the captures and the commands that write outputs."""

from __future__ import annotations

import gzip
import json
import os
import secrets
from pathlib import Path

from rnnprof.errors import InputError


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    path = Path(path)
    try:
        _write_then_rename(path, data)
    except OSError as exc:  # disk full, file size limit, permissions: one line naming the file
        raise InputError(path, f"cannot write: {exc.strerror or exc}",
                         "a writable location with free space") from exc
    return path


def _file_mode() -> int:
    """0666 less the process umask: the mode ``open()`` would give a new file."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


_FILE_MODE = _file_mode()


def _write_then_rename(path: Path, data: bytes) -> None:
    """The scratch file is named before it is made, so that an interruption at any point (a signal handler that
    raises, even between the file's creation and the call's return) leaves no scratch file behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = None
    try:
        while True:
            tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                break
            except FileExistsError:
                tmp = None
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), _FILE_MODE)  # made 0600; a run is shared like any file
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if tmp is not None:
            _remove(tmp)
        raise


def _remove(tmp: Path) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass


def atomic_write_json(path: str | Path, value, gzipped: bool = False) -> Path:
    data = json.dumps(value, separators=(",", ":") if gzipped else None, indent=None if gzipped else 2)
    raw = data.encode()
    if gzipped:
        raw = gzip.compress(raw, compresslevel=6, mtime=0)
    return atomic_write_bytes(path, raw)
