"""What each rank of a captured PyTorch script keeps ready for ``rnnprof trace``'s hang watch (docs/commands/hang.md).

* ``faulthandler`` on ``STACKS_SIGNAL`` writes every thread's Python stack into ``torch/.rank<r>.stacks``
  (after a ``# main thread`` line naming the main thread); it works even while a thread holds the interpreter.
  It walks the other threads' frames without the interpreter lock, so a thread running Python meanwhile can
  crash the process: it is the fallback.
* A thread waits on the FIFO ``torch/.rank<r>.fr``: a path written to it asks for the flight recorder's
  entries (``_dump_fr_trace()``), written there whole. The launcher turns the recorder on (``FR_BUFFER``).
  ``STACKS_REQUEST`` asks it for every thread's stack instead, in faulthandler's format, taken under the
  interpreter lock and appended to the stacks file, ending with ``STACKS_END``.
* ``tick()`` counts finished steps into ``torch/.rank<r>.progress`` with the rank's pid (one ``pwrite``, after
  the window too); the file is there while the rank's capture is open.
Nothing is written while the job runs normally; ``close`` removes the files when nothing was asked.
A TensorFlow process keeps the stacks, its pid and its steps, no flight recorder, in ``timelines/``: a cluster's
task (``task_probe``: number N, its place among the cluster's tasks, no steps) or a script's only process (0)."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import threading
from pathlib import Path

from rnnprof import rundir
from rnnprof.files import atomic_write_bytes
from rnnprof.traces.stack_dump import MAIN_MARK
from rnnprof.training.cluster import TASK_PROBE_ENV

STACKS_SIGNAL = signal.SIGUSR2
STACKS_REQUEST = "stacks"  # written to a rank's FIFO: its probe thread appends every thread's stack
STACKS_END = "# end of stacks\n"  # the last line of such an answer
FR_BUFFER_ENV = "TORCH_FR_BUFFER_SIZE"
FR_BUFFER = "2000"  # entries each rank's flight recorder keeps, unless the user set TORCH_FR_BUFFER_SIZE
RANKS = rundir.TORCH_TRACES_DIR  # where PyTorch ranks keep their probe files
TASKS = rundir.TIMELINES_DIR  # ... and TensorFlow processes (a cluster's tasks, a script): no flight recorder


def probe_files(run_dir: str | Path, rank: int, folder: str = RANKS) -> dict[str, Path]:
    where = Path(run_dir) / folder
    return {kind: where / f".rank{int(rank)}.{kind}" for kind in ("stacks", "fr", "progress")}


def read_progress(run_dir: str | Path, folder: str = RANKS) -> dict[int, tuple[int, int]]:
    """rank -> (steps finished, pid) of every rank whose capture is open."""
    found = {}
    for path in (Path(run_dir) / folder).glob(".rank*.progress"):
        try:
            steps, pid = path.read_text().split()
            found[int(path.name.split(".")[1].removeprefix("rank"))] = (int(steps), int(pid))
        except (OSError, ValueError):
            continue
    return found


def remove_probe_files(run_dir: str | Path, folder: str = RANKS) -> None:
    """Once the job has ended: the ranks' probe files (what a hung job's ranks said is in ``RUN/hang/``), and
    their folder if nothing else is in it."""
    for kind in ("stacks", "fr", "progress"):
        for path in (Path(run_dir) / folder).glob(f".rank*.{kind}"):
            path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # not empty, or not there
        (Path(run_dir) / folder).rmdir()


_closed_here = threading.Event()  # a probe of this process ignored STACKS_SIGNAL as it closed


class RankProbe:
    """One rank's side of the hang watch (see the module)."""

    def __init__(self, run_dir: str | Path, rank: int, folder: str = RANKS, recorder: bool = True):
        self.files = probe_files(run_dir, rank, folder)
        self.recorder = recorder  # False: no flight recorder to serve (a TensorFlow task)
        self.steps = 0
        self._stacks = None
        self._progress_fd: int | None = None

    def install(self) -> "RankProbe":
        self.files["stacks"].parent.mkdir(parents=True, exist_ok=True)
        self._progress_fd = os.open(self.files["progress"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.tick(0)
        current = signal.getsignal(STACKS_SIGNAL)
        if current in (signal.SIG_DFL, None) or (current == signal.SIG_IGN and _closed_here.is_set()):  # the
            # script's own handler is left alone
            self._stacks = open(self.files["stacks"], "w")
            self._stacks.write(f"{MAIN_MARK}0x{threading.main_thread().ident:016x}\n")
            self._stacks.flush()
            faulthandler.register(STACKS_SIGNAL, file=self._stacks, all_threads=True, chain=False)
        if not self.recorder:
            return self
        try:
            self.files["fr"].unlink(missing_ok=True)
            os.mkfifo(self.files["fr"], 0o600)
        except OSError:
            return self
        threading.Thread(target=_serve, args=(self.files["fr"], self._stacks_fd), name="rnnprof-hang-probe",
                         daemon=True).start()
        return self

    def _stacks_fd(self) -> int | None:
        """The stacks file's descriptor while it is open (None once closed: its number may be reused)."""
        stacks = self._stacks
        return stacks.fileno() if stacks is not None and not stacks.closed else None

    def tick(self, steps: int = 1) -> None:
        """``steps`` more steps finished: the count and this process's pid, rewritten in place."""
        self.steps += steps
        if self._progress_fd is not None:
            os.pwrite(self._progress_fd, b"%12d %d\n" % (self.steps, os.getpid()), 0)

    def close(self) -> None:
        if self._stacks is not None:
            faulthandler.unregister(STACKS_SIGNAL)
            with contextlib.suppress(ValueError):  # not the main thread: the default stays
                signal.signal(STACKS_SIGNAL, signal.SIG_IGN)  # a late ask must not end the process
                _closed_here.set()  # ... and a probe opened later (torch's, after TensorFlow's) may replace it
            self._stacks.close()
            if self.files["stacks"].stat().st_size <= 64:  # only the main-thread line: never asked
                self.files["stacks"].unlink(missing_ok=True)
            self._stacks = None
        if self._progress_fd is not None:
            os.close(self._progress_fd)
            self._progress_fd = None
        self.files["progress"].unlink(missing_ok=True)
        self.files["fr"].unlink(missing_ok=True)  # the waiting thread stays blocked; it ends with the process


def task_probe(environ) -> RankProbe | None:
    """A TensorFlow task's probe, when the chief that started it watches for hangs (``TASK_PROBE_ENV`` holds the
    run directory and the task's number, tab-separated): its stacks and pid, no flight recorder."""
    run_dir, _, number = environ.get(TASK_PROBE_ENV, "").rpartition("\t")
    if not run_dir or not number.isdigit():
        return None
    return RankProbe(run_dir, int(number), TASKS, recorder=False)


def tensorflow_probe(run_dir: str | Path) -> RankProbe:
    """The probe of a TensorFlow script's process under ``rnnprof trace``: number 0, stacks and steps."""
    return RankProbe(run_dir, 0, TASKS, recorder=False)


def _serve(fifo: Path, stacks_fd=lambda: None) -> None:
    """Answer each request on ``fifo``: the flight recorder's dump, written whole to the path requested, or, for
    ``STACKS_REQUEST``, every thread's stack appended to the stacks file (``stacks_fd()``: its descriptor, None
    once closed)."""
    while True:
        try:
            with open(fifo, "rb") as requests:
                target = requests.read(4096).decode(errors="replace").strip()
        except OSError:
            return
        if target == STACKS_REQUEST:
            text = all_stacks().encode(errors="replace")
            fd = stacks_fd()
            if fd is not None:
                with contextlib.suppress(OSError):  # closed with the capture meanwhile
                    os.write(fd, text)
        elif target:
            _dump_to(Path(target))


def all_stacks() -> str:
    """Every other thread's Python stack, innermost frame first, as faulthandler writes them, then
    ``STACKS_END``: read under the interpreter lock, so no frame changes while it is read."""
    me = threading.get_ident()
    out = []
    for ident, frame in sys._current_frames().items():
        if ident == me:
            continue
        out.append(f"Thread 0x{ident:016x} (most recent call first):\n")
        while frame is not None:
            out.append(f'  File "{frame.f_code.co_filename}", line {frame.f_lineno} in {frame.f_code.co_name}\n')
            frame = frame.f_back
        out.append("\n")
    return "".join(out) + STACKS_END


def _dump_to(target: Path) -> None:
    try:
        import torch

        data = torch._C._distributed_c10d._dump_fr_trace()
    except Exception as exc:  # no recorder in this torch, or none initialised: say so in the file
        data = f"error: {type(exc).__name__}: {exc}".encode()
    try:
        atomic_write_bytes(target, data)
    except OSError:
        pass
