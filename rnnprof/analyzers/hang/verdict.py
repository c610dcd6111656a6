"""The verdict's types: what kind of hang, which ranks caused it, where they are and where the others wait."""

from __future__ import annotations

import enum
from dataclasses import dataclass

NEVER_ARRIVED = "never_arrived"  # a rank is in no collective while the others wait in one
DESYNC = "desync"  # a rank skipped a collective: its later ones paired with the others' next ones
MISMATCH = "mismatch"  # the ranks are in different collectives (or sizes) at one sequence number
STUCK = "stuck"  # every rank waits in the same collective, or no rank is in one, or one process makes no step
SLOW = "slow"  # steps or collectives still finish: slow, not hung
KINDS = (NEVER_ARRIVED, DESYNC, MISMATCH, STUCK, SLOW)


class RankState(enum.StrEnum):
    """Where a rank the hang comes from is, as its answer shows (a ``Culprit``'s ``state``; ``--json`` writes the
    value)."""

    IN_NO_COLLECTIVE = "in no collective"  # its main thread runs the user's code while the others wait
    IN_LOCK = "in a lock"  # its main thread waits on a lock, a condition or a join
    OUTSIDE_PYTHON = "outside Python"  # it gave stacks but its threads could not run to answer (a C call)
    SKIPPED = "skipped"  # it skipped the collective the others made
    IN_ANOTHER_COLLECTIVE = "in another collective"  # another operation, call site or sizes at one sequence number
    NO_ANSWER = "did not answer"  # no stacks came back
    NOT_SERVING = "not serving"  # a TensorFlow cluster's task whose main thread is not where a serving task waits
    IN_TENSORFLOW = "in TensorFlow"  # one TensorFlow process: its main thread waits in a call into the runtime
    IN_PYTHON = "in Python"  # one TensorFlow process: its main thread runs the user's code, outside TensorFlow


@dataclass(frozen=True)
class Waiter:
    """A rank waiting in a collective: which, since when (ns since the epoch) and called from where."""

    rank: int
    op: str
    seq: int
    since_ns: int | None
    where: str | None


@dataclass(frozen=True)
class Culprit:
    """A rank the hang comes from: where its main thread is (file:line and function), how it is blocked
    (``state``) and, for one in a lock, where its other threads are in the user's code (one of them may hold the
    lock)."""

    rank: int
    state: RankState
    where: str | None = None
    function: str | None = None
    op: str | None = None
    seq: int | None = None
    op_where: str | None = None
    others: tuple[str, ...] = ()  # where the rank's other threads are in the user's code ("a.py:3 in f")


@dataclass(frozen=True)
class HangVerdict:
    """One verdict: ``kind`` (KINDS), ``summary`` (the one line printed), ``culprits``, ``waiters``, and
    ``notes`` (what the analysis could not see: ranks with no dump, other process groups)."""

    kind: str
    summary: str
    culprits: tuple[Culprit, ...] = ()
    waiters: tuple[Waiter, ...] = ()
    ranks: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def hung(self) -> bool:
        return self.kind != SLOW
