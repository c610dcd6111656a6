"""rnnprof report's sections: findings first, no "not available" boxes, idle time by cause, kernel launches,
step times and stragglers across ranks, each figure checked against another command's --json on the same real
trace, or against the raw trace file."""

from __future__ import annotations

import gzip
import html
import json
import re
from pathlib import Path

import numpy as np
import pytest

from rnnprof.analyzers.audit import AuditResult, Finding, NotChecked, Severity, Subject
from rnnprof.analyzers.noise import StepNoise
from rnnprof.cli import main
from rnnprof.paths import shown

DATA = Path(__file__).parent / "data"
ONE_GPU = DATA / "kineto-1gpu-v100.json.gz"
RANKS = [DATA / "kineto-sampled-rank0.json.gz", DATA / "kineto-sampled-rank1.json.gz"]
TF1 = DATA / "tf1-timeline-gpu-loop-step0.json"


def _json(capsys, *argv) -> dict:
    capsys.readouterr()
    assert main([*map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _page(paths, out: Path, capsys) -> str:
    assert main(["report", *map(str, paths), "-o", str(out)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    return out.read_text()


def _section(page: str, heading: str) -> str:
    """The markup from ``heading`` (an h2 or h3 text) to the next heading of any level."""
    match = re.search(rf"<h([23])>{re.escape(html.escape(heading))}</h\1>(.*?)(?=<h[23]>|$)", page, re.S)
    assert match, f"no section {heading!r}"
    return match.group(2)


def _tables(markup: str) -> list[list[list[str]]]:
    """Each table's rows (header row first) as lists of cell texts, a clipped cell's full text from its title."""
    tables = []
    for table in re.findall(r"<table>(.*?)</table>", markup, re.S):
        rows = []
        for row in re.findall(r"<tr>(.*?)</tr>", table, re.S):
            cells = re.findall(r"<t[dh]([^>]*)>(.*?)</t[dh]>", row, re.S)
            rows.append([html.unescape(re.search(r'title="([^"]*)"', a).group(1) if 'title="' in a else t)
                         for a, t in cells])
        tables.append(rows)
    return tables


def _number(text: str) -> float:
    return float(text.replace(",", ""))


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    import rnnprof.commands.report as report_command

    folder = tmp_path_factory.mktemp("sections")
    out = {}
    with pytest.MonkeyPatch.context() as patch:  # no audit document: the Findings section is left out
        patch.setattr(report_command, "_findings", lambda report: (None, "no audit in this test"))
        for name, paths in (("one", [ONE_GPU]), ("ranks", RANKS), ("tf1", [TF1])):
            assert main(["report", *map(str, paths), "-o", str(folder / f"{name}.html")]) == 0
            out[name] = (folder / f"{name}.html").read_text()
    return out


# -- what the page leaves out ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["one", "ranks", "tf1"])
def test_no_section_opens_with_a_not_available_box_and_one_line_at_the_end_lists_what_was_left_out(pages, name):
    page = re.sub(r"<script.*?</script>", "", pages[name], flags=re.S)  # the markup, without the chart library
    assert 'class="missing"' not in page and "not available" not in page
    body = page.split("<body>")[1]
    headings = re.findall(r"<h2>(.*?)</h2>", body)
    first = headings[0]
    if name == "ranks":  # 2 ranks of a 128-rank job: the page says so first (its one note), as comm and audit do
        notes = re.findall(r"<p class=.note.>(.*?)</p>", body.split("<h2>")[1], re.S)
        assert first == "The run" and [html.unescape(n) for n in notes] == [
            f"note: {', '.join(map(shown, RANKS))}: 2 of the job's 128 ranks are given"], notes
        first = headings[1]
    assert first in ("Throughput", "Time per device"), first  # the first section shows figures
    left = re.findall(r'<p class="left-out sub" id="left-out">Left out: (.*?)\.</p>', page, re.S)
    assert len(left) == 1
    # it is the page's last paragraph, after every section
    assert body.index('id="left-out"') > max(m.start() for m in re.finditer(r"<h[23]>", body))
    text = html.unescape(left[0])
    assert "Configuration and environment (" in text and "no run manifest" in text
    assert "Findings (no audit in this test)" in text
    if name == "tf1":  # no step markers, no launch calls
        for what in ("Throughput (", "Per-step bars (the trace has no step markers)", "Idle time by cause (",
                     "Kernel launches ("):
            assert what in text
    else:
        for what in ("Throughput (", "Per-step bars", "Kernel launches (", "Idle time by cause ("):
            assert what not in text


# -- idle time by cause, as comm --json gives it ---------------------------------------------------------------------

@pytest.mark.parametrize("name, paths", [("one", [ONE_GPU]), ("ranks", RANKS)])
def test_idle_time_by_cause_equals_comm_json(pages, capsys, name, paths):
    document = _json(capsys, "comm", *paths)
    (table,) = _tables(_section(pages[name], "Idle time by cause"))
    assert table[0] == ["device / stream", "idle ms", "host wait %", "kernel wait %", "other %"]
    expected = []
    for device in document["devices"]:
        idle = device["idle_by_cause"]
        assert idle is not None
        for label, c in ((device["device"], idle["total"]),
                         *((f"{device['device']} {s['stream']}", s["total"]) for s in idle["streams"])):
            expected.append((label, c))
    assert [row[0] for row in table[1:]] == [label for label, _ in expected]
    for row, (_, c) in zip(table[1:], expected):
        assert _number(row[1]) == pytest.approx(c["idle_us"] / 1000, abs=5e-4)
        for cell, key in zip(row[2:], ("host_wait_us", "kernel_wait_us", "other_us")):
            assert _number(cell) == pytest.approx(100 * c[key] / c["idle_us"], abs=0.05)
    # the shares are those of the trace: host wait dominates some stream of the 2-rank job, as comm's own table says
    assert len(table) > 2


# -- kernel launches, as count-ops --json gives them ----------------------------------------------------------------

@pytest.mark.parametrize("name, paths", [("one", [ONE_GPU]), ("ranks", RANKS)])
def test_kernel_launch_statistics_equal_count_ops_json(pages, capsys, name, paths):
    launches = _json(capsys, "count-ops", *paths)["launches"]
    assert launches["available"]
    section = _section(pages[name], "Kernel launches")
    summary = html.unescape(re.search(r"<p>(.*?)</p>", section, re.S).group(1))
    assert f"{launches['kernels']:,} GPU kernels, {launches['launched']:,} with their launch call" in summary
    assert f"launch delay median {launches['launch_delay_median_us']:,.1f} µs" in summary
    assert f"p95 {launches['launch_delay_p95_us']:,.1f} µs" in summary
    assert f"{100 * launches['short_kernel_share']:.1f}% shorter than" in summary
    shares, kernels, ops = _tables(section)
    assert {row[0]: _number(row[1]) for row in shares[1:]} == pytest.approx(
        {gpu: 100 * share for gpu, share in launches["host_wait_share_of_span"].items()}, abs=0.05)
    assert {row[0] for row in shares[1:] if row[2] == "yes"} == set(launches["launch_bound"])
    expected = launches["by_kernel"][:15]
    assert [row[0] for row in kernels[1:]] == [k["name"] for k in expected]
    for row, k in zip(kernels[1:], expected):
        assert [int(row[1]), int(row[2]), int(row[8]), int(row[9])] == [
            k["kernels"], k["launched"], k["shorter_than_launch_call"], k["short_kernels"]]
        assert _number(row[3]) == pytest.approx(k["total_us"] / 1000, abs=5e-4)
        assert _number(row[6]) == pytest.approx(k["launch_delay_median_us"], abs=0.051)
    assert [row[0] for row in ops[1:]] == [o["name"] for o in launches["by_host_op"][:15]]
    assert [int(row[1]) for row in ops[1:]] == [o["ops"] for o in launches["by_host_op"][:15]]


# -- step times from the trace's ProfilerStep ranges ----------------------------------------------------------------

def _profiler_steps(path: Path) -> np.ndarray:
    """Durations (µs) of the host ProfilerStep#N ranges, read from the raw file."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    return np.array([e["dur"] for e in events if e.get("ph") == "X" and e.get("cat") != "gpu_user_annotation"
                     and re.fullmatch(r"ProfilerStep#\d+", e.get("name", ""))], dtype=float)


@pytest.mark.parametrize("name, paths", [("one", [ONE_GPU]), ("ranks", RANKS)])
def test_throughput_comes_from_the_profiler_step_ranges(pages, name, paths):
    durations = np.concatenate([_profiler_steps(p) for p in paths])
    assert len(durations) >= 2
    median = np.median(durations)
    (table,) = _tables(_section(pages[name], "Throughput"))
    assert table[0][:4] == ["step markers", "steps/s", "median step ms", "spread ms (MAD)"]
    row = table[1]
    assert int(row[0]) == len(durations)
    assert _number(row[1]) == pytest.approx(1e6 / median, abs=5e-4)
    assert _number(row[2]) == pytest.approx(median / 1000, abs=5e-4)
    assert _number(row[3]) == pytest.approx(np.median(np.abs(durations - median)) / 1000, abs=5e-4)
    assert _number(row[4]) == pytest.approx(durations.min() / 1000, abs=5e-4)
    assert _number(row[5]) == pytest.approx(durations.max() / 1000, abs=5e-4)


# -- stragglers across ranks, as comm --json gives them -------------------------------------------------------------

def test_the_cross_rank_straggler_is_on_the_page_as_comm_json_names_it(pages, capsys):
    collectives = _json(capsys, "comm", *RANKS)["collectives"]
    assert collectives["straggler"]
    section = _section(pages["ranks"], "Stragglers across ranks")
    straggler = next(r for r in collectives["ranks"] if r["rank"] == collectives["straggler"])
    assert (f"Straggler: {collectives['straggler']} arrived last at {straggler['arrived_last']} of "
            f"{straggler['collectives']} collectives, costing the other ranks "
            f"{straggler['caused_wait_us'] / 1000:,.3f} ms of waiting.") in html.unescape(section)
    ranks, skew = _tables(section)
    assert [[r[0], int(r[1]), int(r[2]), _number(r[3]), _number(r[4])] for r in ranks[1:]] == [
        [r["rank"], r["collectives"], r["arrived_last"], pytest.approx(r["caused_wait_us"] / 1000, abs=5e-4),
         pytest.approx(r["waited_us"] / 1000, abs=5e-4)] for r in collectives["ranks"]]
    top = sorted(collectives["collectives"], key=lambda c: -c["skew_us"])[:10]
    assert [_number(r[5]) for r in skew[1:]] == [pytest.approx(c["skew_us"] / 1000, abs=5e-4) for c in top]
    assert [r[4] for r in skew[1:]] == [c["last_rank"] for c in top]


def test_one_rank_has_no_cross_rank_section(pages):
    assert "Stragglers across ranks" not in pages["one"]


# -- findings ------------------------------------------------------------------------------------------------------

FINDINGS = AuditResult(
    findings=(Finding("PF007", Severity.ERROR, "rank1 arrives last at <every> collective",
                      Subject(rank="rank1", device="gpu:1"), {"arrived_last": 8, "of": 10}, saving_us=12345.6,
                      saving_basis="other ranks' wait per step", confidence=0.9),
              Finding("PF002", Severity.INFO, "many short kernels", Subject(op="aten::add"),
                      saving_basis="not estimated", confidence=0.4)),
    not_checked=(NotChecked("PF004", "no synchronizing call in the trace"),), checked=("PF007", "PF002"),
    noise=StepNoise((1, 2, 3, 4, 5), (94000.0, 95250.0, 96500.0, 97750.0, 99000.0)),
    notes=("two of 128 ranks given",))


def test_findings_come_first_before_any_chart_in_the_audits_order(tmp_path, capsys, monkeypatch):
    import rnnprof.commands.report as report_command

    seen = []

    def findings(report):
        seen.append(report.findings)
        return FINDINGS, ""

    monkeypatch.setattr(report_command, "_findings", findings)
    page = _page(RANKS, tmp_path / "f.html", capsys)
    assert len(seen) == 1 and isinstance(seen[0], AuditResult)  # asked once, for the report's own audit
    body = page.split("<body>")[1]
    assert re.search(r"<h2>(.*?)</h2>", body).group(1) == "Findings"
    assert body.index("<h2>Findings</h2>") < body.index('<div class="chart"')
    section = _section(page, "Findings")
    text = html.unescape(re.sub(r"<[^>]+>", " ", section))
    blocks = re.findall(r'<div class="finding" data-rule="(\w+)">(.*?)</details></div>', section, re.S)
    assert [rule for rule, _ in blocks] == ["PF007", "PF002"]  # in the audit's order
    first, second = (" ".join(html.unescape(re.sub(r"<[^>]+>", " ", b)).split()) for _, b in blocks)
    # a sentence: what, where it names, what fixing it saves (12.3456 ms of a 96.5 ms median step: 12.79%), and why
    assert first.startswith("error PF007 rank1 arrives last at <every> collective. (confidence 0.90) Fixing it would "
                            "save 12.346 ms a step (12.8% of the 96.500 ms median step): other ranks' wait per step.")
    assert "confidence" not in second and second.startswith("info PF002 many short kernels. No saving is estimated.")
    # the evidence: a labelled table with units, folded until opened
    evidence = re.search(r"<details><summary>(.*?)</summary>.*?<table class=\"evidence\">(.*?)</table>", blocks[0][1],
                         re.S)
    assert html.unescape(evidence.group(1)) == "evidence (rank rank1, device gpu:1): 2 figures"
    (table,) = _tables(f"<table>{evidence.group(2)}</table>")
    assert table == [["evidence", "value", "unit"], ["arrived last", "8", ""], ["of", "10", ""]]
    assert "<every>" not in page  # escaped
    assert "96.500 ms (median) ± 1.250 ms" in text and "over 5 step(s)" in text
    assert "note: two of 128 ranks given" in text and "Rules checked: PF007, PF002." in text
    # the rules not checked: one line that opens on why
    folded = re.search(r'<details class="not-checked sub"><summary>(.*?)</summary>(.*?)</details>', section, re.S)
    assert folded.group(1) == "1 rule(s) not checked: PF004"
    assert "PF004</code>: no synchronizing call in the trace" in folded.group(2)
    assert "Findings (" not in "".join(re.findall(r'id="left-out">(.*?)</p>', page))


def test_evidence_is_labelled_with_its_units():
    from rnnprof.reports.findings_html import evidence_rows

    assert evidence_rows({"exposed_ms_per_step": 4.8984, "lateness_ms": {"3": 23.1, "4": 33.0}, "steps": 6,
                          "busy_us": 1500.5, "share_pct": 12.0, "cause": "host gap"}) == [
        ("exposed", "4.898", "ms/step"), ("lateness", "3: 23.1; 4: 33", "ms"), ("steps", "6", ""),
        ("busy", "1,500.5", "µs"), ("share", "12", "%"), ("cause", "host gap", "")]


def test_an_audit_with_no_finding_says_so(tmp_path, capsys, monkeypatch):
    import rnnprof.commands.report as report_command

    monkeypatch.setattr(report_command, "_findings", lambda report: (
        AuditResult((), (), ("PF001",), StepNoise((1, 2, 3), (1000.0, 1000.0, 1000.0))), ""))
    page = _page([ONE_GPU], tmp_path / "n.html", capsys)
    assert "<p>No finding: the rules that could run found nothing to fix.</p>" in _section(page, "Findings")


def test_cpu_ranks_say_why_they_have_no_idle_time_by_cause(tmp_path, capsys):
    gloo = [DATA / "torch-gloo-rank0.json.gz", DATA / "torch-gloo-rank1.json.gz"]
    document = _json(capsys, "comm", *gloo)
    assert {d["basis"] for d in document["devices"]} == {"host operators"}
    assert all(d["idle_by_cause"] is None for d in document["devices"])
    page = _page(gloo, tmp_path / "gloo.html", capsys)
    (left,) = re.findall(r'id="left-out">Left out: (.*?)</p>', page)
    assert "Idle time by cause (ranks without a GPU, measured by their host operators" in html.unescape(left)
    assert "<h3>Idle time by cause</h3>" not in page


def test_the_input_line_gives_paths_relative_to_where_the_command_ran(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(DATA.parent)
    page = _page([path.resolve() for path in RANKS], tmp_path / "r.html", capsys)  # given as absolute paths
    line = re.search(r"<p class='sub'>input: (.*?)</p>", page).group(1)
    assert line.startswith("data/kineto-sampled-rank0.json.gz, data/kineto-sampled-rank1.json.gz (kineto")
    assert str(DATA.parent) not in page
    monkeypatch.chdir(tmp_path)  # inputs outside the folder the command runs in: as given
    page = _page(RANKS, tmp_path / "s.html", capsys)
    assert f"input: {RANKS[0]}, {RANKS[1]} (kineto" in page
