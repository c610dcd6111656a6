"""The formats rnnprof reads: each recognised from its first bytes, then parsed once, by its own loader.

A ``Format`` is a name (what ``detect_format`` returns), a description (how error messages name it),
a ``sniff`` that looks at a ``Probe`` (the first bytes of a file's content, read once and shared by
every sniff, or a directory's entries) without parsing anything, ``parse`` (the one full read of the
input) and what the parsed input gives: ``events`` (an ``EventTable``) and/or ``graphs`` (the GraphDef
protos of ``graphs.GraphDefs``). Sniffs exclude one another, with one exception: a folder without a
manifest that holds both ``*.xplane.pb`` files and ``graphs/`` is "xplane-dir" for its events and
"graphs-dir" for its graphs (the first in ``REGISTRY`` order when both are wanted). Otherwise the order
only decides how error messages list the formats.

A new format is one module (with those functions) plus one entry here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rnnprof.paths import broken
from rnnprof.errors import InputError
from rnnprof.traces import chrome_json, graphdef, kineto, rank_folder, rnnprof_run, run_metadata, xplane
from rnnprof.traces.jsonstream import read_prefix

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


@dataclass(frozen=True)
class Format:
    name: str
    description: str
    sniff: Callable[[Probe], bool]
    parse: Callable[[Path], object]
    events: Callable[[Path, object], object] | None = None  # (path, parsed) -> EventTable
    graphs: Callable[[Path, object], object] | None = None  # (path, parsed) -> graphs.GraphDefs
    listed: bool = True  # named in the "expected one of" of error messages (False: another entry names it)


REGISTRY: tuple[Format, ...] = (
    Format("rundir", "rnnprof run directory", rnnprof_run.sniff, rnnprof_run.parse, rnnprof_run.events, rnnprof_run.graph_defs),
    Format("xplane-dir", "folder of TensorFlow XSpace files (*.xplane.pb)", xplane.sniff_dir, xplane.parse_dir,
           xplane.events_dir, listed=False),
    Format("graphs-dir", "folder with a graphs/ subfolder of GraphDefs", rnnprof_run.sniff_graphs_only,
           rnnprof_run.parse_graphs_only, graphs=rnnprof_run.graph_defs, listed=False),
    Format("rank-folder", "folder of Kineto rank files", rank_folder.sniff, rank_folder.parse, rank_folder.events),
    Format("kineto", "Kineto/PyTorch profiler JSON (.json, .json.gz)", kineto.sniff, kineto.parse, kineto.events),
    Format("chrome-json", "TF1 timeline Chrome trace, rnnprof Chrome trace, xprof trace_viewer JSON",
           chrome_json.sniff, chrome_json.parse, chrome_json.events),
    Format("xplane", "TensorFlow XSpace (.xplane.pb)", xplane.sniff, xplane.parse, xplane.events),
    Format("run-metadata", "TensorFlow RunMetadata with step_stats (.pb)", run_metadata.sniff, run_metadata.parse,
           run_metadata.events, run_metadata.graph_defs),
    Format("run-metadata-graphs", "TensorFlow RunMetadata with graphs (.pb)", run_metadata.sniff_graphs_only,
           run_metadata.parse, graphs=run_metadata.graph_defs),
    Format("graphdef", "TensorFlow GraphDef (.pb)", graphdef.sniff, graphdef.parse, graphs=graphdef.graph_defs),
    Format("graphdef-text", "TensorFlow GraphDef in text form (.pbtxt)", graphdef.sniff_text, graphdef.parse_text,
           graphs=graphdef.graph_defs),
)

EXPECTED = "one of: " + ", ".join(f.description for f in REGISTRY if f.events and f.listed)
GRAPHS_EXPECTED = graphdef.EXPECTED
ANY_EXPECTED = f"{EXPECTED}, or a GraphDef (.pb, .pbtxt)"

# What to say when no format holding what the caller wants matches, by what was wanted: the problem for a
# directory, for an empty file and for another file, and the expected formats ("matches" wanting anything).
_NO_MATCH = {
    "events": (("is a directory without manifest.json, *.xplane.pb or rank files", EXPECTED), ("is empty", EXPECTED),
               ("matches no known trace format", EXPECTED)),
    "graphs": (("is a directory without manifest.json or graphs/", GRAPHS_EXPECTED), ("is empty", GRAPHS_EXPECTED),
               (graphdef.UNREADABLE, GRAPHS_EXPECTED)),
    None: (("is a directory without manifest.json, *.xplane.pb or rank files", EXPECTED), ("is empty", EXPECTED),
           ("matches no known trace format and is not a TensorFlow graph", ANY_EXPECTED)),
}


def probe(path: str | os.PathLike) -> Probe:
    """Read what sniffs look at; a path that does not exist or cannot be read is an ``InputError``."""
    path = Path(path)
    if path.is_dir():
        return Probe(path, is_dir=True)
    problem = broken(path)
    if problem is not None:
        raise InputError(path, problem)
    return Probe(path, read_prefix(path, PREFIX_BYTES))


def identify(target: Probe, holding: str | None = None) -> Format:
    """The format of the probed input among those holding ``holding`` ("events", "graphs"; None: any).

    No match is an ``InputError`` naming the formats that were possible.
    """
    candidates = [f for f in REGISTRY if holding is None or getattr(f, holding) is not None]
    for fmt in candidates:
        if fmt.sniff(target):
            return fmt
    raise no_match_error(target.path, target.is_dir, holding, target.is_empty)


def no_match_error(path: Path, is_dir: bool, holding: str | None, is_empty: bool = False) -> InputError:
    """The error ``identify`` gives when no format holding ``holding`` matches ``path``."""
    directory, empty, other = _NO_MATCH[holding]
    problem, expected = directory if is_dir else empty if is_empty else other
    return InputError(path, problem, expected)


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

    def events(self):
        if self.format.events is None:
            raise no_match_error(self.path, self.is_dir, "events")
        from rnnprof.traces.left_out import leave_out

        return leave_out(self.format.events(self.path, self.parsed))

    def graph_defs(self):
        if self.format.graphs is None:
            raise no_match_error(self.path, self.is_dir, "graphs")
        return self.format.graphs(self.path, self.parsed)


def open_source(path: str | os.PathLike, holding: str | None = None) -> Source:
    """Identify ``path`` (a file or directory) and parse it: the one full parse it gets."""
    target = probe(path)
    fmt = identify(target, holding)
    return Source(target.path, fmt, fmt.parse(target.path), target.is_dir)
