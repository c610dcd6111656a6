"""What the hang analysis reads: each rank's flight-recorder entries and its threads' Python stacks, parsed."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Frame:
    """One Python frame: file, line, function; ``text`` is the source line where the collector could read it."""

    file: str
    line: int
    function: str
    text: str = ""

    @property
    def where(self) -> str:
        """``train.py:57``: the file's name (not its folder) and the line."""
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line}"


@dataclass(frozen=True)
class RecordedCollective:
    """One flight-recorder entry: a collective a rank entered, with its sequence number in its process group.

    ``frame``: the first frame of the caller's code (torch's own and rnnprof's frames passed over).
    ``created_ns``: when the rank entered it (wall clock, ns since the epoch)."""

    seq: int
    op: str
    input_sizes: tuple = ()
    output_sizes: tuple = ()
    completed: bool = True
    created_ns: int | None = None
    frame: Frame | None = None
    group: str = "0"

    @property
    def signature(self) -> tuple:
        """What must be equal on every rank at one sequence number: the operation, the call site, the sizes."""
        return self.op, self.frame.where if self.frame else None, self.input_sizes


@dataclass(frozen=True)
class RankRecorder:
    """One rank's flight recorder: its collectives of one process group, by sequence number."""

    rank: int
    collectives: tuple[RecordedCollective, ...] = ()
    last_completed: int | None = None

    @property
    def pending(self) -> RecordedCollective | None:
        """The first collective the rank entered and has not finished: where it waits."""
        return next((c for c in self.collectives if not c.completed), None)

    @property
    def last_seq(self) -> int:
        return max((c.seq for c in self.collectives), default=self.last_completed or 0)


@dataclass(frozen=True)
class ThreadStack:
    """One thread's frames, innermost first; ``main``: the rank's main thread."""

    ident: str
    frames: tuple[Frame, ...] = ()
    main: bool = False


@dataclass(frozen=True)
class RankStacks:
    """The Python stacks of one rank's threads, as its ``faulthandler`` wrote them."""

    rank: int
    threads: tuple[ThreadStack, ...] = ()

    @property
    def main_thread(self) -> ThreadStack | None:
        return next((t for t in self.threads if t.main), self.threads[0] if self.threads else None)
