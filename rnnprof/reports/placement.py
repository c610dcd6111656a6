"""Rendering a placement audit: a rich table grouped by severity, or one JSON document."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from rnnprof.analyzers.placement import PlacementFinding, PlacementResult, Severity
from rnnprof.reports.abbrev import Legend

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "dim"}
_OPS_SHOWN = 4
NARROW_COLUMNS = 120  # below it an ops column would be under 25 characters: node names cut into pieces


def finding_document(finding: PlacementFinding) -> dict:
    return {
        "rule": finding.rule_id,
        "severity": finding.severity.label,
        "title": finding.title,
        "devices": list(finding.devices),
        "ops": list(finding.ops),
        "evidence": finding.evidence,
        "cost_us_per_step": None if finding.cost_us_per_step is None else round(finding.cost_us_per_step, 1),
        "cost_basis": finding.cost_basis,
        "fix": finding.fix,
    }


def to_document(result: PlacementResult, sources: list[str], fail_on: str) -> dict:
    counts = {s.label: sum(f.severity == s for f in result.findings) for s in reversed(Severity)}
    pytorch = {}
    if result.not_applicable:  # PyTorch input: which rules cannot apply to it, and why
        pytorch = {"framework": result.framework,
                   "rules_not_applicable": [{"rule": n.rule_id, "reason": n.reason} for n in result.not_applicable]}
    return {
        "sources": sources,
        "fail_on": fail_on,
        "counts": counts,
        "findings": [finding_document(f) for f in result.findings],
        "rules_checked": list(result.checked),
        "rules_not_checked": [{"rule": n.rule_id, "reason": n.reason} for n in result.not_checked],
        **pytorch,
    }


def _cost(finding: PlacementFinding) -> str:
    if finding.cost_us_per_step is None:
        return "-"
    us = finding.cost_us_per_step
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} µs"


def _ops(finding: PlacementFinding) -> list[str]:
    """The first ``_OPS_SHOWN`` ops, their shared scopes folded (``scope_folded``), and how many more."""
    more = len(finding.ops) - _OPS_SHOWN
    return scope_folded(list(finding.ops[:_OPS_SHOWN])) + ([f"… {more} more (--json lists all)"] if more > 0 else [])


def scope_folded(names: list[str]) -> list[str]:
    """TensorFlow node names that share leading scopes or a trailing op name (``update/sgd/a/ApplyAdam``,
    ``update/sgd/b/ApplyAdam``): one line of what they share, ``update/sgd/…/ApplyAdam``, then what differs,
    indented (``  a``, ``  b``). Names with nothing in common, or a single name, are kept whole."""
    parts = [name.split("/") for name in names]
    if len(names) < 2 or min(len(p) for p in parts) < 2:
        return names
    head = 0
    while all(len(p) > head + 1 and p[head] == parts[0][head] for p in parts):
        head += 1
    tail = 0
    while all(len(p) > head + tail + 1 and p[-1 - tail] == parts[0][-1 - tail] for p in parts):
        tail += 1
    if not head and not tail:
        return names
    shared = "/".join([*parts[0][:head], "…", *(parts[0][len(parts[0]) - tail:] if tail else [])])
    return [shared, *("  " + "/".join(p[head:len(p) - tail]) for p in parts)]


def _listed(items: list[str], name=None, more_text: str = " more (--json lists all)") -> Text:
    shown = [name(i) if name else i for i in items[:_OPS_SHOWN]]
    more = len(items) - len(shown)
    return Text("\n".join(shown + ([f"… {more}{more_text}"] if more > 0 else [])))


def _finding_cell(finding: PlacementFinding, legend: Legend, with_ops: bool = False) -> Text:
    """The finding's title, cost basis and fix; ``with_ops``: its ops below them (a table too narrow for an ops
    column of its own, where each name would be cut into pieces)."""
    text = Text(legend.shorten_text(finding.title))
    if finding.cost_basis:
        text.append(f"\ncost: {legend.shorten_text(finding.cost_basis)}", style="dim")
    if finding.fix:
        text.append("\n").append("fix:", style="green").append(f" {legend.shorten_text(finding.fix)}")
    if with_ops and finding.ops:
        text.append("\n").append("ops:", style="bold").append("\n" + "\n".join(_ops(finding)))
    return text


def render_table(result: PlacementResult, sources: list[str], console: Console) -> None:
    """Device names are shortened (``reports.abbrev``) with their legend printed once, after the tables. Below
    ``NARROW_COLUMNS`` the ops are listed in the finding's cell, not in a column of their own."""
    legend = Legend()
    narrow = console.width < NARROW_COLUMNS
    console.print(Text.assemble(("Placement audit", "bold"), f" of {', '.join(sources)}"), highlight=False)
    for severity in reversed(Severity):
        group = [f for f in result.findings if f.severity == severity]
        if not group:
            continue
        known = [f.cost_us_per_step for f in group if f.cost_us_per_step is not None]
        total = f", est. cost up to {sum(known) / 1000:.2f} ms/step" if known else ""
        table = Table(title=f"{severity.label.upper()}: {len(group)} finding(s){total}",
                      title_style=_STYLE[severity], title_justify="left", show_lines=True, expand=True)
        table.add_column("rule", no_wrap=True)
        table.add_column("finding", ratio=4, overflow="fold")
        table.add_column("devices")
        if not narrow:
            table.add_column("ops", ratio=2, overflow="fold")
        table.add_column("cost/step", justify="right", no_wrap=True)
        for f in group:
            ops = [] if narrow else [Text("\n".join(_ops(f)))]
            table.add_row(f.rule_id.split("-")[0], _finding_cell(f, legend, with_ops=narrow),
                          _listed(list(f.devices), legend.short, " more"), *ops, _cost(f))
        console.print(table)
    if not result.findings:
        console.print("[green]No placement problems found by the rules that could run.[/green]")
    if result.not_applicable:
        console.print(Text.assemble(("Does not apply to a PyTorch run", "bold"),
                                    " (the rules read TensorFlow graphs, placement and sessions)"), highlight=False)
        for item in result.not_applicable:
            console.print(Text(f"  {item.rule_id}: {item.reason}"), highlight=False)
    if result.not_checked:
        console.print("[bold]Not checked[/bold]")
        for item in result.not_checked:
            console.print(Text(f"  {item.rule_id}: {legend.shorten_text(item.reason)}"), highlight=False)
    legend.render(console)
    console.print(f"[dim]Rules checked: {', '.join(r.split('-')[0] for r in result.checked) or 'none'}. "
                  "Costs are per traced step and may overlap between findings.[/dim]")
