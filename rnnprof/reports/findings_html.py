"""The audit's findings on a page, as a user reads them: the report's Findings section, the audit's display in a
notebook and rnnprof's tab in TensorBoard all write them here.

Each finding is a sentence (what was found, where, and what fixing it would save a step, on which basis), its
evidence a small table of labelled values with their units, folded until opened; the rules that could not be
checked are one line that opens to say why. A confidence is given where a verdict was judged (a warning or an
error), never beside an info finding, whose figure is within the run's jitter or too small to rank.
"""

from __future__ import annotations

import json

from rnnprof.analyzers.audit import AuditResult, Finding, Severity, Subject
from rnnprof.reports.html import Page, esc
from rnnprof.reports.units import fmt_ms

# A key's unit, from how it ends: ``exposed_ms_per_step`` is "exposed" in "ms/step".
_UNITS = (("_ms_per_step", "ms/step"), ("_us_per_step", "µs/step"), ("_per_step_ms", "ms/step"),
          ("_bytes_per_step", "bytes/step"), ("_mb_per_step", "MB/step"), ("_per_step", "per step"),
          ("_ms_total", "ms in all"), ("_ms", "ms"), ("_us", "µs"), ("_pct", "%"), ("_mb", "MB"),
          ("_bytes", "bytes"), ("_s", "s"))
EVIDENCE_ROWS = 24  # rows of a finding's evidence table; the rest are counted


def evidence_rows(evidence: dict) -> list[tuple[str, str, str]]:
    """``(label, value, unit)`` of each evidence entry: the unit taken from the key's ending, a number rounded to
    what it means, a list or a mapping (per step, per device) written out in one cell."""
    rows = []
    for key, value in evidence.items():
        label, unit = str(key), ""
        for ending, name in _UNITS:
            if label.endswith(ending) and len(label) > len(ending):
                label, unit = label[: -len(ending)], name
                break
        rows.append((label.replace("_", " "), _value(value), unit))
    return rows


def _value(value) -> str:
    if isinstance(value, bool) or value is None:
        return "yes" if value is True else "no" if value is False else "-"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 1e6 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_value(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_value(v) for v in value)
    return str(value) if not isinstance(value, str) else value


def subject_text(subject: Subject) -> str:
    """Where a finding is: its rank, device and operator, those it names."""
    named = (("rank", subject.rank), ("device", subject.device), ("op", subject.op))
    return ", ".join(f"{k} {v}" for k, v in named if v not in (None, ""))


def saving_sentence(finding: Finding, step_us: float) -> str:
    """What fixing the finding would save, in words."""
    if finding.saving_us is None:
        return "No saving is estimated."
    pct = finding.saving_pct(step_us)
    share = f" ({pct:.1f}% of the {fmt_ms(step_us)} ms median step)" if pct is not None else ""
    basis = _first_clause(finding.saving_basis)
    return f"Fixing it would save {fmt_ms(finding.saving_us)} ms a step{share}" + (f": {basis}." if basis else ".")


def _first_clause(text: str) -> str:
    """``text`` up to its first ``;`` outside parentheses (a basis' own words, before the bound it adds)."""
    depth = 0
    for k, char in enumerate(text):
        depth += (char == "(") - (char == ")")
        if char == ";" and depth == 0:
            return text[:k].strip()
    return text.strip()


def finding_block(finding: Finding, step_us: float) -> str:
    """One finding: its sentence, its fix, and its evidence folded."""
    severity = finding.severity.label
    sure = (f" <span class=\"sub\">(confidence {float(finding.confidence):.2f})</span>"
            if finding.severity >= Severity.WARNING else "")
    where = subject_text(finding.subject)
    title = finding.title.rstrip(".")
    head = (f"<p class=\"finding-text\"><span class=\"sev-{esc(severity)}\">{esc(severity)}</span> "
            f"<code>{esc(finding.rule)}</code> {esc(title)}.{sure} {esc(saving_sentence(finding, step_us))}</p>")
    fix = f"<p class=\"fix\">Fix: {esc(finding.fix)}</p>" if finding.fix else ""
    evidence = {k: v for k, v in finding.evidence.items() if k != "fix"}
    rows = evidence_rows(evidence)
    shown = rows[:EVIDENCE_ROWS]
    more = (f"<tr><td colspan=\"3\" class=\"sub\">and {len(rows) - len(shown)} more (rnnprof audit --json has "
            f"them all)</td></tr>" if len(rows) > len(shown) else "")
    table = ("<table class=\"evidence\"><thead><tr><th>evidence</th><th class=\"n\">value</th><th>unit</th></tr>"
             "</thead><tbody>" + "".join(f"<tr><td>{esc(label)}</td><td class=\"n\">{esc(value)}</td>"
                                         f"<td>{esc(unit)}</td></tr>" for label, value, unit in shown)
             + more + "</tbody></table>")
    summary = f"evidence{f' ({esc(where)})' if where else ''}: {len(rows)} figures"
    basis = f"<p class=\"sub\">saving: {esc(finding.saving_basis)}</p>" if finding.saving_basis else ""
    return (f"<div class=\"finding\" data-rule=\"{esc(finding.rule)}\">{head}{fix}"
            f"<details><summary>{summary}</summary>{basis}{table}</details></div>")


def findings_section(page: Page, result: AuditResult, left_out: dict[str, int] | None = None) -> None:
    """The audit's findings in its order (most costly first), its step time, its notes, the rules not checked
    (one line, folded) and what the loaders left out."""
    step, noise = result.noise.median_us, result.noise
    if result.findings:
        for finding in result.findings:
            page.add(finding_block(finding, step))
    else:
        page.paragraph("No finding: the rules that could run found nothing to fix.")
    top = result.top_fixes
    if top is not None and top.step_us > 0:
        fixes = top.whatif_flags()
        page.paragraph(f"Predicted step after fixing {', '.join(top.findings)} together: {fmt_ms(top.predicted_us)} "
                       f"ms, {fmt_ms(top.saving_us)} ms ({100 * top.saving_us / top.step_us:.1f}%) less than the "
                       f"measured {fmt_ms(top.step_us)} ms (a replay: whatif {fixes}).")
    page.paragraph(f"Step time {fmt_ms(noise.median_us)} ms (median) ± {fmt_ms(noise.mad_us)} ms (median absolute "
                   f"deviation) over {len(noise.steps)} step(s): a saving within the spread is noise.", "sub")
    for note in result.notes:
        if top is None or note != top.note():  # said above, in a sentence
            page.paragraph(f"note: {note}", "note")
    if result.not_checked:
        items = "".join(f"<li><code>{esc(n.rule_id)}</code>: {esc(n.reason)}</li>" for n in result.not_checked)
        page.add(f"<details class=\"not-checked sub\"><summary>{len(result.not_checked)} rule(s) not checked: "
                 f"{esc(', '.join(n.rule_id for n in result.not_checked))}</summary><ul>{items}</ul></details>")
    page.paragraph(f"Rules checked: {', '.join(result.checked) or 'none'}.", "sub")
    if left_out and any(left_out.values()):
        page.paragraph(f"left out of the audit: {json.dumps(left_out)}", "note")
