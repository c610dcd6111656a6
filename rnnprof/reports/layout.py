"""Table layout shared by the reports: compact tables that fold rather than cut, and JSON output.

Compact tables have no vertical rules (two characters per column instead of three), right-aligned
numeric columns, and every cell folds when the terminal is too narrow, so a number is never
replaced by an ellipsis.

Text that comes from the input (op, kernel and device names, file paths, scopes, evidence,
manifest values, notes) never goes into rich markup: the reports pass it as ``rich.text.Text``
(``Text(name)``, or ``Text.assemble((literal, style), name)`` for a styled line), which rich
prints as it is, so ``[bold]``, ``[/]`` or ``:smile:`` in a name are shown, not interpreted.
Markup strings hold only the reports' own words.
"""

from __future__ import annotations

import os
import re
from typing import Callable, Sequence

from rich import box
from rich.console import Console
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from rnnprof.analyzers.critical_path import StepPath
from rnnprof.events import OUTSIDE_LAUNCH, OUTSIDE_NO_LAUNCH
from rnnprof.events.names import fold_brackets
from rnnprof.reports import json_text


def compact_table(first: str, numeric: tuple[str | Text, ...] | list[str | Text], *, title: str = "",
                  caption: str | Text = "", text_columns: tuple[str, ...] = ()) -> Table:
    """A table whose first column (and ``text_columns``) hold text and whose other columns hold numbers."""
    table = Table(title=title or None, title_justify="left", caption=caption or None, caption_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column(first, overflow="fold")
    for column in text_columns:
        table.add_column(column, overflow="fold")
    for column in numeric:
        table.add_column(column, justify="right", overflow="fold")
    return table


def short_name(name: str, limit: int = 60) -> str:
    """A kernel or op name for a table cell: a demangled C++ signature loses its return type, its template
    arguments and its parameter list (``void ns::kernel<float, 512>(int, float*)`` -> ``ns::kernel<…>(…)``),
    and what is still over ``limit`` characters keeps its head and tail around an ellipsis. Tables that use it
    say so; ``--json`` keeps every name whole."""
    text = name
    if text.startswith("void "):
        text = text[5:]
    for opening, closing in (("<", ">"), ("(", ")")):
        text = fold_brackets(text, opening, closing) or text
    return cut_middle(text, limit)


def distinct_names(names: Sequence[str], limit: int, shorten: Callable[[str, int], str] | None = None) -> list[str]:
    """Each of ``names`` at most ``limit`` characters (``shorten``: ``short_name`` by default), cut so that names
    that differ still read differently: where two come out alike, each is cut around where they differ
    instead (its head, then the part from a little before the first character they do not share)."""
    shorten = shorten or short_name
    out = [shorten(name, limit) for name in names]
    groups: dict[str, set[str]] = {}
    for name, short in zip(names, out):
        groups.setdefault(short, set()).add(name)
    for short, group in groups.items():
        if len(group) < 2:
            continue
        texts = {name: name[5:] if name.startswith("void ") else name for name in group}
        # each cut where it parts from the name most like it
        cut = {name: _cut_around(text, max(len(os.path.commonprefix([text, other]))
                                           for o, other in texts.items() if o != name), limit)
               for name, text in texts.items()}
        if len(set(cut.values())) < len(cut):  # they differ only beyond the width: the head and tail at least
            cut = {name: cut_middle(text, limit) for name, text in texts.items()}
        out = [cut[name] if o == short and name in cut else o for name, o in zip(names, out)]
    return out


def _cut_around(text: str, at: int, limit: int) -> str:
    """``text`` at most ``limit`` characters: its own name (the last parts of its qualified name, before any
    template or argument list) and the words from where it differs from others (``at``), each cut to fit, never
    next to a digit (a cut number would read as another)."""
    if len(text) <= limit:
        return text
    name = re.split(r"[<(]", text, maxsplit=1)[0]
    while "::" in name and len(name) > limit // 2:
        name = name.split("::", 1)[1]
    half = max(limit // 2, 4)
    head = name if len(name) <= half else (_no_digit_end(name[:(half - 1) * 2 // 3]) + "…"
                                           + _no_digit_start(name[len(name) - (half - 1) // 3:]))
    start = max(text.rfind(mark, 0, at) + len(mark) for mark in ("<", "(", ", ", " ", "::"))
    if start <= len(name):
        return cut_middle(text, limit)
    while start > 0 and text[start].isdigit() and text[start - 1].isdigit():
        start -= 1
    if text[start].isdigit():
        start -= 1  # the mark before a number: "…, 128" rather than "…128"
    window = text[start:start + limit - len(head) - 2]
    if start + len(window) < len(text):
        return head + "…" + _no_digit_end(window) + "…"
    return head + "…" + window


def _no_digit_end(text: str) -> str:
    return text.rstrip("0123456789") or text


def _no_digit_start(text: str) -> str:
    return text.lstrip("0123456789") or text


def cut_head(text: str, limit: int) -> str:
    """``text`` at most ``limit`` characters: its head and an ellipsis."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def cut_middle(text: str, limit: int) -> str:
    """``text`` at most ``limit`` characters: its head (two thirds) and tail around an ellipsis."""
    if len(text) <= limit:
        return text
    head = (limit - 1) * 2 // 3
    return text[:head] + "…" + text[len(text) - (limit - 1 - head):]


# The version of every ``--json`` document's layout (docs/json.md): raised when a key is renamed or removed, or
# a value changes its type or meaning; a new key does not raise it.
SCHEMA_VERSION = 1


def render_json(document: dict, console: Console, input_notes: list[str] | None = None) -> None:
    """Print ``document`` as ``json.dumps`` writes it (indent 2), with ``"schema_version"`` as its first key and,
    given ``input_notes`` (what ``render_notes`` said on stderr about the input), ``"input_notes"`` as its last.

    The text is printed in pieces of about a megabyte (``json_text.pieces``), so a large document is never
    held as one string."""
    chunk: list[str] = []
    size = 0
    for piece in json_text.pieces(json_output(document, input_notes)):
        chunk.append(piece)
        size += len(piece)
        if size >= _CHUNK_CHARS:
            console.print(_Verbatim("".join(chunk), end=False), soft_wrap=True)
            chunk, size = [], 0
    console.print(_Verbatim("".join(chunk)), soft_wrap=True)


_CHUNK_CHARS = 1 << 20


def json_output(document: dict, input_notes: list[str] | None = None) -> dict:
    """``document`` as ``--json`` prints it: ``"schema_version"`` first and, given ``input_notes``, ``"input_notes"``
    last."""
    if input_notes is not None:
        document = {**document, "input_notes": list(input_notes)}
    return {"schema_version": SCHEMA_VERSION, **document}


class _Verbatim:
    """Text printed as it is, in one piece: rich does not split, wrap or scan it. For a large JSON document
    (``json.dumps`` keeps its text to printable ASCII), printing it as a string cost seconds; capture and
    record still apply. ``end``: a line break after it."""

    def __init__(self, text: str, end: bool = True):
        self.text, self.end = text, end

    def __rich_console__(self, console: Console, options):
        yield Segment(self.text)
        if self.end:
            yield Segment.line()


def render_notes(notes: list[str], console: Console | None = None) -> None:
    """Notes about the input (a partial capture, missing files) on stderr, so ``--json`` stdout stays one document."""
    console = console or Console(stderr=True)
    for note in notes:
        console.print(Text.assemble(("note:", "yellow"), " ", note), highlight=False, soft_wrap=True)


OUTSIDE_TEXT = {OUTSIDE_NO_LAUNCH: "with no launch in the trace", OUTSIDE_LAUNCH: "launched outside every step marker"}


def outside_note(counts: dict[str, int], *, selected: bool, counted: str = "") -> str:
    """The line saying how many GPU events are in no step and why ("" when none is); ``counted``: what became of
    them, when not comm's."""
    total = sum(counts.values())
    if not total:
        return ""
    reasons = ", ".join(f"{n:,} {OUTSIDE_TEXT.get(reason, reason)}" for reason, n in counts.items() if n)
    left_out = ("left out of the selection" if selected
                else "counted in the whole-trace figures, in no step's")
    return f"{total:,} GPU events are in no step ({reasons}): {counted or left_out}"


def shown_links(step: StepPath, rows: int) -> set[int]:
    """Indexes of a critical path's links worth a row when ``rows`` are shown: the longest ones, where the edge
    changes device, and the ends (the text table and the HTML page fold the rest)."""
    links = step.links
    keep = {0, len(links) - 1}
    keep |= {k for k, link in enumerate(links[:-1]) if links[k + 1].device != link.device}
    ranked = sorted(range(len(links)), key=lambda k: -(links[k].dur_us + max(links[k].wait_us, 0)))
    for k in ranked:
        if len(keep) >= rows:
            break
        keep.add(k)
    return keep
