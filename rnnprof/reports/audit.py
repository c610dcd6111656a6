"""Rendering an audit in 80 columns: findings ranked by saving, device names shortened with a legend."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from rnnprof.analyzers.audit import AuditResult, Finding, Severity
from rnnprof.reports.abbrev import Legend

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "dim"}


def _saving(f: Finding, step_us: float) -> str:
    if f.saving_us is None:
        return "-"
    pct = f.saving_pct(step_us)
    ms = f"{f.saving_us / 1000:.1f} ms" if f.saving_us >= 100 else f"{f.saving_us:.0f} µs"
    return ms + (f"\n{pct:.0f}%" if pct is not None else "")


def findings_table(result: AuditResult, legend: Legend) -> Table:
    step = result.noise.median_us
    table = Table(title="findings, largest estimated saving per step first", title_justify="left",
                  show_lines=True, box=None, pad_edge=False)
    table.add_column("rule", no_wrap=True)
    table.add_column("sev", no_wrap=True)
    table.add_column("saving", justify="right", no_wrap=True)
    table.add_column("conf", justify="right", no_wrap=True)
    table.add_column("finding", overflow="fold")
    for f in result.findings:
        text = Text(legend.shorten_text(f.title))
        if f.saving_basis:
            text.append(f"\n{legend.shorten_text(f.saving_basis)}", style="dim")
        if f.fix:
            text.append("\nfix: ", style="green").append(legend.shorten_text(f.fix))
        table.add_row(f.rule, Text(f.severity.label, style=_STYLE[f.severity]), _saving(f, step),
                      f"{f.confidence:.2f}", text)
    return table


def render_text(result: AuditResult, sources: list[str], console: Console) -> None:
    legend = Legend()
    noise = result.noise
    console.print(Text.assemble(("Audit", "bold"), f" of {', '.join(sources)}"), highlight=False)
    console.print(Text(f"steps: {len(noise.steps)}, step time median {noise.median_us / 1000:.2f} ms, "
                       f"MAD {noise.mad_us / 1000:.2f} ms (the run's jitter; a finding within 3 x its spread is "
                       f"at most info)"), highlight=False)
    if result.findings:
        console.print(findings_table(result, legend))
    else:
        console.print("[green]No findings from the rules that could run.[/green]")
    for note in result.notes:
        console.print(Text(legend.shorten_text(note)), highlight=False)
    if result.not_checked:
        console.print(Text(f"not checked (--json says why): {', '.join(n.rule_id for n in result.not_checked)}",
                           style="dim"), highlight=False)
    legend.render(console)
    console.print(Text(f"rules checked: {', '.join(result.checked) or 'none'}. Savings may overlap between "
                       "findings; a bound says the most fixing it can save.", style="dim"), highlight=False)
