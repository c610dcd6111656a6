"""What a format module gets and gives: the ``Probe`` its sniff looks at, the ``Format`` entry that names its
functions, the ``GraphDefs`` its ``graphs`` returns; and picking the first format whose sniff matches."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from rnnprof.errors import InputError
from rnnprof.paths import broken
from rnnprof.traces.jsonstream import read_prefix
from rnnprof.traces.messages import no_match_error

PREFIX_BYTES = 1 << 16


@dataclass(frozen=True)
class Probe:
    """What sniffs look at: the first ``PREFIX_BYTES`` of a file's (gunzipped) content, or a directory."""

    path: Path
    prefix: bytes = b""
    is_dir: bool = False

    @property
    def is_empty(self) -> bool:
        return not self.is_dir and not self.prefix.strip()


@dataclass
class GraphDefs:
    """The GraphDef protos found in one input, by role; ``source`` names each one."""

    user: list = field(default_factory=list)  # [(source, GraphDef, function_prefix)]
    runtime: list = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Format:
    name: str
    description: str
    sniff: Callable[[Probe], bool]
    parse: Callable[[Path], object]
    events: Callable[[Path, object], object] | None = None  # (path, parsed) -> EventTable
    graphs: Callable[[Path, object], GraphDefs] | None = None
    listed: bool = True  # named in the "expected one of" of error messages (False: another entry names it)


def probe(path: str | os.PathLike) -> Probe:
    """Read what sniffs look at; a path that does not exist or cannot be read is an ``InputError``."""
    path = Path(path)
    if path.is_dir():
        return Probe(path, is_dir=True)
    problem = broken(path)
    if problem is not None:
        raise InputError(path, problem)
    return Probe(path, read_prefix(path, PREFIX_BYTES))


def first_match(target: Probe, formats: Sequence[Format], holding: str | None = None) -> Format:
    """The first of ``formats`` holding ``holding`` ("events", "graphs"; None: any) whose sniff matches.

    No match is an ``InputError`` naming the formats that were possible.
    """
    for fmt in formats:
        if (holding is None or getattr(fmt, holding) is not None) and fmt.sniff(target):
            return fmt
    raise no_match_error(target.path, target.is_dir, holding, target.is_empty)
