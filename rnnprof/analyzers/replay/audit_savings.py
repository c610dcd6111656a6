"""Audit findings' savings from a replay of their fixes (``fixes.fix_changes``): a finding whose fix can be
replayed gets the saving the replay predicts, basis ``replay``, its rule's bound kept in its evidence; one whose
fix cannot keeps its bound, and a note says which and why. The audit ends with the saving its top findings'
fixes would give together."""

from __future__ import annotations

import dataclasses
import statistics

from rnnprof.analyzers.audit.finding import Finding, Severity
from rnnprof.analyzers.audit.judge import WARNING_PCT
from rnnprof.analyzers.audit.registry import AuditResult, rank_key
from rnnprof.analyzers.audit.top_fixes import TopFixes
from rnnprof.analyzers.noise import K
from rnnprof.analyzers.replay.analysis import Replayer
from rnnprof.analyzers.replay.fixes import fix_changes
from rnnprof.analyzers.replay.result import EVEN_HOST, EVEN_INPUT, EVEN_WORK, Change, ChangeError, WhatIfReport

TOGETHER = 3  # the top findings whose fixes are replayed together
REPLAY_BASIS = "replay"  # a saving_basis that starts with it: the saving a replay of the fix predicts


def fix_of(finding: Finding) -> str:
    """The ``--fix`` text of a finding: its rule, with the subject its fix needs."""
    rule, subject = finding.rule, finding.subject
    if rule in ("PF001", "PF005"):
        return f"{rule}:{subject.rank or ''}"
    if rule == "PF004":
        return "PF004:syncs" if "synchroniz" in finding.title else f"PF004:{finding.evidence.get('kind', '')}"
    if rule == "PF006":
        return f"PF006:{subject.op or ''}"
    return rule


def replay_saving_us(report: WhatIfReport) -> float:
    """The median over the steps of the unchanged replay less the changed one (the model's own error cancels)."""
    return max(0.0, float(statistics.median(s.replayed_us - s.predicted_us for s in report.steps)))


def _changes(finding: Finding, replayer: Replayer) -> list[Change] | str:
    try:
        changes = fix_changes(fix_of(finding), replayer.table)
        for change in changes:
            if change.subject == "" and change.kind in (EVEN_HOST, EVEN_INPUT, EVEN_WORK):
                raise ChangeError(f"{finding.rule}: names no rank")
        return changes
    except ChangeError as exc:
        return str(exc)


def replayed_savings(result: AuditResult, replayer: Replayer) -> AuditResult:
    """``result`` with each finding's saving from a replay of its fix where it can be replayed, re-ranked, and
    notes saying which kept their bound and what the top findings' fixes give together."""
    return replayed_audit(result, replayer)[0]


def replayed_audit(result: AuditResult, replayer: Replayer) -> tuple[AuditResult, TopFixes | None]:
    """``replayed_savings`` and the top findings' fixes replayed together (None: no fix could be replayed)."""
    if not replayer.graphs or not result.findings:
        return result, None
    findings, notes, fixes = [], [], {}
    for f in result.findings:
        changes = _changes(f, replayer)
        if isinstance(changes, str):
            findings.append(f)
            if f.saving_us is not None:
                notes.append(f"{f.rule} keeps its bound: {changes.removeprefix('--fix ')}")
            continue
        try:
            report = replayer.run(changes)
        except ChangeError as exc:
            findings.append(f)
            notes.append(f"{f.rule} keeps its bound: {exc}")
            continue
        evidence = _replayed_evidence(f, changes)
        bound = "" if f.saving_us is None else f"; the rule's bound: {f.saving_us / 1000:.3f} ms"
        basis = f"{REPLAY_BASIS} of its fix ({evidence['replayed']}){bound}"
        saving = replay_saving_us(report)
        severity = f.severity
        if severity >= Severity.WARNING and 100 * saving < WARNING_PCT * result.noise.median_us:
            severity = Severity.INFO  # fixed alone it buys too little to be an alarm: another cause hides it
            evidence["severity_by_bound"] = f.severity.label
        replayed = dataclasses.replace(f, saving_us=saving, saving_basis=basis, evidence=evidence, severity=severity)
        findings.append(replayed)
        fixes[id(replayed)] = changes
    findings.sort(key=rank_key)
    top = _together(findings, fixes, replayer, result.noise.median_us)
    hider = _hider(result, top, findings, fixes, replayer) if top else None
    if hider is not None:
        findings.append(hider)
        findings.sort(key=rank_key)
        top = _together(findings, fixes, replayer, result.noise.median_us)
    notes.extend([top.note()] if top else [])
    return dataclasses.replace(result, findings=tuple(findings), notes=(*result.notes, *notes), top_fixes=top), top


def _hider(result: AuditResult, top: TopFixes, findings: list[Finding], fixes: dict[int, list[Change]],
           replayer: Replayer) -> Finding | None:
    """Where a top finding is hidden (its fix alone buys little: ``severity_by_bound``), the finding a rule held
    back as within the jitter (``AuditResult.held_back``) whose fix, added to the top fixes, saves more than the
    run's jitter allows (``noise.K`` times its spread) and ``WARNING_PCT`` of the step beyond them: what hides it
    (a rank asleep at the collectives while another loads its batch). It comes back at warning, its saving its own
    fix's replay, and joins ``fixes``; None when no held-back finding does."""
    hidden = [findings[k] for k in top.positions if "severity_by_bound" in findings[k].evidence]
    if not hidden or not result.held_back:
        return None
    base = list(dict.fromkeys(c for k in top.positions for c in fixes[id(findings[k])]))
    step_us = result.noise.median_us
    floor = max(K * result.noise.spread_us, WARNING_PCT * step_us / 100)
    for candidate in result.held_back:
        changes = _changes(candidate, replayer)
        if isinstance(changes, str):
            continue
        try:
            together = replay_saving_us(replayer.run(list(dict.fromkeys([*base, *changes]))))
            if together - top.saving_us <= floor:
                continue
            alone = replay_saving_us(replayer.run(changes))
        except ChangeError:
            continue
        labels = [_label(f) for f in hidden]
        evidence = {**_replayed_evidence(candidate, changes), "hides": labels, "together_ms": round(together / 1000, 3)}
        found = dataclasses.replace(
            candidate, severity=Severity.WARNING, saving_us=alone, evidence=evidence,
            title=f"{candidate.title}; within the jitter alone, it hides {', '.join(labels)}",
            saving_basis=(f"{REPLAY_BASIS} of its fix ({evidence['replayed']}); with {', '.join(labels)} fixed too: "
                          f"{together / 1000:.3f} ms, {(together - top.saving_us) / 1000:.3f} ms more than without it"))
        fixes[id(found)] = changes
        return found
    return None


def _together(findings: list[Finding], fixes: dict[int, list[Change]], replayer: Replayer,
              step_us: float) -> TopFixes | None:
    """The top findings (alarms first) whose fixes were replayed, fixed together. An alarm by its bound that
    fixed alone buys little (``severity_by_bound``) counts as an alarm here: another cause hides it, and fixing
    that cause brings it out (a slow loader on one rank behind another rank's sleep)."""
    alarms = [f for f in findings if id(f) in fixes and (f.severity >= Severity.WARNING
                                                         or "severity_by_bound" in f.evidence)]
    top = (alarms or [f for f in findings if id(f) in fixes])[:TOGETHER]
    if not top:
        return None
    changes = list(dict.fromkeys(c for f in top for c in fixes[id(f)]))
    saving = replay_saving_us(replayer.run(changes))
    names = tuple(_label(f) for f in top)
    positions = tuple(next(k for k, g in enumerate(findings) if g is f) for f in top)
    return TopFixes(names, tuple(fix_of(f) for f in top), saving, step_us, positions)


def _replayed_evidence(f: Finding, changes: list[Change]) -> dict:
    """A finding's evidence once its saving comes from a replay: the rule's bound kept, and the changes replayed."""
    return {**f.evidence, "bound_ms": None if f.saving_us is None else round(f.saving_us / 1000, 3),
            "bound_basis": f.saving_basis, "replayed": "; ".join(c.describe() for c in changes)}


def _label(f: Finding) -> str:
    """A finding's rule and subject, as the top fixes name it ("PF005 rank0", "PF006 aten::mm")."""
    return f.rule + f" {f.subject.rank or f.subject.op or ''}".rstrip()
