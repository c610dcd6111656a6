"""Size limits on what rnnprof reads, so a huge file or a gzip bomb fails with one line, not an OOM.

Two limits apply to every input file:

* ``max_input_bytes``: the most bytes one file may hold, counted after decompression
  (default 8 GiB; env ``RNNPROF_MAX_INPUT_BYTES`` or ``--max-input-size``).
* ``max_gzip_ratio``: a compressed file may expand to at most this many times its size
  once past ``GZIP_RATIO_FLOOR`` (default 200; env ``RNNPROF_MAX_GZIP_RATIO``). Real traces
  compress 5-50x; a bomb compresses about 1000x.

Every file is opened through ``open_limited`` or read through ``read_bytes``.
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import re
import zlib
from pathlib import Path
from typing import BinaryIO

from rnnprof.errors import InputError, UsageError

ENV_MAX_INPUT = "RNNPROF_MAX_INPUT_BYTES"
ENV_MAX_RATIO = "RNNPROF_MAX_GZIP_RATIO"
DEFAULT_MAX_INPUT_BYTES = 8 << 30
DEFAULT_MAX_GZIP_RATIO = 200
GZIP_RATIO_FLOOR = 64 << 20  # small files may expand freely: the ratio only matters for big outputs
GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 20
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

_override: int | None = None


def parse_size(text: str) -> int:
    """``"8G"``, ``"500MiB"``, ``"1048576"`` -> bytes (binary units)."""
    match = _SIZE.match(str(text))
    if not match:
        raise ValueError(f"expected a size such as 512M or 8G, got {text!r}")
    value = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if value <= 0:
        raise ValueError(f"expected a size above 0, got {text!r}")
    return value


def _env_int(name: str, default: int, parse) -> int:
    text = os.environ.get(name)
    if not text:
        return default
    try:
        return parse(text)
    except ValueError as exc:
        raise UsageError(f"{name}: {exc}") from None


def max_input_bytes() -> int:
    if _override is not None:
        return _override
    return _env_int(ENV_MAX_INPUT, DEFAULT_MAX_INPUT_BYTES, parse_size)


def max_gzip_ratio() -> int:
    return _env_int(ENV_MAX_RATIO, DEFAULT_MAX_GZIP_RATIO, lambda t: max(1, int(t)))


def set_max_input_bytes(value: int | None) -> None:
    """Override the limit for this process (``--max-input-size``); None goes back to env/default."""
    global _override
    _override = value


def add_argument(parser: argparse.ArgumentParser) -> argparse.Action:
    return parser.add_argument("--max-input-size", metavar="SIZE", default=None,
                        help=f"refuse input files larger than SIZE after decompression, e.g. 512M, 20G "
                             f"(default: ${ENV_MAX_INPUT} or 8G)")


def configure(args: argparse.Namespace) -> None:
    text = getattr(args, "max_input_size", None)
    if text is None:
        set_max_input_bytes(None)
        return
    try:
        set_max_input_bytes(parse_size(text))
    except ValueError as exc:
        raise UsageError(f"--max-input-size: {exc}") from None


def _too_big(path: Path, size: int | str, limit: int) -> InputError:
    return InputError(path, f"is larger than the input limit of {_human(limit)} ({size})",
                      f"a smaller file, or a higher limit with --max-input-size or {ENV_MAX_INPUT}")


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


def check_file(path: Path) -> int:
    """The on-disk size of ``path``; InputError when it is not a readable regular file or too big."""
    path = Path(path)
    try:
        st = path.stat()
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    if path.is_dir():
        raise InputError(path, "is a directory", "a file")
    limit = max_input_bytes()
    if st.st_size > limit:
        raise _too_big(path, _human(st.st_size), limit)
    return st.st_size


def read_bytes(path: Path) -> bytes:
    """The whole (uncompressed) file, after the size check: for protobufs and manifests."""
    path = Path(path)
    check_file(path)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None


class LimitedGzip(io.RawIOBase):
    """A gzip stream that stops with ``InputError`` once the output passes the size or ratio limit."""

    def __init__(self, path: Path, compressed_size: int):
        self.path = Path(path)
        self._gz = gzip.open(path, "rb")
        self._limit = max_input_bytes()
        self._ratio_limit = max(GZIP_RATIO_FLOOR, max_gzip_ratio() * compressed_size)
        self.produced = 0

    def readable(self) -> bool:
        return True

    def _count(self, n: int) -> None:
        self.produced += n
        if self.produced > self._limit:
            raise _too_big(self.path, f"more than {_human(self._limit)} once decompressed", self._limit)
        if self.produced > self._ratio_limit:
            raise InputError(self.path, f"decompresses to more than {max_gzip_ratio()}x its size (a gzip bomb?)",
                             f"a real compressed trace, or a higher ratio with {ENV_MAX_RATIO}")

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            parts = []
            while True:
                part = self.read(_CHUNK)
                if not part:
                    return b"".join(parts)
                parts.append(part)
        try:
            data = self._gz.read(size)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(self.path, f"truncated or corrupt compressed data ({exc})",
                             "a complete gzip file") from None
        self._count(len(data))
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        try:
            self._gz.close()
        finally:
            super().close()


def open_limited(path: Path) -> BinaryIO:
    """Open ``path`` for reading, transparently gunzipping, with the size limits applied."""
    path = Path(path)
    size = check_file(path)
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        magic = f.read(2)
    except OSError as exc:
        f.close()
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    if magic != GZIP_MAGIC:
        f.seek(0)
        return f
    f.close()
    return LimitedGzip(path, size)
