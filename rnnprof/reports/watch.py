"""How ``rnnprof watch`` says what it sees: an anomaly, a window's verdict, a step of the job (a line), and the job
now as a table (the live view, ``live``)."""

from __future__ import annotations

import math

from rich.table import Table
from rich.text import Text

from rnnprof.analyzers.watch import (BASELINE, INPUT_STALL, MEMORY_GROWTH, REGRESSION, REQUESTED, SPIKE, STRAGGLER,
                                     Anomaly, JobView)
from rnnprof.events.series import MEMORY_CUDA, MEMORY_RSS
from rnnprof.reports.layout import compact_table
from rnnprof.reports.units import fmt_mb, fmt_ms_narrow

REASONS = {BASELINE: "the baseline window, to compare the later ones with", REQUESTED: "asked for",
           REGRESSION: "step-time regression", STRAGGLER: "a straggling rank", INPUT_STALL: "an input stall",
           MEMORY_GROWTH: "memory growth", SPIKE: "a step-time spike"}
MEMORY_NAMES = {MEMORY_RSS: "resident memory", MEMORY_CUDA: "CUDA allocated"}


def ms(seconds: float | None) -> str:
    """Seconds as milliseconds, narrow (``fmt_ms_narrow``), "-" where unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    return fmt_ms_narrow(seconds * 1e6)


def mb(n_bytes: float | None) -> str:
    if n_bytes is None or not math.isfinite(n_bytes):
        return "-"
    return fmt_mb(n_bytes)


def ranks_text(ranks) -> str:
    ranks = list(ranks)
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _pct(value: float, baseline: float) -> str:
    return f"{100 * (value - baseline) / baseline:+.0f} %" if baseline > 0 else ""


def anomaly_text(anomaly: Anomaly) -> str:
    """One anomaly in a sentence: what, where, since when and what it costs, and how much of it the rank spent
    waiting for a core (the machine's load, not the job's code) where that is half of it or more."""
    text = _anomaly_text(anomaly)
    if anomaly.machines:
        text += f"; {ms(anomaly.waited)} ms of it waiting for a core: the machine is busy"
    return text


def _anomaly_text(anomaly: Anomaly) -> str:
    a, where = anomaly, ranks_text(anomaly.ranks)
    since = f"from step {a.onset:,}" if a.onset is not None else f"at step {a.step:,}"
    if a.kind == STRAGGLER:
        how = f" (by {a.source})" if a.source else ""
        return (f"{where} straggles {since}: the others wait {ms(a.cost)} ms a step more for it "
                f"({ms(a.value)} ms against {ms(a.baseline)} ms before){how}")
    if a.kind == INPUT_STALL:
        return (f"input stall on {where} {since}: the wait for the batch is {ms(a.value)} ms a step against "
                f"{ms(a.baseline)} ms before (+{ms(a.cost)} ms)")
    if a.kind == MEMORY_GROWTH:
        what = MEMORY_NAMES.get(a.source, a.source or "memory")
        return (f"memory grows on {where} {since}: {mb(a.cost)} MB a step ({what}: {mb(a.baseline)} MB before, "
                f"{mb(a.value)} MB now)")
    if a.kind == SPIKE:
        return f"step-time spike on {where} at step {a.step:,}: {ms(a.value)} ms against a median of {ms(a.baseline)} ms"
    return (f"step-time regression on {where} {since}: {ms(a.value)} ms a step against {ms(a.baseline)} ms "
            f"before (+{ms(a.cost)} ms, {_pct(a.value, a.baseline)})")


def verdict_text(verdict: dict) -> str:
    """A window's verdict (``WindowVerdict.as_dict()``) in a few sentences."""
    parts = []
    headline = verdict.get("headline")
    if headline:
        parts.append(anomaly_text(Anomaly.from_dict(headline)))
    agrees = verdict.get("agrees")
    findings = verdict.get("findings") or []
    if agrees:
        parts.append(f"the window's audit agrees: {_finding(agrees)}")
    elif findings:
        parts.append(f"the window's audit: {_finding(findings[0])}")
    elif verdict.get("audited"):
        parts.append("the window's audit finds nothing beyond the run's jitter")
    if verdict.get("step_s") is not None and verdict.get("baseline_step_s") is not None:
        parts.append(f"against the baseline window {verdict.get('baseline_window')}: {ms(verdict['baseline_step_s'])}"
                     f" -> {ms(verdict['step_s'])} ms a step")
    grew = verdict.get("grew") or []
    if grew:
        parts.append("grew most: " + ", ".join(f"{name} +{ms(s)} ms" for name, s in grew))
    parts += list(verdict.get("notes") or [])
    return "; ".join(parts) or "nothing to say"


def _finding(finding: dict) -> str:
    saving = finding.get("saving_s")
    where = f" on {finding['rank']}" if finding.get("rank") else ""
    cost = f", saving up to {ms(saving)} ms a step" if saving is not None else ""
    return f"{finding.get('rule')} {finding.get('title')}{where}{cost}"


def step_line(view: JobView, step: int) -> Text:
    """One line for job step ``step`` (stdout not a terminal): throughput, each rank's step time, skew, data wait
    and memory, the slowest rank first where there are many."""
    ranks = sorted(view.ranks, key=lambda r: -(r.step_s if math.isfinite(r.step_s) else 0))[:4]
    cells = [f"r{r.rank} {ms(r.step_s)} ms skew {_signed_ms(r.skew_s)} data {ms(r.data_s)} mem {mb(r.memory)} MB"
             for r in ranks]
    more = f" (+{len(view.ranks) - len(ranks)} ranks)" if len(view.ranks) > len(ranks) else ""
    return Text(f"step {step:,}  {view.steps_per_s:,.1f} steps/s  " + "  ".join(cells) + more)


def _signed_ms(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "-"
    return ("+" if seconds >= 0 else "") + ms(seconds)


def job_table(view: JobView, title: str = "") -> Table:
    """The live view: each rank's step time, skew against the median rank, collective wait, data wait and memory;
    the job's throughput and its last anomaly under it."""
    last = f"last anomaly: {anomaly_text(view.last)}" if view.last is not None else "no anomaly so far"
    table = compact_table("rank", ("step", "step ms", "skew ms", "wait ms", "data ms",
                                   f"{MEMORY_NAMES.get(view.memory_source, 'memory')} MB"),
                          title=title or f"step {view.step:,}  ·  {view.steps_per_s:,.1f} steps/s",
                          caption=Text(last))
    for r in view.ranks:
        table.add_row(Text(f"rank {r.rank}" + (f" ({r.stopped})" if r.stopped else "")), f"{r.step:,}", ms(r.step_s),
                      _signed_ms(r.skew_s), ms(r.comm_wait_s), ms(r.data_s), mb(r.memory))
    return table
