"""The HTML report of a watched job (``rnnprof report RUN`` of a ``rnnprof watch`` run): each rank's time split
into its parts, its memory, the anomalies with their windows and verdicts, and the series plotted with the windows
marked. Each window is a run directory of its own: ``rnnprof report``, ``audit``, ``comm`` or ``whatif`` read it."""

from __future__ import annotations

from rnnprof.analyzers.watch.summary import SPLIT, WatchSummary
from rnnprof.events.series import DATA_LOADER, PART_NAMES
from rnnprof.reports.charts import spec
from rnnprof.reports.html import Page
from rnnprof.reports.watch import MEMORY_NAMES, REASONS, anomaly_text, mb, ms
from rnnprof.reports.watch_charts import memory_series_chart, split_series_chart, step_series_chart

DATA_WAIT_LOADER = "data wait: the training thread's time in a DataLoader's __next__"
DATA_WAIT_GAP = ("data wait: from the step's start to the model's first forward (no DataLoader iterated in the first "
                 "step), so a wait after the optimizer, for the GPU or for logging, is in it too")


def watch_page(summary: WatchSummary, name: str, notes: list[str]) -> str:
    page = Page(f"rnnprof report: {name}")
    page.heading(f"rnnprof report: {name} (a watched job)", 1)
    watch_sections(page, summary, notes)
    return page.render()


def watch_sections(page: Page, summary: WatchSummary, notes: list[str] = ()) -> None:
    """A watched job's sections on ``page``: the anomalies, the windows, each rank's step, the series plotted."""
    steps = max((r.steps for r in summary.ranks), default=0)
    page.paragraph(f"{steps:,} steps on {len(summary.ranks)} rank(s), {len(summary.anomalies)} anomaly(ies), "
                   f"{len(summary.windows)} capture window(s)", "sub")
    _anomalies(page, summary)
    _windows(page, summary)
    _ranks(page, summary)
    page.heading("Along the job")
    page.chart("watch-steps", spec(step_series_chart(summary)))
    page.chart("watch-split", spec(split_series_chart(summary)))
    what = MEMORY_NAMES.get(summary.memory_source, "memory")
    if any(r.memory_last == r.memory_last for r in summary.ranks):  # not NaN
        page.chart("watch-memory", spec(memory_series_chart(summary, what)))
    for note in [*notes, *summary.notes]:
        page.paragraph(note, "sub")


def _anomalies(page: Page, summary: WatchSummary) -> None:
    page.heading("Anomalies")
    if not summary.anomalies and not summary.machine:
        page.paragraph("none: every rank stayed within its own baseline and jitter")
        return
    page.table(["step", "anomaly", "window"],
               [[f"{a.step:,}", anomaly_text(a), window or "none (rate-limited)"] for a, window in summary.anomalies]
               + [[f"{a.step:,}", anomaly_text(a), "none: the machine's, not the job's"] for a in summary.machine],
               numeric={0})


def _windows(page: Page, summary: WatchSummary) -> None:
    page.heading("Capture windows")
    if not summary.windows:
        page.paragraph("none")
        return
    page.table(["window", "steps", "why", "verdict"],
               [[w.name, f"{w.first_step:,}-{w.first_step + w.steps - 1:,}", REASONS.get(w.reason, w.reason),
                 w.verdict or "-"] for w in summary.windows])
    page.paragraph("each window is a run directory of its own (windows/<name>): rnnprof report, audit, comm, "
                   "critical-path and whatif read it", "sub")


def _ranks(page: Page, summary: WatchSummary) -> None:
    page.heading("Each rank's step")
    what = MEMORY_NAMES.get(summary.memory_source, "memory")
    headers = ["rank", "steps", "step ms", *(f"{PART_NAMES[p]} ms" for p in SPLIT), "collective wait ms",
               f"{what} MB (first -> last, max)", "profiled steps"]
    rows = [[f"rank {r.rank}" + (f" ({r.stopped})" if r.stopped else ""), f"{r.steps:,}", ms(r.step_s),
             *(ms(r.parts[p]) for p in SPLIT), ms(r.comm_wait_s),
             f"{mb(r.memory_first)} -> {mb(r.memory_last)} ({mb(r.memory_max)})", f"{r.profiled:,}"]
            for r in summary.ranks]
    page.table(headers, rows, numeric=set(range(1, len(headers))),
               caption="medians over each rank's steps outside the windows; other: what is left of a step after "
                       "its parts; " + (DATA_WAIT_LOADER if summary.data_source == DATA_LOADER else DATA_WAIT_GAP))
