"""What error messages say about the trace formats: how each format is named, what was expected, and the
error for an input no format matches. A leaf: the format modules and the registry both read it."""

from __future__ import annotations

from pathlib import Path

from rnnprof.errors import InputError

# How error messages name each format (``Format.description``).
# Short: an error line names them all and stays readable (docs/formats.md has each in full).
RUNDIR = "run directory"
XPLANE_DIR = "folder of XSpace files (*.xplane.pb)"
GRAPHS_DIR = "folder with a graphs/ subfolder of GraphDefs"
RANK_FOLDER = "rank folder"
KINETO = "Kineto JSON"
CHROME_JSON = "TF timeline/xprof JSON"
XPLANE = ".xplane.pb"
RUN_METADATA = "RunMetadata .pb"
RUN_METADATA_GRAPHS = "TensorFlow RunMetadata with graphs (.pb)"
GRAPHDEF = "TensorFlow GraphDef (.pb)"
GRAPHDEF_TEXT = "TensorFlow GraphDef in text form (.pbtxt)"

# The formats holding events, in the registry's order (the folder of XSpaces is named by "xplane").
EXPECTED = "one of: " + ", ".join((RUNDIR, RANK_FOLDER, KINETO, CHROME_JSON, XPLANE, RUN_METADATA))
GRAPHS_EXPECTED = "a TensorFlow GraphDef (.pb/.pbtxt), a RunMetadata .pb or an rnnprof run directory"
ANY_EXPECTED = f"{EXPECTED}, GraphDef"
UNREADABLE = "not a readable GraphDef or RunMetadata (truncated or another format?)"

# What to say when no format holding what the caller wants matches, by what was wanted: the problem for a
# directory, for an empty file and for another file, and the expected formats ("matches" wanting anything).
_NO_MATCH = {
    "events": (("holds no manifest.json, .xplane.pb or rank file", EXPECTED), ("is empty", EXPECTED),
               ("matches no trace format", EXPECTED)),
    "graphs": (("is a directory without manifest.json or graphs/", GRAPHS_EXPECTED), ("is empty", GRAPHS_EXPECTED),
               (UNREADABLE, GRAPHS_EXPECTED)),
    None: (("holds no manifest.json, .xplane.pb or rank file", EXPECTED), ("is empty", EXPECTED),
           ("matches no trace or graph format", ANY_EXPECTED)),
}


def no_match_error(path: Path, is_dir: bool, holding: str | None, is_empty: bool = False) -> InputError:
    """The error for ``path`` when no format holding ``holding`` ("events", "graphs"; None: any) matches it."""
    directory, empty, other = _NO_MATCH[holding]
    problem, expected = directory if is_dir else empty if is_empty else other
    return InputError(path, problem, expected)
