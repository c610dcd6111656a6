"""Read any supported trace into one ``EventTable``; the format is detected from the content.

``load_events(path)`` accepts a file or an rnnprof run directory; ``load_events([p1, p2, ...])``
loads each and merges them with ``concat`` (``align="absolute"``: the sources share a wall
clock, as the ranks of one job do; pass ``align="start"`` when they do not). ``load_aligned(paths, align)``
puts the tables on one clock first (``rnnprof.analyzers.align``: none, start or collectives) and records
the offsets it applied in ``metadata.alignment``. The formats, how each
is recognised and which module loads it are ``registry.REGISTRY``; what a command reads from the
paths it is given (events, graphs, manifest) is ``inputs.read_inputs``.
"""

from __future__ import annotations

import os

from rnnprof.analyzers import align as clock
from rnnprof.errors import InputError
from rnnprof.events import Alignment, EventTable
from rnnprof.traces.merge import merge_tables
from rnnprof.traces.messages import EXPECTED
from rnnprof.traces.registry import REGISTRY, identify, open_source, probe


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
    return merge_tables([open_source(p, holding="events").events() for p in paths], align)


def load_aligned(paths, align: str = "none") -> EventTable:
    """Several traces (one per rank or process) put on one clock, then merged.

    ``align``: "none" (the clocks as they are), "start" (every trace starts where the first does) or
    "collectives" (offsets measured on the end times of the collectives matched across the traces).
    ``metadata.alignment`` holds the method and each trace's ``ClockOffset``. A trace that
    shares no collective with the first one under "collectives" is an ``InputError``.
    """
    paths = list(paths)
    if not paths:
        raise InputError("(no paths)", "nothing to load", EXPECTED)
    if align not in clock.METHODS:
        raise ValueError(f"unknown alignment {align!r}")
    tables = [open_source(p, holding="events").events() for p in paths]
    if align == clock.START:
        offsets = clock.offsets_from_start(tables)
    elif align == clock.COLLECTIVES and len(tables) > 1:
        try:
            offsets = clock.offsets_from_collectives(tables)
        except clock.NothingToAlignOn as exc:
            raise InputError(exc.source, f"--align collectives: no collective in common with {exc.reference}",
                             "traces of ranks that ran the same collectives (NCCL kernels, gloo collectives)") from None
    else:
        offsets = clock.zero_offsets(tables)
    table = merge_tables(clock.align(tables, offsets))
    table.metadata.alignment = Alignment(align, tuple(offsets))
    return table


__all__ = ["load_events", "load_aligned", "detect_format", "merge_tables", "EXPECTED", "REGISTRY"]
