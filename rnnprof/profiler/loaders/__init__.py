"""Read any supported trace into one ``EventTable``; the format is detected from the content.

``load_events(path)`` accepts a file or an rnnprof run directory; ``load_events([p1, p2, ...])``
loads each and merges them with ``concat`` (``align="absolute"``: the sources share a wall
clock, as the ranks of one job do; pass ``align="start"`` when they do not).
"""

from __future__ import annotations

import os
from pathlib import Path

from rnnprof.errors import InputError
from rnnprof.events import EventTable, concat
from rnnprof.limits import GZIP_MAGIC
from rnnprof.profiler.loaders.jsonstream import open_maybe_gzip, read_prefix

FORMATS = (
    "rnnprof run directory",
    "Kineto/PyTorch profiler JSON (.json, .json.gz)",
    "TF1 timeline Chrome trace",
    "rnnprof Chrome trace",
    "xprof trace_viewer JSON",
    "TensorFlow XSpace (.xplane.pb)",
    "TensorFlow RunMetadata with step_stats (.pb)",
)
EXPECTED = "one of: " + ", ".join(FORMATS)


def detect_format(path: str | os.PathLike) -> str:
    """Name the format of ``path`` from its content: "rundir", "xplane-dir", "kineto", "chrome-json", "xplane",
    "run-metadata"."""
    path = Path(path)
    if path.is_dir():
        from rnnprof.profiler import rundir

        if rundir.is_run_dir(path):
            return "rundir"
        if list(path.rglob("*.xplane.pb")):
            return "xplane-dir"
        raise InputError(path, "is a directory without manifest.json or *.xplane.pb", EXPECTED)
    if not path.exists():
        raise InputError(path, "does not exist")
    prefix = read_prefix(path)
    stripped = prefix.lstrip()
    if not stripped:
        raise InputError(path, "is empty", EXPECTED)
    if stripped[:1] in (b"{", b"["):
        from rnnprof.profiler.loaders import kineto

        return "kineto" if kineto.looks_like(prefix) else "chrome-json"
    from rnnprof.profiler.loaders import xplane

    if xplane.looks_like(path):
        return "xplane"
    from rnnprof.profiler.loaders import run_metadata

    if run_metadata.looks_like(path):
        return "run-metadata"
    raise InputError(path, "matches no known trace format", EXPECTED)


def load_events(path_or_paths, align: str = "absolute") -> EventTable:
    """Load one trace (file or run directory) or several (merged with explicit ``align``)."""
    if isinstance(path_or_paths, (str, os.PathLike)):
        return _load_one(Path(path_or_paths))
    paths = [Path(p) for p in path_or_paths]
    if not paths:
        raise InputError("(no paths)", "nothing to load", EXPECTED)
    tables = [_load_one(p) for p in paths]
    if len(tables) == 1:
        return tables[0]
    merged = concat(tables, align=align)
    merged.metadata["align"] = align
    return merged


def _load_one(path: Path) -> EventTable:
    fmt = detect_format(path)
    if fmt == "rundir":
        from rnnprof.profiler.loaders import run_dir

        return run_dir.load(path)
    if fmt == "kineto":
        from rnnprof.profiler.loaders import kineto

        return kineto.load(path)
    if fmt == "chrome-json":
        return load_chrome_json(path)
    if fmt == "run-metadata":
        from rnnprof.profiler.loaders import run_metadata

        return run_metadata.load(path)
    from rnnprof.profiler.loaders import xplane

    if fmt == "xplane-dir":
        return xplane.load_dir(path)
    return xplane.load(path)


def load_chrome_json(path: Path) -> EventTable:
    """A small Chrome-trace-like JSON: TF1 timeline, rnnprof timeline or xprof trace_viewer."""
    from rnnprof.profiler.loaders import tf_chrome, trace_viewer

    try:
        with open_maybe_gzip(path) as f:
            raw = f.read()
    except (OSError, EOFError) as exc:
        raise InputError(path, f"cannot read: {exc}", "a complete file") from None
    doc = tf_chrome.decode_json(path, raw)
    if tf_chrome.is_rnnprof(doc):
        return tf_chrome.load_doc(path, doc, tf_chrome.RNNPROF_FORMAT, step=tf_chrome.doc_step(doc))
    if tf_chrome.is_tf1_timeline(doc):
        return tf_chrome.load_doc(path, doc, tf_chrome.TF1_FORMAT)
    if trace_viewer.looks_like(doc):
        return trace_viewer.load_doc(path, doc)
    from rnnprof.profiler.loaders import kineto

    if tf_chrome.trace_events(doc) and any(isinstance(e, dict) and tf_chrome.as_key(e.get("cat")) in kineto.CATEGORY_KIND
                                           for e in tf_chrome.trace_events(doc)[:10000]):
        return kineto.load(path)
    raise InputError(path, "is JSON but not a trace this tool knows", EXPECTED)


__all__ = ["load_events", "detect_format", "load_chrome_json", "FORMATS", "GZIP_MAGIC"]
