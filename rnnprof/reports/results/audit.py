"""``rnnprof audit``'s result: the findings ranked by the step time each costs, judged against the run's jitter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rnnprof.analyzers.audit import AuditResult
from rnnprof.reports.findings_html import findings_section
from rnnprof.reports.html import Page
from rnnprof.reports.results.base import Result


@dataclass(frozen=True, repr=False)
class AuditFindings(Result):
    """``audit``: the audit (its findings, savings replayed where a fix can be); ``left_out``: the events the loaders
    left out, by reason."""

    audit: AuditResult
    left_out: dict

    COMMAND: ClassVar[str] = "audit"

    def document(self) -> dict:
        return self.audit.as_dict(self.left_out)

    def tables(self) -> dict[str, list[dict]]:
        """``findings`` (one row a finding, in the audit's order: where (``rank``, ``device``, ``op``), ``saving_ms``,
        ``saving_pct`` of the median step), ``evidence`` (one row per finding and evidence key) and ``not_checked``."""
        step = self.audit.noise.median_us
        findings, evidence = [], []
        for k, f in enumerate(self.audit.findings):
            row = f.as_dict(step)
            findings.append({"position": k + 1, "rule": f.rule, "severity": f.severity.label, "title": f.title,
                             **f.subject.as_dict(), "saving_ms": row["saving_ms"],
                             "saving_pct": row["saving_pct"], "saving_basis": f.saving_basis,
                             "confidence": row["confidence"], "fix": f.fix})
            evidence += [{"finding": k + 1, "rule": f.rule, "key": key, "value": value}
                         for key, value in f.evidence.items()]
        return {"findings": findings, "evidence": evidence,
                "not_checked": [{"rule": n.rule_id, "reason": n.reason} for n in self.audit.not_checked]}

    def html(self, page: Page) -> None:
        findings_section(page, self.audit, self.left_out)
