"""The formats rnnprof reads: each recognised from its first bytes, then parsed once, by its own loader.

A ``Format`` (``formats``) is a name (what ``detect_format`` returns), a description (how error messages name it),
a ``sniff`` that looks at a ``Probe`` (the first bytes of a file's content, read once and shared by
every sniff, or a directory's entries) without parsing anything, ``parse`` (the one full read of the
input) and what the parsed input gives: ``events`` (an ``EventTable``) and/or ``graphs`` (the GraphDef
protos of ``formats.GraphDefs``). Sniffs exclude one another, with one exception: a folder without a
manifest that holds both ``*.xplane.pb`` files and ``graphs/`` is "xplane-dir" for its events and
"graphs-dir" for its graphs (the first in ``REGISTRY`` order when both are wanted). Otherwise the order
only decides how error messages list the formats.

A new format is one module (with those functions) plus one entry here and its description in ``messages``;
the formats of single graph files are ``graph_files.GRAPH_FILES``, the last entries.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rnnprof.events import EventTable
from rnnprof.traces import chrome_json, kineto, messages, rank_folder, rnnprof_run, xplane
from rnnprof.traces.formats import Format, GraphDefs, Probe, first_match, probe
from rnnprof.traces.graph_files import GRAPH_FILES
from rnnprof.traces.left_out import leave_out
from rnnprof.traces.memo import remembered
from rnnprof.traces.messages import no_match_error

REGISTRY: tuple[Format, ...] = (
    Format("rundir", messages.RUNDIR, rnnprof_run.sniff, rnnprof_run.parse, rnnprof_run.events, rnnprof_run.graph_defs),
    Format("xplane-dir", messages.XPLANE_DIR, xplane.sniff_dir, xplane.parse_dir, xplane.events_dir, listed=False),
    Format("graphs-dir", messages.GRAPHS_DIR, rnnprof_run.sniff_graphs_only, rnnprof_run.parse_graphs_only,
           graphs=rnnprof_run.graph_defs, listed=False),
    Format("rank-folder", messages.RANK_FOLDER, rank_folder.sniff, rank_folder.parse, rank_folder.events),
    Format("kineto", messages.KINETO, kineto.sniff, kineto.parse, kineto.events),
    Format("chrome-json", messages.CHROME_JSON, chrome_json.sniff, chrome_json.parse, chrome_json.events),
    Format("xplane", messages.XPLANE, xplane.sniff, xplane.parse, xplane.events),
    *GRAPH_FILES,
)


def identify(target: Probe, holding: str | None = None) -> Format:
    """The format of the probed input among those holding ``holding`` ("events", "graphs"; None: any).

    No match is an ``InputError`` naming the formats that were possible.
    """
    return first_match(target, REGISTRY, holding)


@dataclass
class Source:
    """One input, identified and parsed once; ``events()`` and ``graph_defs()`` read what it holds from that."""

    path: Path
    format: Format
    parsed: object
    is_dir: bool = False

    @property
    def holds_events(self) -> bool:
        return self.format.events is not None

    @property
    def holds_graphs(self) -> bool:
        return self.format.graphs is not None

    def events(self) -> EventTable:
        if self.format.events is None:
            raise no_match_error(self.path, self.is_dir, "events")
        return remembered(f"events:{self.format.name}", self.path,
                          lambda: leave_out(self.format.events(self.path, self.parsed)))

    def graph_defs(self) -> GraphDefs:
        if self.format.graphs is None:
            raise no_match_error(self.path, self.is_dir, "graphs")
        return self.format.graphs(self.path, self.parsed)


def open_source(path: str | os.PathLike, holding: str | None = None) -> Source:
    """Identify ``path`` (a file or directory) and parse it: the one full parse it gets."""
    target = probe(path)
    fmt = identify(target, holding)
    return Source(target.path, fmt, fmt.parse(target.path), target.is_dir)
