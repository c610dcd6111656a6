"""What every command's result gives, in Python as on the command line: ``Result``.

A command's analysis returns a ``Result`` (its dataclass of one module here, per command); the command renders it
(``document()`` is its ``--json`` document, the tables its text), and ``rnnprof.open``'s ``Run`` hands the same
object to Python: ``to_json()`` is the text ``--json`` prints, ``to_frames()`` its tables as pandas DataFrames
(units in the column names, as ``--json`` names its keys: ``_us``, ``_ms``, ``_pct``, ``_bytes``), and
``_repr_html_()`` a compact table with the command's chart, which Jupyter shows, drawn by the HTML report's own
page code (``reports.html``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ClassVar

from rnnprof.reports import json_text
from rnnprof.reports.charts import Figure, save_chart
from rnnprof.reports.html import Page
from rnnprof.reports.layout import json_output, render_json, render_notes

if TYPE_CHECKING:  # pandas loads when a frame is asked for, never at import
    import pandas


@dataclass(frozen=True, repr=False)
class Result:
    """One analysis of one input, as its command renders it. ``notes``: what was said about the input (on stderr
    by the command, ``input_notes`` in its ``--json``)."""

    notes: tuple[str, ...]

    COMMAND: ClassVar[str] = ""  # the command whose result it is

    def document(self) -> dict:
        """The command's ``--json`` document, without ``schema_version`` and ``input_notes`` (which
        ``to_json`` adds as the command does)."""
        raise NotImplementedError

    def render(self, console, as_json: bool, text: Callable[[], None], plot: Path | None = None,
               chart: Callable[[], Figure] | None = None) -> None:
        """What the command prints: the notes on stderr, then on ``console`` the ``--json`` document (``as_json``)
        or what ``text()`` prints; with ``plot`` (``--plot``, checked before the analysis), ``chart()`` saved there."""
        render_notes(list(self.notes))
        if as_json:
            render_json(self.document(), console, list(self.notes))
        else:
            text()
        if plot is not None and chart is not None:
            save_chart(chart(), plot)

    def to_json(self) -> str:
        """The text ``rnnprof <command> --json`` prints for the same input and options (without its final
        line break)."""
        return "".join(json_text.pieces(json_output(self.document(), list(self.notes))))

    def to_dict(self) -> dict:
        """``to_json()`` decoded."""
        return json.loads(self.to_json())

    def tables(self) -> dict[str, list[dict]]:
        """The result's tables as rows (``to_frames`` makes DataFrames of them), the main one first."""
        raise NotImplementedError

    def to_frames(self) -> dict[str, "pandas.DataFrame"]:
        """Each of the result's tables as a pandas DataFrame, by name, the main one first; units in the column
        names (``_us``: microseconds, ``_ms``: milliseconds, ``_pct``: percent, ``_bytes``)."""
        import pandas

        return {name: pandas.DataFrame.from_records(rows) for name, rows in self.tables().items()}

    def to_pandas(self) -> "pandas.DataFrame":
        """The main table (``to_frames``' first) as a DataFrame."""
        return next(iter(self.to_frames().values()))

    def html(self, page: Page) -> None:
        """The compact view: a table or two, and the command's chart where it has one."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return (f"<{type(self).__name__}: rnnprof {self.COMMAND}'s result; to_frames(), to_json(), "
                f"displayed as HTML in a notebook>")

    def _repr_html_(self) -> str:
        page = Page(f"rnnprof {self.COMMAND}")
        self.html(page)
        return page.fragment()


def flat(row: dict, prefix: str = "") -> dict:
    """A document's row with its nested objects as ``outer.inner`` columns (lists kept as they are)."""
    out: dict = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat(value, f"{name}."))
        else:
            out[name] = value
    return out

