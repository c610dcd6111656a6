"""Read any supported trace into one ``EventTable``; the format is detected from the content.

``load_events(path)`` accepts a file or an rnnprof run directory; ``load_events([p1, p2, ...])``
loads each and merges them with ``concat`` (``align="absolute"``: the sources share a wall
clock, as the ranks of one job do; pass ``align="start"`` when they do not). The formats, how each
is recognised and which module loads it are ``registry.REGISTRY``; what a command reads from the
paths it is given (events, graphs, manifest) is ``inputs.read_inputs``.
"""

from __future__ import annotations

import os

from rnnprof.errors import InputError
from rnnprof.events import EventTable, concat
from rnnprof.profiler.loaders.registry import EXPECTED, REGISTRY, identify, open_source, probe


def detect_format(path: str | os.PathLike) -> str:
    """Name the format of ``path`` from its content: "rundir", "xplane-dir", "kineto", "chrome-json", "xplane",
    "run-metadata"."""
    return identify(probe(path), holding="events").name


def load_events(path_or_paths, align: str = "absolute") -> EventTable:
    """Load one trace (file or run directory) or several (merged with explicit ``align``)."""
    if isinstance(path_or_paths, (str, os.PathLike)):
        return open_source(path_or_paths, holding="events").events()
    paths = list(path_or_paths)
    if not paths:
        raise InputError("(no paths)", "nothing to load", EXPECTED)
    return merge([open_source(p, holding="events").events() for p in paths], align)


def merge(tables: list[EventTable], align: str = "absolute") -> EventTable:
    """One table, or several merged on a common clock (``align`` recorded in the metadata)."""
    if len(tables) == 1:
        return tables[0]
    merged = concat(tables, align=align)
    merged.metadata["align"] = align
    return merged


__all__ = ["load_events", "detect_format", "merge", "EXPECTED", "REGISTRY"]
