"""What the loaders left out for impossible times: one note on stderr and counts for ``--json``, the same on
every command that reads events (see ``rnnprof.traces.left_out``)."""

from __future__ import annotations

from rnnprof.events import EventTable, TableMetadata, merge_metadata
from rnnprof.traces.left_out import describe, examples_of, left_out_of


def _metadata(sources) -> TableMetadata:
    """The metadata of tables, or the records of tables analysed apart, merged (None entries skipped)."""
    return merge_metadata([s.metadata if isinstance(s, EventTable) else s for s in sources if s is not None])


def counts(*sources) -> dict[str, int]:
    """Events left out, by reason, over ``sources`` (tables or their metadata)."""

    return left_out_of(_metadata(sources))


def notes(args, *sources) -> list[str]:
    """The note saying what was left out (none when nothing was); ``--debug`` names the first few events."""

    meta = _metadata(sources)
    line = describe(left_out_of(meta), examples_of(meta), bool(getattr(args, "debug", False)))
    return [line] if line else []
