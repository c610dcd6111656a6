"""The audit's closing prediction: its top findings' fixes replayed together (``replay.audit_savings``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TopFixes:
    """The top findings' fixes replayed together: ``whatif`` with ``whatif_flags`` gives the same saving."""

    findings: tuple[str, ...]  # each finding's rule and subject ("PF006 aten::mm")
    fixes: tuple[str, ...]  # each finding's ``--fix`` text (``fix_of``)
    saving_us: float  # the median over the steps of the unchanged replay less the changed one
    step_us: float  # the audit's median step
    positions: tuple[int, ...] = ()  # each finding's place in the audit's findings, from 0
    steps: str = ""  # ``--steps FIRST:LAST`` of the steps replayed where they are some of the run's, else ""

    @property
    def predicted_us(self) -> float:
        return self.step_us - self.saving_us

    def note(self) -> str:
        share = (f" ({100 * self.saving_us / self.step_us:.1f}% of the median step): a predicted step of "
                 f"{self.predicted_us / 1000:.3f} ms" if self.step_us > 0 else "")
        return (f"replay: fixing {', '.join(self.findings)} together saves {self.saving_us / 1000:.3f} ms a "
                f"step{share}" + (f" (steps {self.steps.replace(':', ' to ')})" if self.steps else ""))

    def whatif_flags(self) -> str:
        """The flags of ``rnnprof whatif`` that replay the same: the fixes, and the steps where not every one."""
        return " ".join([*(f"--fix {f}" for f in self.fixes), *([f"--steps {self.steps}"] if self.steps else [])])

    def as_dict(self) -> dict:
        """``top_fixes`` in ``rnnprof audit --json``."""
        return {"findings": list(self.positions), "labels": list(self.findings), "fixes": list(self.fixes),
                "steps": self.steps or None, "saving_ms": round(self.saving_us / 1000, 3),
                "predicted_step_ms": round(self.predicted_us / 1000, 3)}
