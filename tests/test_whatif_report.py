"""rnnprof report's predicted step after the top fixes, against ``rnnprof whatif --fix ...`` of the same findings
on the same input: two paths through the CLI (report's analyses in one process; audit --json's findings and
whatif --json's replayed steps) must give the same figures."""

from __future__ import annotations

import html
import json
import re
import statistics

from fixtures import FIXTURES as DATA
from rnnprof.cli import main

SAMPLED = [str(DATA / "kineto-sampled-rank0.json.gz"), str(DATA / "kineto-sampled-rank1.json.gz")]
LINE = re.compile(r"Predicted step after fixing (.+?) together: ([\d,.]+) ms, ([\d,.]+) ms \(([\d.]+)%\) less "
                  r"than the measured ([\d,.]+) ms \(a replay: whatif ((?:--fix \S+ ?)+)\)")


def _ms(text: str) -> float:
    return float(text.replace(",", ""))


def _fix_of(finding: dict) -> str:
    """A finding's --fix text, as a user reads it off audit --json."""
    rule, subject = finding["rule"], finding["subject"]
    if rule in ("PF001", "PF005"):
        return f"{rule}:{subject.get('rank') or ''}"
    if rule == "PF004":
        return "PF004:syncs" if finding["evidence"]["kind"] == "sync" else f"PF004:{finding['evidence']['kind']}"
    return f"PF006:{subject.get('op') or ''}" if rule == "PF006" else rule


def test_the_reports_predicted_step_after_the_top_fixes_is_whatifs_of_the_same_fixes(tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", *SAMPLED, "-o", str(out)]) == 0
    found = LINE.search(html.unescape(re.sub(r"<[^>]+>", "", out.read_text())))
    assert found, "the findings section gives the predicted step after the top fixes"
    names, predicted, saving, share, measured, flags = found.groups()
    fixes = flags.split()[1::2]
    capsys.readouterr()

    assert main(["audit", *SAMPLED, "--json", "--fail-on", "never"]) == 0
    audit = json.loads(capsys.readouterr().out)
    replayed = [f for f in audit["findings"] if f["saving_basis"].startswith("replay")]
    alarms = [f for f in replayed if f["severity"] in ("warning", "error")]
    top = (alarms or replayed)[:3]
    assert fixes == [_fix_of(f) for f in top] and len(fixes) >= 2  # the audit's top replayed findings
    assert _ms(measured) == audit["noise"]["step_ms_median"]
    assert any(n.startswith(f"replay: fixing {names} together saves {saving} ms") for n in audit["notes"])

    assert main(["whatif", *SAMPLED, *(a for f in fixes for a in ("--fix", f)), "--json"]) == 0
    steps = json.loads(capsys.readouterr().out)["steps"]
    expected = max(0.0, statistics.median(s["replayed_us"] - s["predicted_us"] for s in steps)) / 1000
    assert _ms(saving) == round(expected, 3) and expected > 0
    assert abs(_ms(predicted) - (audit["noise"]["step_ms_median"] - expected)) <= 0.0015
    assert abs(float(share) - 100 * expected / audit["noise"]["step_ms_median"]) <= 0.05
    # audit --json says the same in its own field: where those findings are, their fixes, the figures
    together = audit["top_fixes"]
    assert [audit["findings"][k] for k in together["findings"]] == top and together["fixes"] == fixes
    assert together["saving_ms"] == round(expected, 3)
    assert abs(together["predicted_step_ms"] - (audit["noise"]["step_ms_median"] - expected)) <= 0.0015


def test_an_audit_of_more_steps_than_it_replays_says_which_and_whatif_of_those_steps_gives_its_savings(
        monkeypatch, capsys):
    """The audit replays at most ``SAMPLED_STEPS`` steps, those in the middle of the run (here 2 of the H200
    capture's steps 3-6, whose graph launch saves a different time each step); it says so, and each replayed
    saving and the top fixes' are whatif's over the same steps (``--steps``)."""
    from rnnprof.analyzers.replay import audit_savings

    monkeypatch.setattr(audit_savings, "SAMPLED_STEPS", 2)
    trace = str(DATA / "kineto-h200-launch-eager.json.gz")
    assert main(["audit", trace, "--json", "--fail-on", "never"]) == 0
    audit = json.loads(capsys.readouterr().out)
    assert audit["top_fixes"]["steps"] == "4:5"
    assert [n for n in audit["notes"] if n.startswith("replay: 2 of 4 steps replayed, 2 left out")
            and "steps 4 to 5" in n]

    def saving_ms(*fixes: str) -> float:
        assert main(["whatif", trace, *(a for f in fixes for a in ("--fix", f)), "--steps", "4:5", "--json"]) == 0
        steps = json.loads(capsys.readouterr().out)["steps"]
        assert [s["step"] for s in steps] == [4, 5]
        return round(max(0.0, statistics.median(s["replayed_us"] - s["predicted_us"] for s in steps)) / 1000, 3)

    replayed = [f for f in audit["findings"] if f["saving_basis"].startswith("replay")]
    assert any(f["saving_ms"] > 1 for f in replayed)
    for finding in replayed:
        assert finding["saving_ms"] == saving_ms(_fix_of(finding)), finding["rule"]
    assert audit["top_fixes"]["saving_ms"] == saving_ms(*audit["top_fixes"]["fixes"])


def test_the_steps_an_audit_replays_are_those_in_the_middle_of_the_run_fewer_where_steps_are_large(monkeypatch):
    """Every step of a run of at most ``SAMPLED_STEPS``; else that many in its middle, one after another; fewer,
    though not under ``FEWEST_STEPS``, where their events would pass ``SAMPLED_EVENTS``."""
    from rnnprof.analyzers.replay import audit_savings
    from rnnprof.analyzers.replay.audit_savings import sampled_steps
    from rnnprof.events import Device, EventTableBuilder, Kind

    def run(steps: int, events: int):
        builder = EventTableBuilder("test")
        for s in range(steps):
            for k in range(events):
                builder.add(ts=1000.0 * s + k, dur=1.0, name="op", op_type="op", device=Device("cpu", 0),
                            lane="main", kind=Kind.HOST_OP, step=100 + s)
        return builder.build()

    monkeypatch.setattr(audit_savings, "SAMPLED_EVENTS", 50)
    assert sampled_steps(run(8, 10)) is None
    assert sampled_steps(run(20, 5)) == list(range(106, 114))  # 8 steps of 5 events: 40
    assert sampled_steps(run(20, 10)) == list(range(107, 112))  # 5 of 10 events: 50
    assert sampled_steps(run(21, 40)) == [109, 110, 111]  # the fewest: 3


def test_a_findings_fix_is_named_by_its_rule_and_typed_fields_not_its_title():
    """``fix_of`` reads a copy-churn finding's evidence ``kind`` (the rule's own constant for synchronizing
    calls), a straggler's or a loader's rank and a host-overhead finding's operator; a title saying otherwise
    changes nothing."""
    from rnnprof.analyzers.audit import copy_churn
    from rnnprof.analyzers.audit.finding import Finding, Severity, Subject
    from rnnprof.analyzers.replay.audit_savings import fix_of

    def finding(rule, title, subject=Subject(), **evidence):
        return Finding(rule=rule, severity=Severity.WARNING, title=title, subject=subject, evidence=evidence)

    assert fix_of(finding("PF004", "r0/gpu0: 3 calls/step leave the GPU idle", kind=copy_churn.SYNC)) == "PF004:syncs"
    assert fix_of(finding("PF004", "r0/gpu0: 12 synchronizing HtoD copies/step", kind="HtoD")) == "PF004:HtoD"
    assert fix_of(finding("PF001", "rank3 arrives last", Subject(rank="rank3", op="aten::mm"))) == "PF001:rank3"
    assert fix_of(finding("PF005", "rank0 waits for its batch", Subject(rank="rank0"))) == "PF005:rank0"
    assert fix_of(finding("PF006", "aten::mul_ on the host", Subject(rank="rank0", op="aten::mul_"))) == \
        "PF006:aten::mul_"
    assert fix_of(finding("PF002", "rank1: communication not overlapped", Subject(rank="rank1"))) == "PF002"
