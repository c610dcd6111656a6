"""The verdict on a hung job from its ranks' flight recorders and stacks (docs/commands/hang.md)."""

from __future__ import annotations

import re
import time
from collections import Counter

from .model import RecordedCollective, Frame, RankRecorder, RankStacks, ThreadStack
from .verdict import DESYNC, MISMATCH, NEVER_ARRIVED, SLOW, STUCK, Culprit, HangVerdict, RankState, Waiter

# Frames in these files are torch's, TensorFlow's, Python's or rnnprof's own, not the caller's code.
LIBRARY = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen", "/rnnprof/recording/")
_LOCK = re.compile(r"acquire\(|\.wait\(|\block\b|_lock\b|Lock\b|[Mm]utex|Semaphore|Condition")


def own_frame(frames) -> Frame | None:
    """The innermost frame of the user's code; the innermost of all where none is."""
    frames = tuple(frames)
    return next((f for f in frames if not any(part in f.file for part in LIBRARY)), frames[0] if frames else None)


def analyze_hang(recorders: dict[int, RankRecorder], stacks: dict[int, RankStacks],
                 world_size: int | None = None) -> HangVerdict:
    """The kind of hang and the ranks it comes from (see the module)."""
    ranks = tuple(sorted(set(recorders) | set(stacks) | set(range(world_size or 0))))
    notes = tuple(_unseen(ranks, recorders, stacks))
    waiters = {r: rec.pending for r, rec in recorders.items() if rec.pending is not None}
    split = _divergence(recorders)
    if split is not None:
        return _split_verdict(split, recorders, stacks, waiters, ranks, notes)
    absent = [r for r in ranks if r not in waiters]
    if waiters and absent:
        culprits = tuple(_outside(r, recorders, stacks) for r in absent)
        head = "; ".join(_culprit_text(c) for c in culprits)
        return HangVerdict(NEVER_ARRIVED, f"{head}; {_waiting_text(waiters)}", culprits, _waiters(waiters),
                           ranks, notes)
    if waiters:
        return HangVerdict(STUCK, f"every rank arrived and none finished: {_waiting_text(waiters)}", (),
                           _waiters(waiters), ranks, notes)
    culprits = tuple(_outside(r, recorders, stacks) for r in ranks if r in stacks)
    body = "; ".join(_culprit_text(c) for c in culprits) or "no rank answered"
    return HangVerdict(STUCK, f"no rank is in a collective: {body}", culprits, (), ranks, notes)


def still_moving(before: dict[int, RankRecorder], after: dict[int, RankRecorder]) -> list[str]:
    """What finished between two samples of the same ranks' recorders: "rank 0: #12 -> #15" for each rank whose
    collectives went on; empty when none did."""
    moved = []
    for rank in sorted(set(before) & set(after)):
        was, now = _done(before[rank]), _done(after[rank])
        if now > was:
            moved.append(f"rank {rank}: #{was} -> #{now}")
    return moved


def slow_verdict(quiet_s: float, why: str) -> HangVerdict:
    """Something still moves although no step finished for ``quiet_s`` (``why``: what): slow, not hung."""
    return HangVerdict(SLOW, f"slow, not hung: no step finished for {quiet_s:.1f} s, but {why}")


def _done(recorder: RankRecorder) -> int:
    done = [c.seq for c in recorder.collectives if c.completed]
    return max([recorder.last_completed or 0, *done])


def _unseen(ranks, recorders, stacks) -> list[str]:
    notes = []
    if recorders:  # a job without flight recorders (TensorFlow) is judged on stacks alone
        missing = [r for r in ranks if r not in recorders]
        if missing:
            notes.append(f"no flight recorder from rank(s) {_list(missing)}")
    missing = [r for r in ranks if r not in stacks]
    if missing:
        notes.append(f"no stacks from rank(s) {_list(missing)}")
    return notes


def _divergence(recorders: dict[int, RankRecorder]) -> int | None:
    """The first sequence number at which the ranks that recorded it differ in operation, call site or sizes."""
    by_seq: dict[int, set] = {}
    for recorder in recorders.values():
        for c in recorder.collectives:
            by_seq.setdefault(c.seq, set()).add(c.signature)
    return next((seq for seq in sorted(by_seq) if len(by_seq[seq]) > 1), None)


def _split_verdict(seq, recorders, stacks, waiters, ranks, notes) -> HangVerdict:
    at = {r: _at(rec, seq) for r, rec in recorders.items() if _at(rec, seq) is not None}
    deviants, reference = _deviants(seq, at, recorders)
    ref = recorders[reference]
    culprits = []
    for rank in deviants:
        mine = recorders[rank]
        main = main_frame(stacks.get(rank))
        if _shifted(mine, ref, seq, 1):
            missed = at[reference]
            culprits.append(Culprit(rank, RankState.SKIPPED, *place(main), _op(missed), seq, _where(missed)))
        else:
            culprits.append(Culprit(rank, RankState.IN_ANOTHER_COLLECTIVE, *place(main), _op(at[rank]), seq,
                                    _where(at[rank])))
    kind = DESYNC if any(c.state == RankState.SKIPPED for c in culprits) else MISMATCH
    if kind == DESYNC:
        c = culprits[0]
        head = (f"rank {c.rank} skipped {c.op} #{c.seq} ({c.op_where}) that {_ranks(sorted(set(at) - set(deviants)))}"
                f" made: its later collectives paired with their next ones")
    else:
        head = _mismatch_text(seq, at, deviants, reference)
    tail = _waiting_text(waiters) if waiters else "no rank waits in a collective now"
    return HangVerdict(kind, f"{head}; {tail}", tuple(culprits), _waiters(waiters), ranks, notes)


def _mismatch_text(seq: int, at: dict, deviants: list[int], reference: int) -> str:
    ref = at[reference]
    others = _ranks(sorted(r for r in at if r not in deviants))
    parts = []
    for rank in deviants:
        c = at[rank]
        if c.op == ref.op and c.input_sizes != ref.input_sizes:
            parts.append(f"rank {rank} called {_op(c)} #{seq} ({_where(c)}) with sizes {list(c.input_sizes)} where "
                         f"{others} passed {list(ref.input_sizes)}")
        else:
            parts.append(f"rank {rank} called {_op(c)} #{seq} ({_where(c)}) where {others} called "
                         f"{_op(ref)} #{seq} ({_where(ref)})")
    return "; ".join(parts)


def _deviants(seq: int, at: dict[int, RecordedCollective], recorders) -> tuple[list[int], int]:
    """The ranks that broke ranks at ``seq`` and one rank of the others: the minority; between groups of one size,
    the group whose step from ``seq - 1`` to ``seq`` the common history never made."""
    groups: dict[tuple, list[int]] = {}
    for rank, c in sorted(at.items()):
        groups.setdefault(c.signature, []).append(rank)
    sizes = Counter({sig: len(members) for sig, members in groups.items()})
    top = sizes.most_common()
    if len(top) > 1 and top[0][1] > top[1][1]:
        majority = top[0][0]
    else:
        seen = _transitions(next(iter(recorders.values())), seq)
        before = {r: _at(recorders[r], seq - 1) for r in at}
        usual = [sig for sig, members in groups.items()
                 if before[members[0]] is not None and (before[members[0]].signature, sig) in seen]
        majority = usual[0] if len(usual) == 1 else min(groups, key=lambda s: groups[s][0])  # lowest rank's
    deviants = [r for sig, members in groups.items() if sig != majority for r in members]
    return sorted(deviants), groups[majority][0]


def _transitions(recorder: RankRecorder, seq: int) -> set:
    history = [c for c in recorder.collectives if c.seq < seq]
    return {(a.signature, b.signature) for a, b in zip(history, history[1:]) if b.seq == a.seq + 1}


def _shifted(mine: RankRecorder, ref: RankRecorder, seq: int, by: int) -> bool:
    """Whether ``mine`` from ``seq`` on is ``ref`` from ``seq + by`` on, over at least one collective."""
    pairs = [(c, _at(ref, c.seq + by)) for c in mine.collectives if c.seq >= seq]
    pairs = [(a, b) for a, b in pairs if b is not None]
    return bool(pairs) and all(a.signature == b.signature for a, b in pairs)


def _at(recorder: RankRecorder, seq: int) -> RecordedCollective | None:
    return next((c for c in recorder.collectives if c.seq == seq), None)


def _outside(rank: int, recorders, stacks) -> Culprit:
    """A rank in no collective: where its main thread is, and whether it waits on a lock or outside Python."""
    main = main_frame(stacks.get(rank))
    if rank not in stacks:
        return Culprit(rank, RankState.NO_ANSWER)
    if recorders and rank not in recorders:
        return Culprit(rank, RankState.OUTSIDE_PYTHON, *place(main))
    if main is not None and is_lock(stacks[rank].main_thread, main):
        return Culprit(rank, RankState.IN_LOCK, *place(main), others=other_threads(stacks[rank]))
    return Culprit(rank, RankState.IN_NO_COLLECTIVE, *place(main))


def is_lock(thread: ThreadStack | None, main: Frame) -> bool:
    """Whether a main thread at ``main`` (its own code's frame) waits on a lock, a condition or a join."""
    inner = thread.frames[0] if thread and thread.frames else main
    if inner.file.endswith("threading.py") and inner.function in ("acquire", "wait", "__enter__", "join"):
        return True
    return bool(_LOCK.search(main.text.split("#", 1)[0]))  # the code, not its comment


def other_threads(rank_stacks: RankStacks) -> tuple[str, ...]:
    """Where the rank's other threads are in the user's code; threads with no frame of it left out."""
    main = rank_stacks.main_thread
    found = []
    for thread in rank_stacks.threads:
        frame = own_frame(thread.frames) if thread is not main else None
        if frame is not None and not any(part in frame.file for part in LIBRARY):
            found.append(f"{frame.where} in {frame.function}")
    return tuple(found)


def main_frame(rank_stacks: RankStacks | None) -> Frame | None:
    """The innermost frame of the user's code in the main thread (see ``own_frame``); None without stacks."""
    thread = rank_stacks.main_thread if rank_stacks else None
    return own_frame(thread.frames) if thread and thread.frames else None


def place(frame: Frame | None) -> tuple[str | None, str | None]:
    """A culprit's ``where`` and ``function`` at ``frame`` (None, None without one)."""
    return (frame.where, frame.function) if frame else (None, None)


def _culprit_text(c: Culprit) -> str:
    if c.where is None:
        return f"rank {c.rank} {c.state} (no stack)"
    where = f"its main thread is at {c.where} in {c.function}"
    if c.state == RankState.IN_LOCK:
        others = f" (its other threads: {', '.join(c.others)})" if c.others else ""
        return f"rank {c.rank} is blocked in a lock: {where}{others}"
    if c.state == RankState.OUTSIDE_PYTHON:
        return f"rank {c.rank} is stuck outside Python (its threads could not run to answer): {where}"
    return f"rank {c.rank} is in no collective: {where}"


def _waiting_text(waiters: dict[int, RecordedCollective]) -> str:
    groups: dict[tuple, list[int]] = {}
    for rank, c in sorted(waiters.items()):
        groups.setdefault((_op(c), c.seq, _where(c)), []).append(rank)
    since = min((c.created_ns for c in waiters.values() if c.created_ns), default=None)
    parts = [f"rank{'s' if len(m) > 1 else ''} {_list(m)} {'have' if len(m) > 1 else 'has'} waited in {op} #{seq} "
             f"({where})" for (op, seq, where), m in groups.items()]
    return ", ".join(parts) + (f" since {_clock(since)}" if since else "")


def _waiters(waiters: dict[int, RecordedCollective]) -> tuple[Waiter, ...]:
    return tuple(Waiter(r, _op(c), c.seq, c.created_ns, _where(c)) for r, c in sorted(waiters.items()))


def _op(c: RecordedCollective) -> str:
    return c.op.split(":", 1)[-1]  # "gloo:all_reduce" -> "all_reduce"


def _where(c: RecordedCollective) -> str | None:
    return c.frame.where if c.frame else None


def _clock(ns: int) -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime(ns / 1e9))


def _ranks(ranks) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {_list(ranks)}"


def _list(ranks) -> str:
    return ", ".join(map(str, ranks))
