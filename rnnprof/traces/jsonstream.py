"""Stream the ``traceEvents`` array of a large Chrome-trace JSON document in chunks.

Decoding hundreds of MB of JSON whole needs several times that in memory, so the bytes are read in blocks
and cut into pieces of about ``PIECE_BYTES``, each decoded by msgspec on its own; the rest of the document
(a few KB of headers) is decoded at the end. A piece ends at a ``}`` followed by ``,`` and ``{``, a guess
checked by decoding ``[`` + piece + ``]``, which parses only between two complete events. When the guess
fails, the rest of the block is cut from the quote and bracket positions found with numpy (string-aware
depth), which also finds the array's end and reports malformed input.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import BinaryIO, Callable, Generator, Iterator

import msgspec
import numpy as np

from rnnprof.errors import InputError
from rnnprof.limits import open_limited

BLOCK_BYTES = 4 << 20  # read size
PIECE_BYTES = 64 << 10  # decode size
_EVENTS_KEY = b'"traceEvents"'
_BOUNDARY = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")  # a likely end of one event and start of the next
_SEPARATOR = re.compile(rb"[ \t\r\n]*,*")
_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError)


def open_maybe_gzip(path: Path) -> BinaryIO:
    """The file's content, gunzipped when compressed; size limits apply (``rnnprof.limits``)."""
    return open_limited(path)


def read_prefix(path: Path, nbytes: int = 1 << 16) -> bytes:
    """The first ``nbytes`` of the (decompressed) content, for format sniffing."""
    try:
        with open_maybe_gzip(path) as f:
            return f.read(nbytes)
    except (OSError, EOFError) as exc:
        raise InputError(path, f"cannot read: {exc}") from None


def read_content(path: Path, expected: str | None = None) -> bytes:
    """The whole (decompressed) content, for inputs parsed in one piece (protobufs, small JSON)."""
    try:
        with open_maybe_gzip(path) as f:
            return f.read()
    except (OSError, EOFError) as exc:
        raise InputError(path, f"cannot read: {exc}", expected) from None


def _brackets(buf: np.ndarray, depth0: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions of the brackets outside strings, the depth after each, and the bracket bytes.

    ``buf`` must start outside a string. Work is proportional to the number of quotes and
    brackets (a few per event), not a pass of arithmetic per byte.
    """
    quotes = np.flatnonzero(buf == 34)  # '"'
    if len(quotes) and (buf == 92).any():
        # A quote is escaped when an odd number of backslashes precedes it.
        run = np.zeros(len(quotes), dtype=np.int64)
        k = 1
        while True:
            prev = quotes - k
            more = (prev >= 0) & (run == k - 1)
            more[more] = buf[prev[more]] == 92
            if not more.any():
                break
            run[more] += 1
            k += 1
        quotes = quotes[run % 2 == 0]
    opens = (buf == 123) | (buf == 91)
    pos = np.flatnonzero(opens | (buf == 125) | (buf == 93))
    outside = np.searchsorted(quotes, pos) % 2 == 0  # an even number of quotes before it
    pos = pos[outside]
    depth = depth0 + np.cumsum(np.where(opens[pos], 1, -1), dtype=np.int64)
    return pos, depth, buf[pos]


class EventStream:
    """Iterate chunks of decoded ``traceEvents``; ``header`` is filled when done."""

    def __init__(self, path: Path, decode: Callable[[bytes], list], block_bytes: int = BLOCK_BYTES,
                 piece_bytes: int = PIECE_BYTES):
        self.path = Path(path)
        self.decode = decode
        self.block_bytes = block_bytes
        self.piece_bytes = max(1, piece_bytes)
        self.header: dict = {}
        self.bytes_read = 0
        self.cuts = {"guessed": 0, "exact": 0}  # pieces decoded after a guessed / an exactly found cut

    def __iter__(self) -> Iterator[list]:
        try:
            f = open_maybe_gzip(self.path)
        except OSError as exc:
            raise InputError(self.path, f"cannot read: {exc}") from None
        with f:
            blocks = self._blocks(f)
            head, carry, block = self._read_head(blocks)  # head: the bytes before the events array (and its '[')
            tail = yield from self._events(blocks, carry, block)  # tail: the bytes after the events array
            tail += b"".join(blocks)
        self.header = self._decode_header(head, tail)

    def _blocks(self, f) -> Iterator[bytes]:
        """The file's blocks, counted in ``bytes_read``, then one empty block at its end."""
        while True:
            try:
                block = f.read(self.block_bytes)
            except (OSError, EOFError, gzip.BadGzipFile) as exc:
                raise InputError(self.path, f"truncated or corrupt compressed data ({exc})",
                                 "a complete gzip file") from None
            self.bytes_read += len(block)
            yield block
            if not block:
                return

    def _read_head(self, blocks: Iterator[bytes]) -> tuple[bytes, bytes, bytes]:
        """The bytes before the events array (and its '['), the array's first bytes, and the block that read them."""
        head = b""
        for block in blocks:
            head += block
            start = self._find_events_start(head)
            if start is not None:
                return head[:start], head[start:], block
            if not block:
                break
        raise InputError(self.path, 'no "traceEvents" array found', "a Chrome trace JSON object")

    def _events(self, blocks: Iterator[bytes], carry: bytes, block: bytes) -> Generator[list, None, bytes]:
        """Yield the events array's pieces, decoded, from ``carry`` (its first bytes, read with ``block``) and the
        blocks after; returns the bytes after the array."""
        while True:
            if block:
                pos, all_cut = yield from self._pieces(carry)
                carry = carry[pos:]
                if all_cut:  # less than a piece is left: read on
                    block = next(blocks)
                    carry += block
                    continue
            events, carry, done = self._split(carry, final=not block)
            if events:
                yield events
            if done:
                return carry
            if not block:
                raise InputError(self.path, "the traceEvents array is cut off (truncated file?)",
                                 "a complete JSON document")
            block = next(blocks)
            carry += block

    def _find_events_start(self, head: bytes) -> int | None:
        """Offset just after the '[' of the top-level traceEvents array, if present yet."""
        pos = head.find(_EVENTS_KEY)
        if pos < 0:
            return None
        buf = np.frombuffer(head, dtype=np.uint8)
        brackets, depth, _ = _brackets(buf, 0)
        quotes = np.flatnonzero(buf == 34)
        while pos >= 0:
            # The key itself: a string directly inside the root object, followed by ': ['.
            before = np.searchsorted(brackets, pos) - 1
            level = depth[before] if before >= 0 else 0
            if level == 1 and np.searchsorted(quotes, pos) % 2 == 0:
                rest = head[pos + len(_EVENTS_KEY):pos + len(_EVENTS_KEY) + 64].lstrip()
                if rest.startswith(b":") and rest[1:].lstrip().startswith(b"["):
                    return head.index(b"[", pos + len(_EVENTS_KEY)) + 1
                if len(rest) < 2:
                    return None  # need more bytes to decide
            pos = head.find(_EVENTS_KEY, pos + 1)
        return None

    def _pieces(self, data: bytes) -> Generator[list, None, tuple[int, bool]]:
        """Decode ``data`` (inside the events array, at an event boundary) piece by piece.

        Returns the offset of the undecoded rest and whether every guessed cut decoded
        (False: the exact split takes over from that offset).
        """
        size, decode = self.piece_bytes, self.decode
        pos = _SEPARATOR.match(data).end()
        view = memoryview(data)
        try:
            while True:
                match = _BOUNDARY.search(data, pos + size)
                if match is None:
                    return pos, True
                cut = match.start() + 1
                try:
                    events = decode(b"".join((b"[", view[pos:cut], b"]")))
                except _DECODE_ERRORS:
                    return pos, False
                self.cuts["guessed"] += 1
                if events:
                    yield events
                pos = match.end() - 1
        finally:
            view.release()

    def _split(self, data: bytes, final: bool) -> tuple[list, bytes, bool]:
        """Decode the complete events at the front of ``data`` (which starts inside the array)."""
        buf = np.frombuffer(data, dtype=np.uint8)
        pos, depth, chars = _brackets(buf, 1)
        closing = pos[depth == 0]
        done = len(closing) > 0
        # An event ends at a '}' that brings the depth back to the array level.
        ends = pos[(depth == 1) & (chars == 125)]
        if done:
            ends = ends[ends < closing[0]]
        if len(ends) == 0:
            rest = data[int(closing[0]) + 1:] if done else data
            return [], rest, done
        cut = int(ends[-1]) + 1
        body = data[:cut].lstrip().lstrip(b",")
        try:
            events = self.decode(b"[" + body + b"]")
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError) as exc:
            raise InputError(self.path, f"malformed trace event ({exc})", "Chrome trace events") from None
        self.cuts["exact"] += 1
        rest = data[int(closing[0]) + 1:] if done else data[cut:]
        return events, rest, done

    def _decode_header(self, head: bytes, tail: bytes) -> dict:
        text = head.rstrip()
        text = text[:-1] if text.endswith(b"[") else text  # drop the array's '['
        doc = text + b"[]" + tail
        try:
            value = msgspec.json.decode(doc)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            raise InputError(self.path, "the JSON document is cut off or malformed outside the events",
                             "a complete JSON document") from None
        return value if isinstance(value, dict) else {}
