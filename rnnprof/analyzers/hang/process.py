"""The verdict on one hung TensorFlow process (a script under ``trace -- python``, a built-in workload without
``--workers``) from its threads' Python stacks. Its towers share one process: there is no collective to wait
in and no other rank to blame, so the verdict says where its main thread is stuck: inside TensorFlow's runtime
(a ``Session.run`` or a function call that does not return), in a lock, or in Python (data loading, a sleep)."""

from __future__ import annotations

from .analysis import LIBRARY, is_lock, other_threads, own_frame, place
from .model import Frame, RankStacks
from .verdict import STUCK, Culprit, HangVerdict, RankState

_TENSORFLOW = "/tensorflow/"


def analyze_process_hang(stacks: RankStacks | None, who: str = "the main thread") -> HangVerdict:
    """``stacks``: the process's threads (its number 0); None when it gave none. ``who``: what the verdict
    calls its main thread."""
    main = stacks.main_thread if stacks is not None else None
    if main is None or not main.frames:
        culprit = Culprit(0, RankState.NO_ANSWER)
        return HangVerdict(STUCK, "no step finishes and the process gave no stack", (culprit,), (), (0,),
                           ("the process did not answer",))
    frame = own_frame(main.frames)
    entry = _tensorflow_entry(main.frames, frame)
    if entry is not None:
        culprit = Culprit(0, RankState.IN_TENSORFLOW, *place(frame))
        text = (f"no step finishes: {who} waits inside TensorFlow's runtime, in {entry.function} "
                f"({entry.where}) called at {frame.where} in {frame.function}")
    elif is_lock(main, frame):
        culprit = Culprit(0, RankState.IN_LOCK, *place(frame), others=other_threads(stacks))
        others = f" (its other threads: {', '.join(culprit.others)})" if culprit.others else ""
        text = f"no step finishes: {who} is blocked in a lock at {frame.where} in {frame.function}{others}"
    else:
        culprit = Culprit(0, RankState.IN_PYTHON, *place(frame))
        text = (f"no step finishes: {who} is at {frame.where} in {frame.function}, in Python, "
                f"outside TensorFlow")
    return HangVerdict(STUCK, text, (culprit,), (), (0,))


def _tensorflow_entry(frames: tuple[Frame, ...], own: Frame) -> Frame | None:
    """The outermost TensorFlow frame inside the user's innermost frame: the call into TensorFlow that does not
    return; None when the main thread is not in one."""
    inner = frames[:frames.index(own)] if own in frames else frames
    entries = [f for f in inner if _TENSORFLOW in f.file and any(part in f.file for part in LIBRARY)]
    return entries[-1] if entries else None
