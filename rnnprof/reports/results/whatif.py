"""``rnnprof whatif``'s result: each step replayed with a change, and the step time it predicts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rnnprof.analyzers.replay import WhatIfReport
from rnnprof.reports.html import Page
from rnnprof.reports.results.base import Result
from rnnprof.reports.units import fmt_ms
from rnnprof.reports.whatif import to_document


@dataclass(frozen=True, repr=False)
class WhatIfResult(Result):
    """``report``: the replay of each step, unchanged and changed; ``left_out``: the events the loaders left out."""

    report: WhatIfReport
    left_out: dict

    COMMAND: ClassVar[str] = "whatif"

    def document(self) -> dict:
        return {**to_document(self.report), "left_out": self.left_out}

    def tables(self) -> dict[str, list[dict]]:
        """``steps`` (per step: ``measured_us``, ``replayed_us`` unchanged, ``predicted_us`` with the change) and
        ``changes``."""
        document = to_document(self.report)
        steps = [{k: v for k, v in s.items() if not isinstance(v, (list, dict))} for s in document["steps"]]
        changes = [{k: v for k, v in c.items() if not isinstance(v, (list, dict))} for c in document["changes"]]
        return {"steps": steps, "changes": changes}

    def html(self, page: Page) -> None:
        median = {key: self.report.median(key) for key in ("measured_us", "replayed_us", "predicted_us")}
        changes = "; ".join(c.describe() for c in self.report.changes)
        page.paragraph(f"{changes}: a median step of {fmt_ms(median['predicted_us'])} ms predicted, against "
                       f"{fmt_ms(median['replayed_us'])} ms replayed unchanged and {fmt_ms(median['measured_us'])} ms "
                       "measured.")
        page.table(["step", "measured ms", "replayed ms", "predicted ms", "change ms"],
                   [[s.step, fmt_ms(s.measured_us), fmt_ms(s.replayed_us), fmt_ms(s.predicted_us),
                     fmt_ms(s.change_us, signed=True)] for s in self.report.steps], numeric={1, 2, 3, 4})
