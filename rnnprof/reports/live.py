"""The live view of a watched job (``rnnprof watch``): in a terminal, a table of the ranks that rich keeps up to date
(``rich.live.Live``, redrawn twice a second by its own thread from the latest view: the job is not waited for);
otherwise one line a step. Anomalies, windows, verdicts and notes are printed as they come, above the table."""

from __future__ import annotations

import threading

from rich.console import Console
from rich.live import Live
from rich.text import Text

from rnnprof.analyzers.watch import Anomaly, JobView
from rnnprof.reports.watch import REASONS, anomaly_text, job_table, step_line, verdict_text

REFRESH_PER_S = 2


class LiveView:
    """What ``rnnprof watch`` shows while the job runs (see the module). ``step_view(step)``: the job at one step,
    for the lines; ``hint``: a line under the table (how to ask for a window)."""

    def __init__(self, console: Console, step_view=None, hint: str = "", live: bool | None = None):
        self.console = console
        self.live = console.is_terminal if live is None else live
        self.step_view = step_view
        self.hint = hint
        self.view: JobView | None = None
        self._live: Live | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> "LiveView":
        if self.live:
            self._live = Live(get_renderable=self._renderable, console=self.console, refresh_per_second=REFRESH_PER_S,
                              transient=False, redirect_stdout=False, redirect_stderr=False)
            self._live.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _renderable(self):
        view = self.view
        if view is None:
            return Text("waiting for the ranks' first steps" + (f"  ({self.hint})" if self.hint else ""))
        table = job_table(view)
        if self.hint:
            table.caption = Text.assemble(table.caption or "", "\n", self.hint)
        return table

    def _print(self, *parts) -> None:
        with self._lock:  # a line stays one line in a file or a pipe
            self.console.print(Text.assemble(*parts), soft_wrap=not self.live)

    # -- the watch's events (recording.watcher.WatchEvents) ----------------------------------------------

    def steps(self, view: JobView, first: int, last: int) -> None:
        self.view = view
        if self.live:
            return
        lines = [step_line(self.step_view(step) if self.step_view is not None else view, step).plain
                 for step in range(max(first, 0), last + 1)]
        with self._lock:  # plain text written whole: a line a step costs the watch little
            self.console.file.write("".join(f"{line}\n" for line in lines))
            self.console.file.flush()

    def anomaly(self, anomaly: Anomaly, window: str | None, why_not: str) -> None:
        then = f" -> window {window}" if window else f" (no window: {why_not})"
        self._print(("anomaly: ", "bold red"), anomaly_text(anomaly), then)

    def window(self, request, reason: str) -> None:
        self._print(("window ", "bold"), f"{request.name}: steps {request.first_step:,}-"
                                         f"{request.first_step + request.steps - 1:,} on every rank "
                                         f"({REASONS.get(reason, reason)})")

    def verdict(self, window: str, verdict: dict) -> None:
        self._print(("verdict ", "bold green"), f"{window}: ", verdict.get("text") or verdict_text(verdict))

    def machine(self, spike: Anomaly) -> None:
        self._print(("note: ", "yellow"), anomaly_text(spike), " (the machine's, not the job's: no window)")

    def note(self, text: str) -> None:
        self._print(("note: ", "yellow"), text)
