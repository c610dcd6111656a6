"""``rnnprof hang``'s result: why a job hung, the rank it waits for, its collective and its line."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from rnnprof.analyzers.hang import HangVerdict
from rnnprof.reports.hang import hang_document
from rnnprof.reports.html import Page
from rnnprof.reports.results.base import Result, flat


@dataclass(frozen=True, repr=False)
class HangResult(Result):
    """``verdict``: who the job waits for and why."""

    verdict: HangVerdict

    COMMAND: ClassVar[str] = "hang"

    def document(self) -> dict:
        return hang_document(self.verdict)

    def tables(self) -> dict[str, list[dict]]:
        """``culprits`` (the ranks the job waits for) and ``waiters`` (the ranks waiting)."""
        return {"culprits": [flat(dataclasses.asdict(c)) for c in self.verdict.culprits],
                "waiters": [flat(dataclasses.asdict(w)) for w in self.verdict.waiters]}

    def html(self, page: Page) -> None:
        page.paragraph(self.verdict.summary)
        rows = self.tables()["culprits"]
        if rows:
            columns = [c for c in rows[0] if not isinstance(rows[0][c], (list, tuple))][:6]
            page.table(columns, [[row[c] for c in columns] for row in rows])
