"""Tables that fit the terminal's width: a number or a label is never broken across lines, a name is shortened
in its middle (``short_name``) to the width left to it, and where even that does not fit, the columns a table
can do without are left out, the least needed first, and its caption says which (``--json`` has them all)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from rich import box
from rich.cells import cell_len
from rich.console import Group
from rich.table import Table
from rich.text import Text

from rnnprof.reports.layout import cut_middle, distinct_names, short_name

Cell = str | Text


@dataclass(frozen=True)
class Column:
    header: str  # lines split at "\n"
    kind: str = "number"  # "number": right-aligned; "label": kept whole; "text": cut in its middle to fit;
    # "name": an op or kernel name, also shortened as short_name shortens it (brackets folded)
    drop: int = 0  # 0: always shown; otherwise left out where the width is short, the highest first
    least: int = 16  # a name column's narrowest width


def _plain(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def _longest_line(text: str) -> int:
    return max((cell_len(line) for line in text.split("\n")), default=0)


def _natural(column: Column, cells: list[Cell]) -> int:
    texts = [short_name(_plain(c), 1 << 20) if column.kind == "name" else _plain(c) for c in cells]
    return max([_longest_line(column.header), *map(_longest_line, texts)])


def _layout(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int) -> dict[int, int]:
    """The columns kept, each with its width: the narrowest layout first, columns dropped until it fits,
    then the room left shared among the names and texts, the narrowest first."""
    natural = [_natural(c, [r[i] for r in rows]) for i, c in enumerate(columns)]
    least = [min(n, max(c.least, _longest_line(c.header))) if c.kind in ("name", "text") else n
             for n, c in zip(natural, columns)]
    kept = list(range(len(columns)))
    droppable = sorted((i for i, c in enumerate(columns) if c.drop), key=lambda i: (-columns[i].drop, -i))

    def spare() -> int:  # two characters between columns
        return width - sum(least[i] for i in kept) - 2 * (len(kept) - 1)

    while spare() < 0 and droppable:
        kept.remove(droppable.pop(0))
    room, widths = spare(), {i: least[i] for i in kept}
    short = {i for i in kept if natural[i] > least[i]}
    while room > 0 and short:  # a character at a time to the narrowest column still short of its width
        i = min(short, key=lambda k: (widths[k], k))
        widths[i], room = widths[i] + 1, room - 1
        if widths[i] == natural[i]:
            short.discard(i)
    return widths


def _column_cells(cells: list[Cell], column: Column, width: int) -> list[Text]:
    """A column's cells as printed: names and texts cut to ``width``, names that differ still reading apart."""
    texts = [_plain(cell) for cell in cells]
    if column.kind in ("name", "text"):
        texts = distinct_names(texts, max(width, 4), short_name if column.kind == "name" else cut_middle)
    return [Text(text, style=cell.style if isinstance(cell, Text) else "") for text, cell in zip(texts, cells)]


def fit_table(width: int, columns: Sequence[Column], rows: Sequence[Sequence[Cell]], *, title: str = "",
              caption: str = "") -> Group:
    """``rows`` as a table at most ``width`` characters wide (two spaces between columns, a rule under the
    header, no edges), under ``title``, and a blank line; the caption names the columns left out."""
    widths = _layout(columns, rows, width)
    left_out = [columns[i].header.replace("\n", " ") for i in range(len(columns)) if i not in widths]
    if left_out:
        caption = (f"{caption}; " if caption else "") + (f"left out at this width: {', '.join(left_out)} "
                                                       "(a wider terminal or --json has them)")
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True,
                  caption=caption or None, caption_justify="left")
    for i, w in widths.items():
        column = columns[i]
        table.add_column(column.header, justify="right" if column.kind == "number" else "left", no_wrap=True,
                         width=w if column.kind in ("name", "text") else None)
    printed = {i: _column_cells([row[i] for row in rows], columns[i], w) for i, w in widths.items()}
    for k in range(len(rows)):
        table.add_row(*(printed[i][k] for i in widths))
    return Group(*([Text(title, style="table.title")] if title else []), table, Text(""))
