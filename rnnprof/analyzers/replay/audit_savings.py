"""Audit findings' savings from a replay of their fixes (``fixes.fix_changes``): a finding whose fix can be
replayed gets the saving the replay predicts, basis ``replay``, its rule's bound kept in its evidence; one whose
fix cannot keeps its bound, and a note says which and why. The audit ends with the saving its top findings'
fixes would give together.

The replays run on ``audit_replayer``'s steps: every step of a run of at most ``SAMPLED_STEPS``, else that many in
the middle of the run, one after another, fewer where their events are many (``sampled_steps``); a note names
them and counts the rest, and ``whatif --steps`` replays the same. Each step's unchanged replay is made once
for every fix, and a set of changes is replayed once however many findings it fixes. The replays are a
``Replays``: one table's (``TableReplays``), or a whole job's whose ranks were read apart (``rnnprof.job.audit``),
which replays the sets of changes asked for at once, step by step in workers."""

from __future__ import annotations

import dataclasses
import statistics
from typing import Iterable, Protocol, Sequence

import numpy as np

from rnnprof.analyzers.audit import copy_churn, host_overhead, input_stalls, slow_link, straggler, tensor_parallel
from rnnprof.analyzers.audit.finding import Finding, Severity
from rnnprof.analyzers.audit.judge import WARNING_PCT
from rnnprof.analyzers.audit.registry import AuditResult, rank_key
from rnnprof.analyzers.audit.top_fixes import TopFixes
from rnnprof.analyzers.critical_path import Dependencies
from rnnprof.analyzers.noise import K
from rnnprof.analyzers.replay.analysis import Replayer
from rnnprof.analyzers.replay.fixes import SYNCS, fix_changes
from rnnprof.analyzers.replay.result import EVEN_HOST, EVEN_INPUT, EVEN_WORK, Change, ChangeError
from rnnprof.events import Device, EventTable

TOGETHER = 3  # the top findings whose fixes are replayed together
REPLAY_BASIS = "replay"  # a saving_basis that starts with it: the saving a replay of the fix predicts
SAMPLED_STEPS = 8  # the most steps the audit replays (a run with more: that many in its middle)
SAMPLED_EVENTS = 400_000  # the most events of the steps replayed, once they are FEWEST_STEPS or more
FEWEST_STEPS = 3

# rule -> the subject its fix needs, read off the finding's typed fields
_FIX_SUBJECT = {
    straggler.RULE_ID: lambda f: f.subject.rank or "",
    input_stalls.RULE_ID: lambda f: f.subject.rank or "",
    copy_churn.RULE_ID: lambda f: SYNCS if f.evidence.get("kind") == copy_churn.SYNC else f.evidence.get("kind", ""),
    host_overhead.RULE_ID: lambda f: f.subject.op or "",
    tensor_parallel.RULE_ID: lambda f: f.subject.op or "",
    slow_link.RULE_ID: lambda f: f"{f.subject.op}={f.evidence['ratio']:.4g}",
}


def fix_of(finding: Finding) -> str:
    """The ``--fix`` text of a finding: its rule, with the subject its fix needs (a rank, an operator, the copy
    kind or the synchronizing calls of a copy-churn finding: its evidence's ``kind``, ``copy_churn.SYNC`` for
    the calls)."""
    subject = _FIX_SUBJECT.get(finding.rule)
    return finding.rule if subject is None else f"{finding.rule}:{subject(finding)}"


def _median_saving(savings: Iterable[float]) -> float:
    """The median over the steps of the unchanged replay less the changed one (the model's own error cancels),
    none below 0."""
    return max(0.0, float(statistics.median(savings)))


def sampled_steps(table: EventTable) -> list[int] | None:
    """The steps of ``table`` the audit replays: None (every step) where it has at most ``SAMPLED_STEPS``, else
    that many in the middle of the run, one after another (``whatif --steps FIRST:LAST`` replays the same), fewer
    (not under ``FEWEST_STEPS``) where their events would be more than ``SAMPLED_EVENTS`` (a job's ranks side by
    side: its steps are large, and each one's replay holds every rank)."""
    return sampled_of(step_events(table))


def step_events(table: EventTable) -> dict[int, int]:
    """Step -> how many events of the table it holds (a job's ranks give theirs apart, and they add up)."""
    steps, counts = np.unique(table.step[table.step >= 0], return_counts=True)
    return {int(s): int(n) for s, n in zip(steps, counts)}


def sampled_of(events: dict[int, int]) -> list[int] | None:
    """``sampled_steps`` of the steps' event counts (``step_events``)."""
    steps = sorted(events)
    if len(steps) <= SAMPLED_STEPS:
        return None
    per_step = float(np.median([events[s] for s in steps]))
    most = min(SAMPLED_STEPS, max(FEWEST_STEPS, int(SAMPLED_EVENTS // max(per_step, 1.0))))
    first = (len(steps) - most) // 2
    return steps[first:first + most]


class Replays(Protocol):
    """What the audit's savings read of a replay of the run's steps: the devices its changes are made on, the
    steps replayed (``steps``, known once it replayed any) of the run's ``every``, and ``savings``: for each set of
    changes, the unchanged replay less the changed one in each step replayed (or the ``ChangeError`` saying why it
    cannot be replayed); ``batched``: it replays many sets at once best (``_Savings.ask``)."""

    devices: Sequence[Device]
    steps: list[int]
    every: int
    batched: bool

    def savings(self, change_sets: Sequence[tuple[Change, ...]]) -> list: ...


class TableReplays:
    """The ``Replays`` of one table's ``Replayer``, a set of changes at a time."""

    batched = False

    def __init__(self, replayer: Replayer):
        self.replayer = replayer
        self.devices = replayer.table.devices
        self.steps = [s for s, _ in replayer.graphs]
        self.every = len(replayer.table.steps())

    def savings(self, change_sets: Sequence[tuple[Change, ...]]) -> list:
        found = []
        for changes in change_sets:
            try:
                found.append(self.replayer.savings_us(changes))
            except ChangeError as exc:
                found.append(exc)
        return found


def audit_replayer(table: EventTable, dependencies: Dependencies = Dependencies(),
                   classes: np.ndarray | None = None) -> TableReplays:
    """The replays of ``table`` on the steps the audit replays (``sampled_steps``)."""
    return TableReplays(Replayer(table, dependencies, steps=sampled_steps(table), classes=classes))


def replayed_steps(replays: Replays) -> str:
    """``--steps FIRST:LAST`` of the steps replayed where they are some of the run's steps (``whatif --fix ...
    --steps FIRST:LAST`` replays the same steps), else ''."""
    replayed = replays.steps
    if not replayed or len(replayed) >= replays.every:
        return ""
    return f"{replayed[0]}:{replayed[-1]}"


class _Savings:
    """The replayed saving of each set of changes, replayed once (``_median_saving`` of ``Replays.savings``:
    ``whatif`` of the same changes and steps gives it from its steps' ``replayed_us`` less ``predicted_us``)."""

    def __init__(self, replays: Replays):
        self.replays = replays
        self.found: dict[tuple[Change, ...], float | ChangeError] = {}

    def ask(self, change_sets: Iterable[Sequence[Change]]) -> None:
        """Replay the sets of changes that will be asked for next together, where the replays do many at once best
        (a job's: one round of its steps' tasks)."""
        keys = list(dict.fromkeys(tuple(dict.fromkeys(c)) for c in change_sets))
        keys = [k for k in keys if k not in self.found]
        if keys and self.replays.batched:
            self._replay(keys)

    def _replay(self, keys: list[tuple[Change, ...]]) -> None:
        for key, saved in zip(keys, self.replays.savings(keys)):
            self.found[key] = saved if isinstance(saved, ChangeError) else _median_saving(saved)

    def __call__(self, changes: Sequence[Change]) -> float:
        key = tuple(dict.fromkeys(changes))
        if key not in self.found:
            self._replay([key])
        found = self.found[key]
        if isinstance(found, ChangeError):
            raise found
        return found


def _sample_note(replays: Replays) -> list[str]:
    """What the replays left out: the steps of the run they did not replay, counted."""
    steps = replayed_steps(replays)
    if not steps:
        return []
    every, replayed = replays.every, len(replays.steps)
    return [f"replay: {replayed} of {every} steps replayed, {every - replayed} left out: each replayed saving is the "
            f"median over steps {steps.replace(':', ' to ')}, in the middle of the run (whatif --fix ... --steps "
            f"{steps} replays the same steps)"]


def _changes(finding: Finding, replays: Replays) -> list[Change] | str:
    try:
        changes = fix_changes(fix_of(finding), replays)
        for change in changes:
            if change.subject == "" and change.kind in (EVEN_HOST, EVEN_INPUT, EVEN_WORK):
                raise ChangeError(f"{finding.rule}: names no rank")
        return changes
    except ChangeError as exc:
        return str(exc)


def replayed_savings(result: AuditResult, replays: Replays | Replayer) -> AuditResult:
    """``result`` with each finding's saving from a replay of its fix where it can be replayed, re-ranked, and
    notes saying which kept their bound and what the top findings' fixes give together."""
    return replayed_audit(result, replays)[0]


def replayed_audit(result: AuditResult, replays: Replays | Replayer) -> tuple[AuditResult, TopFixes | None]:
    """``replayed_savings`` and the top findings' fixes replayed together (None: no fix could be replayed)."""
    replays = TableReplays(replays) if isinstance(replays, Replayer) else replays
    if not replays.steps or not result.findings:
        return result, None
    saving_of = _Savings(replays)
    wanted = [_changes(f, replays) for f in result.findings]
    saving_of.ask(c for c in wanted if not isinstance(c, str))
    if not replays.steps:
        return result, None
    findings, notes, fixes = [], [], {}
    for f, changes in zip(result.findings, wanted):
        if isinstance(changes, str):
            findings.append(f)
            if f.saving_us is not None:
                notes.append(f"{f.rule} keeps its bound: {changes.removeprefix('--fix ')}")
            continue
        try:
            saving = saving_of(changes)
        except ChangeError as exc:
            findings.append(f)
            notes.append(f"{f.rule} keeps its bound: {exc}")
            continue
        evidence = _replayed_evidence(f, changes)
        bound = "" if f.saving_us is None else f"; the rule's bound: {f.saving_us / 1000:.3f} ms"
        basis = f"{REPLAY_BASIS} of its fix ({evidence['replayed']}){bound}"
        severity = f.severity
        if severity >= Severity.WARNING and 100 * saving < WARNING_PCT * result.noise.median_us:
            severity = Severity.INFO  # fixed alone it buys too little to be an alarm: another cause hides it
            evidence["severity_by_bound"] = f.severity.label
        findings.append(dataclasses.replace(f, saving_us=saving, saving_basis=basis, evidence=evidence,
                                            severity=severity))
        fixes[fix_of(f)] = changes
    findings.sort(key=rank_key)
    top = _together(findings, fixes, saving_of, result.noise.median_us)
    hider = _hider(result, top, findings, fixes, saving_of) if top else None
    if hider is not None:
        findings.append(hider)
        findings.sort(key=rank_key)
        top = _together(findings, fixes, saving_of, result.noise.median_us)
    notes.extend([top.note()] if top else [])
    notes.extend(_sample_note(replays))
    return dataclasses.replace(result, findings=tuple(findings), notes=(*result.notes, *notes), top_fixes=top), top


def _replayed(f: Finding, fixes: dict[str, list[Change]]) -> bool:
    """Whether ``f``'s saving comes from a replay of its fix (``fixes``: the changes of each fix replayed, by its
    ``fix_of`` text)."""
    return f.saving_basis.startswith(REPLAY_BASIS) and fix_of(f) in fixes


def _hider(result: AuditResult, top: TopFixes, findings: list[Finding], fixes: dict[str, list[Change]],
           saving_of: _Savings) -> Finding | None:
    """Where a top finding is hidden (its fix alone buys little: ``severity_by_bound``), the finding a rule held
    back as within the jitter (``AuditResult.held_back``) whose fix, added to the top fixes, saves more than the
    run's jitter allows (``noise.K`` times its spread) and ``WARNING_PCT`` of the step beyond them: what hides it
    (a rank asleep at the collectives while another loads its batch). It comes back at warning, its saving its own
    fix's replay, and joins ``fixes``; None when no held-back finding does."""
    hidden = [findings[k] for k in top.positions if "severity_by_bound" in findings[k].evidence]
    if not hidden or not result.held_back:
        return None
    base = list(dict.fromkeys(c for fix in top.fixes for c in fixes[fix]))
    step_us = result.noise.median_us
    floor = max(K * result.noise.spread_us, WARNING_PCT * step_us / 100)
    wanted = [_changes(candidate, saving_of.replays) for candidate in result.held_back]
    saving_of.ask(c for changes in wanted if not isinstance(changes, str) for c in ([*base, *changes], changes))
    for candidate, changes in zip(result.held_back, wanted):
        if isinstance(changes, str):
            continue
        try:
            together = saving_of([*base, *changes])
            if together - top.saving_us <= floor:
                continue
            alone = saving_of(changes)
        except ChangeError:
            continue
        labels = [_label(f) for f in hidden]
        evidence = {**_replayed_evidence(candidate, changes), "hides": labels, "together_ms": round(together / 1000, 3)}
        found = dataclasses.replace(
            candidate, severity=Severity.WARNING, saving_us=alone, evidence=evidence,
            title=f"{candidate.title}; within the jitter alone, it hides {', '.join(labels)}",
            saving_basis=(f"{REPLAY_BASIS} of its fix ({evidence['replayed']}); with {', '.join(labels)} fixed too: "
                          f"{together / 1000:.3f} ms, {(together - top.saving_us) / 1000:.3f} ms more than without it"))
        fixes[fix_of(found)] = changes
        return found
    return None


def _together(findings: list[Finding], fixes: dict[str, list[Change]], saving_of: _Savings,
              step_us: float) -> TopFixes | None:
    """The top findings (alarms first) whose fixes were replayed, fixed together. An alarm by its bound that
    fixed alone buys little (``severity_by_bound``) counts as an alarm here: another cause hides it, and fixing
    that cause brings it out (a slow loader on one rank behind another rank's sleep)."""
    replayed = [k for k, f in enumerate(findings) if _replayed(f, fixes)]
    alarms = [k for k in replayed if findings[k].severity >= Severity.WARNING
              or "severity_by_bound" in findings[k].evidence]
    top = (alarms or replayed)[:TOGETHER]
    if not top:
        return None
    saving = saving_of([c for k in top for c in fixes[fix_of(findings[k])]])
    return TopFixes(tuple(_label(findings[k]) for k in top), tuple(fix_of(findings[k]) for k in top), saving,
                    step_us, tuple(top), replayed_steps(saving_of.replays))


def _replayed_evidence(f: Finding, changes: list[Change]) -> dict:
    """A finding's evidence once its saving comes from a replay: the rule's bound kept, and the changes replayed."""
    return {**f.evidence, "bound_ms": None if f.saving_us is None else round(f.saving_us / 1000, 3),
            "bound_basis": f.saving_basis, "replayed": "; ".join(c.describe() for c in changes)}


def _label(f: Finding) -> str:
    """A finding's rule and subject, as the top fixes name it ("PF005 rank0", "PF006 aten::mm")."""
    return f.rule + f" {f.subject.rank or f.subject.op or ''}".rstrip()
