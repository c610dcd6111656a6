"""A run at a glance: its audit's findings, each device's time per step, its memory over time and its critical
path's shares, from the commands' own results (``Run.summary()``). Jupyter displays it, and rnnprof's tab in
TensorBoard shows the same HTML for each run of the logdir (``rnnprof.tensorboard_plugin``).

A run directory that ``rnnprof watch`` wrote also shows the job's whole step series, its anomalies and windows,
drawn by the report's own sections (``reports.watch_page``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from rnnprof.errors import RnnprofError
from rnnprof.inputs.watched import is_watched_run, watched_summary
from rnnprof.reports import charts
from rnnprof.reports.findings_html import findings_section
from rnnprof.reports.html import Page
from rnnprof.reports.results.audit import AuditFindings
from rnnprof.reports.results.base import Result
from rnnprof.reports.results.comm import CommResult
from rnnprof.reports.results.critical_path import CriticalPathResult, shares_section
from rnnprof.reports.results.memory import MemoryResult, memory_section
from rnnprof.reports.watch_page import watch_sections

@dataclass(frozen=True, repr=False)
class RunSummary(Result):
    """The analyses a run is summarised by, each the command's result, or None with why it is missing
    (``missing``: part -> the one-line error its command gives)."""

    paths: tuple[str, ...] = ()
    audit: AuditFindings | None = None
    comm: CommResult | None = None
    memory: MemoryResult | None = None
    critical_path: CriticalPathResult | None = None
    missing: dict[str, str] = field(default_factory=dict)

    COMMAND: ClassVar[str] = "summary"
    PARTS: ClassVar[tuple[str, ...]] = ("audit", "comm", "memory", "critical_path")

    def document(self) -> dict:
        """Each part's ``--json`` document (None where missing), and why a part is missing."""
        return {"paths": list(self.paths),
                **{part: (getattr(self, part).document() if getattr(self, part) is not None else None)
                   for part in self.PARTS}, "missing": dict(self.missing)}

    def tables(self) -> dict[str, list[dict]]:
        """The parts' main tables: ``findings``, ``steps`` (each device's time per step), ``memory`` (each
        device's peak) and ``critical_path`` (each step's path)."""
        found = {"findings": (self.audit, "findings"), "steps": (self.comm, "steps"),
                 "memory": (self.memory, "devices"), "critical_path": (self.critical_path, "steps")}
        return {name: result.tables()[table] if result is not None else [] for name, (result, table) in found.items()}

    def html(self, page: Page) -> None:
        page.heading(f"rnnprof: {', '.join(self.paths)}", 2)
        page.heading("Findings", 3)
        if self.audit is not None:
            findings_section(page, self.audit.audit, self.audit.left_out)
        self._missing(page, "audit", "Findings")
        page.heading("Time per step", 3)
        if self.comm is not None:
            page.chart("step-split", charts.spec(charts.step_breakdown_chart(self.comm.report) if self.comm.report.steps
                                                 else charts.breakdown_chart(self.comm.report)))
        self._missing(page, "comm", "The time split")
        page.heading("Memory", 3)
        if self.memory is not None:
            memory_section(page, self.memory.report)
        self._missing(page, "memory", "The memory timeline")
        page.heading("Critical path", 3)
        if self.critical_path is not None:
            shares_section(page, self.critical_path.median_step(), len(self.critical_path.report.steps))
        self._missing(page, "critical_path", "The critical path")
        if len(self.paths) == 1 and is_watched_run(self.paths[0]):
            page.heading("The watched job", 3)
            watch_sections(page, watched_summary(self.paths[0]))

    def _missing(self, page: Page, part: str, what: str) -> None:
        if part in self.missing:
            page.missing(what, self.missing[part])


def run_summary(run) -> RunSummary:
    """``run``'s summary (an ``api.Run``): each part its command's analysis, a part the input cannot give left
    out with the command's one-line error."""
    found, missing = {}, {}
    for part, analyze in (("audit", run.audit), ("comm", lambda: run.comm(per_step=True)), ("memory", run.memory),
                          ("critical_path", run.critical_path)):
        try:
            found[part] = analyze()
        except RnnprofError as exc:
            missing[part] = str(exc)
    notes = tuple(dict.fromkeys(n for result in found.values() for n in result.notes))
    return RunSummary(notes, run.paths, missing=missing, **found)
