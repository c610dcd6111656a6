"""``rnnprof comm``'s process-group tables: communication per group, collective and phase, and each group's straggler."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from rnnprof.analyzers.groups import GroupRow, GroupsReport, GroupStraggler
from rnnprof.events import ProcessGroup
from rnnprof.reports.layout import compact_table
from rnnprof.reports.units import fmt_ms_narrow

TOP_ROWS = 15
GROUPS_CAPTION = ("per rank = summed over the ranks that ran it, divided by their number; MB = nccl-tests' "
                  "message size S (an all-gather's output, another collective's input); exposed = time no compute "
                  "on the rank overlaps; algbw = S / t over the calls with a known message, busbw = algbw x "
                  "nccl-tests' factor for the group's members (2(n-1)/n all-reduce, (n-1)/n all-gather, "
                  "reduce-scatter, all-to-all, 1 broadcast, reduce, send/recv), GB/s = 10^9 B/s; t includes the "
                  "wait for the last member")


def _group_label(name: str, groups: dict[str, ProcessGroup]) -> str:
    if not name:
        return "group not known"
    group = groups.get(name)
    return group.label() if group is not None else name


def _bandwidth(value: float | None) -> str:
    """Two or three significant digits, never an exponent."""
    if value is None:
        return "-"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2g}" if value < 1 \
        else f"{value:.2f}"


def _row_cells(row: GroupRow) -> list[str]:
    mb = row.per_rank(row.bytes) / 1e6 if row.total("sized_calls") else None
    return [f"{row.per_rank(row.calls):g}", "-" if mb is None else _bandwidth(mb), fmt_ms_narrow(row.per_rank(row.time_us)),
            fmt_ms_narrow(row.per_rank(row.exposed_us)), _bandwidth(row.algbw_gbps), _bandwidth(row.busbw_gbps)]


def groups_table(report: GroupsReport, top: int = TOP_ROWS) -> Table:
    """Per process group (a heading row, the group with the most time first), its collectives by phase."""
    rows = report.rows()
    caption = GROUPS_CAPTION if len(rows) <= top else f"top {top} of {len(rows)} by time; " + GROUPS_CAPTION
    table = compact_table("group / collective phase", ("calls", "MB", "ms", "exposed\nms", "algbw\nGB/s",
                                                       "busbw\nGB/s"),
                          title="communication per process group, collective and phase, per rank", caption=caption)
    named = {g.name: g for g in report.groups}
    shown = rows[:top]
    time_of: dict[str, float] = {}
    for row in shown:
        time_of[row.group] = time_of.get(row.group, 0.0) + row.time_us
    for group in sorted(time_of, key=lambda g: -time_of[g]):
        members = max(r.members for r in shown if r.group == group)
        heading = _group_label(group, named) + (f", {members} members" if members and group else "")
        table.add_row(Text(heading, style="bold"), end_section=False)
        for row in (r for r in shown if r.group == group):
            table.add_row(Text(f"  {row.collective} {row.phase or '?'}"), *_row_cells(row))
    return table


def stragglers_table(stragglers: tuple[GroupStraggler, ...], groups: tuple[ProcessGroup, ...]) -> Table:
    named = {g.name: g for g in groups}
    caption = ("last = the member that arrived last at the group's collectives most often; caused = the other "
               "members' wait at those collectives")
    table = compact_table("group", ("members", "collectives", "arrived\nlast", "caused\nms"),
                          title="stragglers per process group", caption=caption, text_columns=("last",))
    for s in stragglers:
        table.add_row(Text(_group_label(s.group, named)), Text(s.last_rank), str(s.ranks), str(s.collectives),
                      str(s.arrived_last), fmt_ms_narrow(s.caused_wait_us))
    return table


def inferred_text(report: GroupsReport) -> Text | None:
    """What the trace did not record of its collectives and was inferred, and what is still not known."""
    if not report.records:
        return None
    parts = [f"{text} ({n})" for text, n in report.inferred.items()]
    line = f"of {report.records} collectives, inferred: " + ("; ".join(parts) if parts else "nothing")
    if report.unknown:
        line += "; not known: " + ", ".join(f"{what} ({n})" for what, n in report.unknown.items())
    joined = report.flight_recorder
    if joined:
        line += (f"; flight recorder: {joined.get('joined', 0)} of {joined.get('entries', 0)} entries joined to"
                 f" calls, {joined.get('calls_without_entry', 0)} calls without one")
        line += "".join(f", {joined[k]} {what}" for k, what in _UNJOINED if joined.get(k))
    return Text(line, style="dim", overflow="fold")


_UNJOINED = (("not_made_in_call", "paired in order but made outside their call"),
             ("entries_unreadable", "entries unreadable"))


def render_groups(report: GroupsReport | None, stragglers: tuple[GroupStraggler, ...], console: Console) -> None:
    if report is None or not report.records:
        return
    console.print(groups_table(report))
    if stragglers:
        console.print(stragglers_table(stragglers, report.groups))
    note = inferred_text(report)
    if note is not None:
        console.print(note)
