"""What an audit rule reports: one finding, with the saving it estimates and how sure it is."""

from __future__ import annotations

from dataclasses import dataclass, field

from rnnprof.analyzers.placement.finding import NotChecked, Severity

__all__ = ["Finding", "NotChecked", "Severity", "Subject"]


@dataclass(frozen=True)
class Subject:
    """What the finding names: a rank (worker), a device (its full label) and an operator, each optional."""

    rank: str | None = None
    device: str | None = None
    op: str | None = None

    def as_dict(self) -> dict:
        return {"rank": self.rank, "device": self.device, "op": self.op}


@dataclass(frozen=True)
class Finding:
    """``saving_us``: estimated step time saved per step by fixing it (None: no estimate), ``saving_basis``
    says how it was estimated (a critical-path what-if or a stated bound); ``confidence`` in [0, 1]
    (``rnnprof.analyzers.noise``); ``evidence`` holds plain numbers and short strings, ready for JSON."""

    rule: str  # e.g. "PF001"
    severity: Severity
    title: str
    subject: Subject = Subject()
    evidence: dict = field(default_factory=dict)
    saving_us: float | None = None
    saving_basis: str = ""
    confidence: float = 1.0
    fix: str = ""

    def saving_pct(self, step_us: float) -> float | None:
        if self.saving_us is None or step_us <= 0:
            return None
        return 100.0 * self.saving_us / step_us

    def as_dict(self, step_us: float) -> dict:
        pct = self.saving_pct(step_us)
        return {
            "rule": self.rule,
            "severity": self.severity.label,
            "title": self.title,
            "saving_ms": None if self.saving_us is None else round(self.saving_us / 1000, 3),
            "saving_pct": None if pct is None else round(pct, 2),
            "saving_basis": self.saving_basis,
            "confidence": round(float(self.confidence), 3),
            "evidence": {**self.evidence, "fix": self.fix} if self.fix else self.evidence,
            "subject": self.subject.as_dict(),
        }
