"""What the loaders read, kept while a memo is active: the tables of a ``rnnprof.open`` run, read once for all its
analyses.

``remembered(kind, path, load)`` calls ``load()`` the first time ``path`` is read as ``kind`` (``"events"``: a
source's event table, ``"rank"``: one rank file's table, ``"kineto"``: a Kineto file as read, which a run
directory's merged table and its rank files share, ``"shapes"``: a Kineto trace's operator shapes) while a
``TableMemo`` is active (``with memo:``), and gives what it kept every later time; with no memo active (every
command), it only calls ``load()``. A table comes back as a copy whose metadata may be set without touching the
kept one (merging one table stamps its alignment there); its arrays are shared, as the analyzers never write
them. The memo holds what it read until it is dropped: a file changed since is read again only by a new memo.
"""

from __future__ import annotations

import dataclasses
import os
from contextvars import ContextVar
from pathlib import Path
from typing import Callable, TypeVar

from rnnprof.events import EventTable

T = TypeVar("T")

_ACTIVE: ContextVar["TableMemo | None"] = ContextVar("rnnprof_table_memo", default=None)


class TableMemo:
    """The tables read while it is active (``with memo:``), by what they are and their file's resolved path;
    ``reads`` counts the loads it did not spare."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str], object] = {}
        self._tokens: list = []
        self.reads = 0

    def __enter__(self) -> "TableMemo":
        self._tokens.append(_ACTIVE.set(self))
        return self

    def __exit__(self, *exc) -> None:
        _ACTIVE.reset(self._tokens.pop())

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, kind: str, path: str | os.PathLike, load: Callable[[], T]) -> T:
        key = (kind, str(Path(path).resolve()))
        if key not in self._kept:
            self.reads += 1
            self._kept[key] = load()
        return _fresh(self._kept[key])


def remembered(kind: str, path: str | os.PathLike, load: Callable[[], T]) -> T:
    """``load()``, or what the active memo kept of ``path`` read as ``kind``."""
    memo = _ACTIVE.get()
    return load() if memo is None else memo.get(kind, path, load)


def _fresh(value):
    """A kept table as a copy with metadata of its own (anything else as it is)."""
    if isinstance(value, EventTable):
        return dataclasses.replace(value, metadata=dataclasses.replace(value.metadata))
    return value
