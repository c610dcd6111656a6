"""Asking every live rank of a captured job for its stacks and its flight recorder (``hang_probe`` answers), and
saving what a hung job left in ``RUN/hang/`` (docs/commands/hang.md). ``ProbedRanks``: the hang watch's
transport to the ranks of a job this process launched, each with its probe."""

from __future__ import annotations

import linecache
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rnnprof import rundir
from rnnprof.files import atomic_write_bytes
from rnnprof.analyzers.hang import HangVerdict, RankRecorder, RankStacks, analyze_hang, analyze_process_hang
from rnnprof.errors import InputError
from rnnprof.recording import ranks
from rnnprof.recording.hang_probe import (RANKS, STACKS_END, STACKS_REQUEST, STACKS_SIGNAL, TASKS, probe_files,
                                         read_progress)
from rnnprof.rundir.manifest import now, read_manifest_json
from rnnprof.rundir.writer import atomic_write_json
from rnnprof.traces.flight_recorder import parse_flight_recorder, plain_unpickle
from rnnprof.traces.stack_dump import MAIN_MARK, parse_stacks, with_source

ANSWER_WAIT_S = 3.0  # how long the ranks have to write their stacks and flight recorders


@dataclass
class Sample:
    """What the live ranks answered at one moment: raw dumps and stack texts, and their parsed forms."""

    dumps: dict[int, bytes] = field(default_factory=dict)
    stack_texts: dict[int, str] = field(default_factory=dict)
    recorders: dict[int, RankRecorder] = field(default_factory=dict)
    stacks: dict[int, RankStacks] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def live_ranks(run_dir: Path, folder: str = RANKS) -> dict[int, int]:
    """rank -> pid of each rank whose capture is open and whose process still runs (``folder``: where the ranks
    keep their probe files, ``hang_probe.RANKS`` or ``TASKS``)."""
    live = {}
    for rank, (_, pid) in read_progress(run_dir, folder).items():
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            live[rank] = pid
    return live


def sample(run_dir: Path, live: dict[int, int], scratch: Path, folder: str = RANKS) -> Sample:
    """Ask each live rank for its flight recorder, wait up to ``ANSWER_WAIT_S`` for the answers, then for its
    stacks: from its probe thread where that thread answered (it reads them under the interpreter lock), else
    from faulthandler on ``STACKS_SIGNAL``. faulthandler walks the threads' frames without that lock, which is
    not safe while another thread runs Python (a rank crashed so: its probe thread, finishing the flight
    recorder's answer; its main thread, training, when the job was only slow); it stays for a rank whose
    thread cannot answer (a thread holding the interpreter)."""
    scratch.mkdir(parents=True, exist_ok=True)
    files = {rank: probe_files(run_dir, rank, folder) for rank in live}
    asked, offsets = {}, {}
    for rank in live:
        target = scratch / f"rank{rank}.fr.pkl"
        target.unlink(missing_ok=True)
        if _request(files[rank]["fr"], str(target)):
            asked[rank] = target
    _until(lambda: all(p.exists() for p in asked.values()), ANSWER_WAIT_S, 0.05)
    threads = {}  # the ranks whose probe thread answered: asked for their stacks the same way
    for rank in live:
        offsets[rank] = _size(files[rank]["stacks"])
        if rank in asked and asked[rank].exists() and offsets[rank] >= 0 and _request(
                files[rank]["fr"], STACKS_REQUEST, wait_s=1.0):
            threads[rank] = offsets[rank]
    _until(lambda: all(_answered(files[r]["stacks"], o) for r, o in threads.items()), ANSWER_WAIT_S, 0.02)
    signalled = False
    for rank, pid in live.items():
        if rank in threads and _answered(files[rank]["stacks"], threads[rank]):
            continue
        try:
            os.kill(pid, STACKS_SIGNAL)
            signalled = True
        except OSError:
            offsets.pop(rank)
    if signalled:
        time.sleep(0.3)  # faulthandler writes as it walks the threads: let it finish
    return _read(run_dir, asked, offsets, folder)


def _until(done, timeout_s: float, poll_s: float) -> None:
    """Poll ``done()`` every ``poll_s`` until it is true or ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(poll_s)


def _answered(stacks: Path, offset: int) -> bool:
    """Whether the probe thread's answer is whole in ``stacks`` after ``offset``."""
    try:
        with open(stacks, "rb") as handle:
            handle.seek(offset)
            return handle.read().endswith(STACKS_END.encode())
    except OSError:
        return False


def _request(fifo: Path, text: str, wait_s: float = 0.0) -> bool:
    """Write ``text`` to the probe thread waiting on ``fifo``; False where no thread waits on it within
    ``wait_s`` (a thread that has just answered is on its way back to the FIFO)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # fails at once when no thread waits on it
            break
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    return True


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def _read(run_dir: Path, asked: dict[int, Path], offsets: dict[int, int], folder: str) -> Sample:
    got = Sample()
    for rank, path in sorted(asked.items()):
        data = path.read_bytes() if path.exists() else b""
        if not data or data.startswith(b"error:"):
            got.notes.append(f"rank {rank}: no flight recorder ({data.decode(errors='replace')[:120] or 'no answer'})")
            continue
        try:
            got.recorders[rank], notes = parse_flight_recorder(plain_unpickle(data, path), path, rank)
        except InputError as exc:
            got.notes.append(str(exc))
            continue
        got.dumps[rank] = data
        got.notes += notes
    for rank, offset in sorted(offsets.items()):
        text = _new_stacks(probe_files(run_dir, rank, folder)["stacks"], offset)
        if text:
            got.stack_texts[rank] = with_source(text, lambda f, n: linecache.getline(f, n))
            got.stacks[rank] = parse_stacks(got.stack_texts[rank], rank)
    return got


def _new_stacks(path: Path, offset: int) -> str:
    """The main-thread line and what faulthandler wrote after ``offset``."""
    if offset < 0:
        return ""
    try:
        with open(path, "rb") as handle:
            head = handle.readline().decode(errors="replace")
            handle.seek(max(offset, len(head.encode())))
            new = handle.read().decode(errors="replace")
    except OSError:
        return ""
    return (head if head.startswith(MAIN_MARK) else "") + new if new.strip() else ""


def rank_stacks_file(rank: int) -> str:
    """The name a rank's stacks are saved under in ``RUN/hang/``."""
    return f"rank{rank}.stacks.txt"


def save(run_dir: Path, got: Sample, verdict_line: str,
         stacks_file: Callable[[int], str] = rank_stacks_file) -> list[str]:
    """``RUN/hang/``: each rank's flight recorder and stacks (``stacks_file``: their names) and the verdict;
    returns the files, relative to RUN."""
    folder = run_dir / rundir.HANG_DIR
    folder.mkdir(exist_ok=True)
    written = []
    for rank, data in sorted(got.dumps.items()):
        written.append(_write(folder / f"rank{rank}.fr.pkl", data))
    for rank, text in sorted(got.stack_texts.items()):
        written.append(_write(folder / stacks_file(rank), text.encode()))
    written.append(_write(folder / "verdict.txt", (verdict_line + "\n").encode()))
    return [Path(p).relative_to(run_dir).as_posix() for p in written]


def _write(path: Path, data: bytes) -> Path:
    return atomic_write_bytes(path, data)


def clear(scratch: Path) -> None:
    shutil.rmtree(scratch, ignore_errors=True)


def hang_record(verdict: HangVerdict, files: list[str], hang_after_s: float, notes: list[str]) -> dict:
    """The manifest's ``hang`` object: the verdict, the ranks it names, the files in ``RUN/hang/``."""
    return {"kind": verdict.kind, "verdict": verdict.summary, "ranks": sorted({c.rank for c in verdict.culprits}),
            "files": files, "hang_after_s": hang_after_s, "notes": [*verdict.notes, *notes], "detected": time.time()}


def remark_hung(run_dir: Path, hang: dict | None) -> None:
    """Mark the run ``hung`` again after its writer closed it as failed, which stopping the job caused (or
    closed it at all: a job left running with ``--on-hang wait`` hung all the same): the failure is no error of
    the run. A writer killed before it closed leaves no end time: the time now is recorded."""
    manifest = read_manifest_json(run_dir)
    manifest.pop("error", None)
    manifest.update(status=rundir.STATUS_HUNG, hang=hang or {})
    manifest.setdefault("finished", now())
    atomic_write_json(run_dir / rundir.MANIFEST, manifest)


class ProbedRanks:
    """The hang watch's transport to the ranks of a job this process launched (a script's, the built-in PyTorch
    workload's): each rank's probe counts its steps and answers with its stacks and flight recorder. A
    TensorFlow script is one process (its probe in ``TASKS``, no flight recorder), judged on its stacks alone
    (``analyze_process_hang``); the ranks of a PyTorch job keep the manifest (``ranks.mark_hung``).
    ``world_size``: None where the ranks' records say."""

    def __init__(self, run_dir: str | Path, world_size: int | None = None):
        self.run_dir, self.world_size = Path(run_dir), world_size
        self.folder = RANKS  # where the probes are: TASKS once a TensorFlow script's process opened its own

    def _world(self) -> int:
        return self.world_size or max([r.get("world_size") or 1 for r in ranks.read_records(self.run_dir)] or [1])

    def progress(self) -> tuple[dict[int, int], bool]:
        found, self.folder = read_progress(self.run_dir), RANKS
        if not found and read_progress(self.run_dir, TASKS):  # a TensorFlow script's process (torch's ranks win:
            found, self.folder = read_progress(self.run_dir, TASKS), TASKS  # a script may switch to torch)
        return {rank: steps for rank, (steps, _) in found.items()}, len(found) >= self._world()

    def live(self) -> dict[int, int]:
        return live_ranks(self.run_dir, self.folder)

    def sample(self, live: dict[int, int], scratch: Path) -> Sample:
        return sample(self.run_dir, live, scratch, self.folder)

    def who(self, number: int) -> str:
        return f"rank {number}"

    def judge(self, got: Sample) -> HangVerdict:
        if self.folder == TASKS:  # a TensorFlow script: one process, judged on its stacks
            return analyze_process_hang(got.stacks.get(0))
        return analyze_hang(got.recorders, got.stacks, self._world())

    def stacks_file(self, number: int) -> str:
        return rank_stacks_file(number)

    def keep(self, hang: dict) -> dict:
        if self.folder == TASKS:  # the process writes the manifest until it ends; ``remark_hung`` marks it then
            hang["scope"] = rundir.HANG_SCOPE_PROCESS
        else:
            ranks.mark_hung(self.run_dir, hang)
        return hang
