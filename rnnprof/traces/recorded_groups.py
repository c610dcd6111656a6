"""A CPU rank's collectives' process groups from its flight recorder: the entries of the traced window written
beside the rank's Kineto trace (``rundir.flight_recorder_beside``, by ``recording.recorder_window``), read and
joined to the trace's ``c10d::*`` calls (gloo records no ``record_param_comms``, so the trace names no group).

The file: JSON, ``{"format": FORMAT, "version": 1, "rank", "window_ns", "entries"}``, each entry as torch's
``_dump_fr_trace_json()`` writes it (``process_group`` [name, description], ``profiling_name``, ``input_sizes``,
``record_id``, ``time_created_ns``). ``join_calls`` pairs the calls in the order they started with the entries in
the order they were made where their operation and input elements agree (``operation_key``); where the sequences
differ, their longest common subsequence (difflib), the rest counted; a pair whose entry was not made within its
call (``SLACK_NS``, on the trace's wall clock where it has one) is counted and left unjoined. Counts:
``RECORDER_COUNTS``. The rules as a user reads them: docs/commands/comm.md, "What a collective is".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from difflib import SequenceMatcher
from pathlib import Path

import msgspec

from rnnprof import rundir
from rnnprof.errors import InputError
from rnnprof.events import ProcessGroup
from rnnprof.events.names import CARRIED_OUT_AS, SEND_RECV, collective_type, p2p_direction
from rnnprof.limits import read_bytes

FORMAT = "rnnprof-flight-recorder-window"
VERSION = 1
EXPECTED = f"a JSON object with format {FORMAT!r} and an 'entries' list (rnnprof trace writes one beside each rank's trace)"
SLACK_NS = 50_000  # how far outside its call's recorded span an entry's creation may be (the two clocks' rounding)
# metadata.flight_recorder's counts: entries in the file (those unreadable left out and counted), calls joined to
# one, calls and entries left unjoined, and of the pairs in order those left unjoined for their times
RECORDER_COUNTS = ("entries", "entries_unreadable", "joined", "calls_without_entry", "entries_without_call",
                   "not_made_in_call")


@dataclass(frozen=True)
class RecordedEntry:
    """One flight-recorder entry: the group its work ran on, the operation, its input elements, when it was made."""

    group: ProcessGroup  # name and description (the members are the trace's, by name)
    operation: str  # torch's profiling name: gloo:all_gather
    elements: int  # input elements, all inputs together
    created_ns: int  # wall clock

    @property
    def key(self) -> tuple:
        return operation_key(self.operation, self.elements)


@dataclass(frozen=True)
class RecorderWindow:
    """The entries of a rank's traced window, in the order they were made (``record_id``), and how many could not
    be read."""

    entries: tuple[RecordedEntry, ...]
    unreadable: int = 0


@dataclass(frozen=True)
class CallSpan:
    """A ``c10d::*`` call as the join sees it: its operation key and its span on the wall clock (None: unknown)."""

    key: tuple
    start_ns: int | None = None
    end_ns: int | None = None


def operation_key(name: str, elements: int) -> tuple:
    """What a call and its entry agree on: the operation the run carries out (a reduce-scatter is an all-reduce of
    its whole input on gloo), a send's or receive's direction, the input elements (-1: not known)."""
    kind = collective_type(name)
    return CARRIED_OUT_AS.get(kind, (kind,))[0], p2p_direction(name) if kind == SEND_RECV else "", elements


def read_window(trace: str | Path) -> RecorderWindow | None:
    """The flight-recorder entries beside the Kineto trace ``trace``, None where there is no such file."""
    path = rundir.flight_recorder_beside(trace)
    if not path.is_file():
        return None
    try:
        document = msgspec.json.decode(read_bytes(path))
    except msgspec.DecodeError as exc:
        raise InputError(path, f"not JSON ({exc})", EXPECTED) from None
    if not isinstance(document, dict) or document.get("format") != FORMAT or not isinstance(document.get("entries"), list):
        raise InputError(path, "not a flight-recorder window", EXPECTED)
    read = [_entry(e) for e in sorted(document["entries"], key=_made)]
    kept = tuple(e for e in read if e is not None)
    return RecorderWindow(kept, len(read) - len(kept))


def _made(entry) -> int:
    """Where an entry comes in the order entries were made: torch's ``record_id``, else first."""
    made = entry.get("record_id") if isinstance(entry, dict) else None
    return made if isinstance(made, int) else -1


def _entry(entry) -> RecordedEntry | None:
    """An entry as torch writes it, None where a field the join needs is missing or of the wrong type."""
    if not isinstance(entry, dict):
        return None
    group, name, sizes, created = (entry.get(k) for k in ("process_group", "profiling_name", "input_sizes",
                                                          "time_created_ns"))
    if not (isinstance(group, list) and len(group) == 2 and all(isinstance(g, str) for g in group)
            and isinstance(name, str) and isinstance(created, int) and isinstance(sizes, list)):
        return None
    elements = _elements(sizes)
    return RecordedEntry(ProcessGroup(group[0], group[1]), name, elements, created) if elements >= 0 else None


def _elements(sizes: list) -> int:
    """Elements of every input (``[[2, 276], [8]]``), -1 where a size is not a list of whole numbers."""
    total = 0
    for shape in sizes:
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            return -1
        total += math.prod(shape)
    return total


def join_calls(calls: list[CallSpan], window: RecorderWindow) -> tuple[dict[int, RecordedEntry], dict[str, int]]:
    """Each call's entry (by the call's index in ``calls``, in the order they started) and the join's counts
    (``RECORDER_COUNTS``); the module says how."""
    entries = window.entries
    ours, theirs = [c.key for c in calls], [e.key for e in entries]
    if ours == theirs:
        pairs = [(k, k) for k in range(len(ours))]
    else:
        blocks = SequenceMatcher(None, ours, theirs, autojunk=False).get_matching_blocks()
        pairs = [(a + k, b + k) for a, b, size in blocks for k in range(size)]
    joined: dict[int, RecordedEntry] = {}
    for i, j in pairs:
        call, entry = calls[i], entries[j]
        if call.start_ns is None or call.start_ns - SLACK_NS <= entry.created_ns <= call.end_ns + SLACK_NS:
            joined[i] = entry
    counts = {"entries": len(entries), "entries_unreadable": window.unreadable, "joined": len(joined),
              "calls_without_entry": len(calls) - len(joined), "entries_without_call": len(entries) - len(joined),
              "not_made_in_call": len(pairs) - len(joined)}
    return joined, counts
