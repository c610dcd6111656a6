"""Several event tables made one: merged on a common clock, the alignment recorded in the metadata."""

from __future__ import annotations

from rnnprof.events import Alignment, EventTable, concat


def merge_tables(tables: list[EventTable], align: str = "absolute") -> EventTable:
    """One table, or several merged on a common clock (``align`` recorded in ``metadata.alignment``)."""
    if len(tables) == 1:
        return tables[0]
    merged = concat(tables, align=align)
    merged.metadata.alignment = Alignment(align)
    return merged
