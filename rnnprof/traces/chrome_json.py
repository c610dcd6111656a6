"""Chrome-trace JSON decoded whole: TF1 timelines, rnnprof timelines and xprof trace_viewer JSON.

Their first bytes do not tell them apart (the process names that do may come anywhere in the file),
so the document is decoded once and the kind is read off the decoded document:

* rnnprof timeline: ``otherData.producer == "rnnprof"`` (``tf_chrome``, step from ``otherData.step``);
* TF1 ``timeline.Timeline``: a process named ``"<TF device> Compute"`` (``tf_chrome``);
* xprof trace_viewer: a process named ``/host:...`` or ``/device:...`` (``trace_viewer``);
* a Kineto trace whose first bytes carried too few Kineto keys for ``kineto.sniff``: Kineto event
  categories among its first events (``kineto.load_decoded``, from the decoded events).
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from rnnprof.errors import InputError
from rnnprof.events import EventTable, parse_tf_device
from rnnprof.traces import kineto, tf_chrome, trace_viewer
from rnnprof.traces.jsonstream import read_content
from rnnprof.traces.messages import EXPECTED
from rnnprof.traces.tf_chrome import as_dict, as_key, metadata_names, trace_events

_KINETO_LOOKAHEAD = 10000  # events inspected for Kineto categories


def sniff(probe) -> bool:
    return not probe.is_dir and probe.prefix.lstrip()[:1] in (b"{", b"[") and not kineto.looks_like(probe.prefix)


def parse(path: Path) -> object:
    """The whole document, decoded."""
    raw = read_content(path, expected="a complete file")
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise InputError(path, f"not valid JSON ({exc})", "a complete JSON document") from None


def events(path: Path, doc: object) -> EventTable:
    if is_rnnprof(doc):
        return tf_chrome.load_doc(path, doc, tf_chrome.RNNPROF_FORMAT, step=doc_step(doc))
    if is_tf1_timeline(doc):
        return tf_chrome.load_doc(path, doc, tf_chrome.TF1_FORMAT)
    if is_trace_viewer(doc):
        return trace_viewer.load_doc(path, doc)
    if has_kineto_events(doc):
        header = {k: v for k, v in doc.items() if k != "traceEvents"} if isinstance(doc, dict) else {}
        return kineto.load_decoded(path, trace_events(doc), header)
    raise InputError(path, "is JSON but not a trace this tool knows", EXPECTED)


def load(path: Path) -> EventTable:
    """Parse and load one file known to be Chrome-trace JSON (an rnnprof run's timeline)."""
    return events(path, parse(path))


def is_rnnprof(doc: object) -> bool:
    return as_dict(as_dict(doc).get("otherData")).get("producer") == "rnnprof"


def doc_step(doc: object) -> int:
    """The step an rnnprof timeline records in ``otherData.step`` (-1 when absent or not a number)."""
    step = as_dict(as_dict(doc).get("otherData")).get("step", -1)
    return step if isinstance(step, int) and not isinstance(step, bool) and -1 <= step < 2**31 else -1


def is_tf1_timeline(doc: object) -> bool:
    processes, _ = metadata_names(trace_events(doc))
    return any(n.endswith(" Compute") and parse_tf_device(n) for n in processes.values())


def is_trace_viewer(doc: object) -> bool:
    processes, _ = metadata_names(trace_events(doc))
    return any(name.startswith(("/host:", "/device:")) for name in processes.values())


def has_kineto_events(doc: object) -> bool:
    return any(isinstance(e, dict) and as_key(e.get("cat")) in kineto.CATEGORY_KIND
               for e in trace_events(doc)[:_KINETO_LOOKAHEAD])
