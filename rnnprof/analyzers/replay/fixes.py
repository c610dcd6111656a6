"""An audit finding's fix as replay changes (``--fix RULE[:SUBJECT]``), or the one line saying why it cannot be
replayed. The rules: ``analyzers.audit`` (PF...) and ``analyzers.placement`` (PA...)."""

from __future__ import annotations

from rnnprof.analyzers.copies import COPY_KINDS
from rnnprof.events import EventTable
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


def fix_changes(text: str, table: EventTable) -> list[Change]:
    """The changes of ``--fix RULE[:SUBJECT]`` on ``table`` (PF006 on ranks without a GPU is about tiny
    operators, whose fix is fusion). Raises ``Inexpressible`` for a rule the replay cannot express."""
    gpu = any(d.kind == "gpu" for d in table.devices)
    rule, _, subject = text.partition(":")
    rule = rule.strip().upper()
    subject = subject.strip()
    if rule.startswith("PA"):
        raise Inexpressible(f"--fix {text}: {NOT_REPLAYED.get(rule, NOT_REPLAYED['PA'])}")
    if rule in NOT_REPLAYED:
        raise Inexpressible(f"--fix {text}: {NOT_REPLAYED[rule]}")
    if rule == "PF001":
        return [Change(EVEN_HOST, subject), Change(EVEN_INPUT, subject), Change(EVEN_WORK, subject)]
    if rule == "PF002":
        return [Change(OVERLAP)]
    if rule == "PF004":
        if subject.lower() in _SYNC_SUBJECTS:
            return [Change(NO_SYNCS)]
        return [copies_removed(subject, f"--fix {text}", "or syncs")]
    if rule == "PF005":
        return [Change(EVEN_INPUT, subject)]
    if rule == "PF006":
        if not gpu:
            raise Inexpressible(f"--fix {text}: on ranks without a GPU PF006 is about tiny operators, whose fix is "
                                "fusing them: the fused kernel's time is in no trace")
        if not subject:
            raise Inexpressible(f"--fix {text}: name the operator, as the finding does (--fix PF006:aten::mul)")
        return [Change(SCALE_HOST, subject, 0.0)]
    if rule == "PF007":
        return [Change(GRAPH_LAUNCH)]
    known = ", ".join([*FIXES, "PF003", "PA001-PA008"])
    raise ChangeError(f"--fix {text}: no audit rule {rule!r} (expected one of {known})")

