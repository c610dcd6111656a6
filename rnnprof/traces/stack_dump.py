"""The Python stacks ``faulthandler`` writes for every thread of a process, into a ``RankStacks``.

rnnprof's capture writes ``# main thread 0x...`` before a rank's dumps, and adds each frame's source line
after it (as a traceback does) when it collects them; both are optional. The last dump of a thread wins."""

from __future__ import annotations

import re
from pathlib import Path

from rnnprof.analyzers.hang import Frame, RankStacks, ThreadStack
from rnnprof.errors import InputError
from rnnprof.limits import read_bytes

MAIN_MARK = "# main thread "
CHIEF_STACKS = "chief.stacks.txt"  # in hang/: a TensorFlow cluster's chief, beside its tasks' rank<N>.stacks.txt
PROCESS_STACKS = "rank0.stacks.txt"  # ... and one TensorFlow process's, the whole job
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')


def parse_stacks(text: str, rank: int) -> RankStacks:
    """Every thread of the text's dumps, innermost frame first; the main thread marked."""
    main = None
    threads: dict[str, list[Frame]] = {}
    current: list[Frame] | None = None
    for line in text.splitlines():
        if line.startswith(MAIN_MARK):
            main = line[len(MAIN_MARK):].strip().lower()
            continue
        head = _THREAD.match(line)
        if head:
            current = threads[head.group(2).lower()] = []
            continue
        frame = _FRAME.match(line)
        if frame and current is not None:
            current.append(Frame(frame.group(1), int(frame.group(2)), frame.group(3)))
        elif current and line.startswith("    ") and not current[-1].text:
            last = current[-1]
            current[-1] = Frame(last.file, last.line, last.function, line.strip())
    return RankStacks(rank, tuple(ThreadStack(ident, tuple(frames), ident == main)
                                  for ident, frames in threads.items()))


def read_stacks(path: Path, rank: int) -> RankStacks:
    """One rank's stack file; ``InputError`` when it holds no thread's stack."""
    stacks = parse_stacks(read_bytes(Path(path)).decode("utf-8", errors="replace"), rank)
    if not stacks.threads:
        raise InputError(path, "holds no thread's stack", "faulthandler's dump of every thread")
    return stacks


def with_source(text: str, line_of) -> str:
    """``text`` with the source line after each frame line (``line_of(file, line)``; "" where unknown)."""
    out = []
    for line in text.splitlines():
        out.append(line)
        frame = _FRAME.match(line)
        if frame:
            source = line_of(frame.group(1), int(frame.group(2))).strip()
            if source:
                out.append(f"    {source}")
    return "\n".join(out) + "\n"
