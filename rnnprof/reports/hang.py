"""``rnnprof hang``'s output: the verdict first, then where each rank is (docs/commands/hang.md)."""

from __future__ import annotations

import dataclasses

from rich.console import Console
from rich.text import Text

from rnnprof.analyzers.hang import HangVerdict, RankState


def hang_document(verdict: HangVerdict) -> dict:
    return {"kind": verdict.kind, "summary": verdict.summary,
            "culprits": [dataclasses.asdict(c) for c in verdict.culprits],
            "waiters": [dataclasses.asdict(w) for w in verdict.waiters],
            "ranks": list(verdict.ranks), "notes": list(verdict.notes)}


def render_hang(verdict: HangVerdict, console: Console) -> None:
    """The verdict, then one line per rank it names and per rank that waits."""
    console.print(Text.assemble((f"{verdict.kind.replace('_', ' ')}: ", "bold"), verdict.summary))
    console.print()
    for c in verdict.culprits:
        where = f"at {c.where} in {c.function}" if c.where else "no stack"
        missed = f"{'' if c.state == RankState.SKIPPED else ':'} {c.op} #{c.seq} ({c.op_where})" if c.op else ""
        console.print(Text(f"  rank {c.rank}  {c.state}{missed}; main thread {where}"), overflow="fold")
    for w in verdict.waiters:
        console.print(Text(f"  rank {w.rank}  waits in {w.op} #{w.seq} ({w.where})"))
    for note in verdict.notes:
        console.print(Text(f"note: {note}", style="yellow"))
