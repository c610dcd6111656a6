"""An audit finding's fix as replay changes (``--fix RULE[:SUBJECT]``), or the one line saying why it cannot be
replayed. The rules: ``analyzers.audit`` (PF...) and ``analyzers.placement`` (PA...)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from rnnprof.analyzers.copies import COPY_KINDS
from rnnprof.analyzers.replay.job import ScannedNames, scanned_names
from rnnprof.events import Device, EventTable
from rnnprof.analyzers.replay.result import (EVEN_HOST, EVEN_INPUT, EVEN_WORK, GRAPH_LAUNCH, NO_COPIES, NO_SYNCS,
                                             OVERLAP, SCALE_HOST, Change, ChangeError, Inexpressible)

# rule -> what its fix is, as the replay understands it (docs/commands/whatif.md, "Audit fixes")
FIXES = {
    "PF001": "the straggler's untraced host time and data loading at the other ranks' median, and the operators no "
             "other rank runs removed",
    "PF002": "communication overlapped with compute",
    "PF004": "device copies removed (PF004:HtoD: those of one kind; PF004:syncs: synchronizing calls removed)",
    "PF005": "the rank's data loading at the other ranks' median",
    "PF006": "the operator's host-side time removed, its kernels and launch calls kept (PF006:OP)",
    "PF007": "kernels launched by a graph launch",
}
NOT_REPLAYED = {
    "PF003": "GPU idle has several causes; replay the one you mean (--graph-launch, --scale OP=F)",
    "PA": "a placement fix moves operators to other devices, whose times there are in no trace",
    "PA006": "its fix is a different thread count: how the host's work would share out is in no trace",
    "PF014": "the replay does not follow a pipeline's micro-batches from stage to stage yet (more micro-batches, "
             "another schedule)",
    "PF015": "the replay does not follow a pipeline's micro-batches from stage to stage yet (a layer moved to "
             "another stage)",
}
SYNCS = "syncs"  # the subject of PF004's fix that removes synchronizing calls
_SYNC_SUBJECTS = ("sync", SYNCS)
REMOVABLE_COPIES = tuple(k for k in COPY_KINDS if k != "other")  # the kinds a copy removal can name


def copies_removed(kind: str, said: str, otherwise: str) -> Change:
    """Every device copy removed, or those of ``kind`` alone; ``said``: the flag as given, ``otherwise``: what
    else it takes, for the error of a kind that is none."""
    if kind and kind not in REMOVABLE_COPIES:
        raise ChangeError(f"{said}: no copy kind {kind!r} (expected one of {', '.join(REMOVABLE_COPIES)}, "
                          f"{otherwise})")
    return Change(NO_COPIES, kind)


@dataclass(frozen=True)
class Fix:
    """``--fix RULE[:SUBJECT]`` read (``parse_fix``): a rule whose fix the replay can express."""

    text: str  # as given
    rule: str
    subject: str

    def changes(self, devices: Sequence[Device]) -> list[Change]:
        """Its changes on an input of ``devices``: PF006 on ranks without a GPU is about tiny operators, whose
        fix is fusion (``Inexpressible``)."""
        if self.rule == "PF006" and not any(d.kind == "gpu" for d in devices):
            raise Inexpressible(f"--fix {self.text}: on ranks without a GPU PF006 is about tiny operators, whose fix "
                                "is fusing them: the fused kernel's time is in no trace")
        return self.expressed()

    def expressed(self) -> list[Change]:
        """Its changes wherever it can be replayed: what a job's ranks keep for it before their devices are known."""
        if self.rule == "PF001":
            return [Change(EVEN_HOST, self.subject), Change(EVEN_INPUT, self.subject), Change(EVEN_WORK, self.subject)]
        if self.rule == "PF004":
            if self.subject.lower() in _SYNC_SUBJECTS:
                return [Change(NO_SYNCS)]
            return [copies_removed(self.subject, f"--fix {self.text}", "or syncs")]
        if self.rule == "PF005":
            return [Change(EVEN_INPUT, self.subject)]
        if self.rule == "PF006":
            if not self.subject:
                raise Inexpressible(f"--fix {self.text}: name the operator, as the finding does "
                                    "(--fix PF006:aten::mul)")
            return [Change(SCALE_HOST, self.subject, 0.0)]
        return [Change({"PF002": OVERLAP, "PF007": GRAPH_LAUNCH}[self.rule])]


def parse_fix(text: str) -> Fix:
    """``--fix RULE[:SUBJECT]`` checked before any input is read: ``Inexpressible`` for a rule the replay cannot
    express, ``ChangeError`` for a rule that is none or a subject it cannot take."""
    rule, _, subject = text.partition(":")
    fix = Fix(text, rule.strip().upper(), subject.strip())
    if fix.rule.startswith("PA"):
        raise Inexpressible(f"--fix {text}: {NOT_REPLAYED.get(fix.rule, NOT_REPLAYED['PA'])}")
    if fix.rule in NOT_REPLAYED:
        raise Inexpressible(f"--fix {text}: {NOT_REPLAYED[fix.rule]}")
    if fix.rule not in FIXES:
        known = ", ".join([*FIXES, "PF003", "PA001-PA008"])
        raise ChangeError(f"--fix {text}: no audit rule {fix.rule!r} (expected one of {known})")
    if fix.rule != "PF006":  # PF006 asks for its operator where it can be replayed: on ranks with a GPU
        fix.expressed()  # a subject it cannot take (a copy kind that is none) is a ChangeError here
    return fix


def fix_changes(text: str, table: EventTable) -> list[Change]:
    """The changes of ``--fix RULE[:SUBJECT]`` on ``table``."""
    return parse_fix(text).changes(table.devices)


@dataclass(frozen=True)
class RequestedChanges:
    """The changes asked for, read once: those stated outright and the audit fixes, whose changes depend on the
    input's devices."""

    stated: tuple[Change, ...] = ()
    fixes: tuple[Fix, ...] = ()

    def on(self, found) -> list[Change]:
        """The changes on an input (``found``: anything with its ``devices``, a table or a job's names)."""
        return [*self.stated, *(c for fix in self.fixes for c in fix.changes(found.devices))]

    def scanned(self) -> ScannedNames:
        """What each rank of a job keeps for these changes before the job's devices are known."""
        return scanned_names([*self.stated, *(c for fix in self.fixes for c in fix.expressed())])
