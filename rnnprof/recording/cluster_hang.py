"""``rnnprof trace``'s hang watch over a TensorFlow job this process drives: a gRPC cluster it started
(``--workers N``), a built-in workload on this process's own devices, or a cluster of tasks started elsewhere
(``--cluster-spec``: they cannot be asked, the chief is judged alone; docs/commands/hang.md).

The chief (this process) finishes the steps: each step it ends is counted (``tick``). Without a cluster the
watch has only the chief's own stacks to judge (``analyze_process_hang``); with one: Each task keeps a probe
(``hang_probe.task_probe``: faulthandler's stacks on a signal, its pid; no flight recorder). When no step finished
for the threshold (as ``hang_watch``: ``--hang-after``, or the default), the watch samples every task's stacks and
the chief's own, waits ``confirm_s`` and samples again. A step finished or a main thread moved: slow, not hung.
Else hung: the stacks and the verdict (``analyze_cluster_hang``) go to ``RUN/hang/`` and ``give_up`` runs
(it stops the tasks, if any, and ends the chief, which is blocked inside TensorFlow)."""

from __future__ import annotations

import faulthandler
import linecache
import os
import select
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from rnnprof import rundir
from rnnprof.files import atomic_write_bytes
from rnnprof.analyzers.hang import (HangVerdict, analyze_cluster_hang, analyze_process_hang,
                                    analyze_remote_cluster_hang, slow_verdict)
from rnnprof.recording import hang_collect
from rnnprof.recording.hang_probe import TASKS
from rnnprof.recording.hang_watch import CONFIRM_MAX_S, POLL_S, HangOptions, threshold_s
from rnnprof.traces.stack_dump import CHIEF_STACKS, MAIN_MARK, PROCESS_STACKS, parse_stacks, with_source

CHIEF = -1  # the chief's number among the stacks sampled
INTERRUPT_GRACE_S = 4.0  # --on-hang wait: how long a stuck chief has to act on Ctrl-C or SIGTERM itself


class ClusterHangWatch:
    """Watch a cluster's steps from a thread while the block runs; ``tick()`` after each step the chief ends.
    ``names``: each task's number -> "job:index" of the tasks it can ask (empty: no cluster, one process, or a
    cluster of tasks started elsewhere: ``remote`` names them once known); ``give_up(verdict)`` runs once it hung
    (with ``--on-hang stop``)."""

    def __init__(self, run_dir: str | Path, hang: HangOptions, names: dict[int, str],
                 give_up: Callable[[HangVerdict], None], on_interrupt: Callable[[], None] = lambda: None):
        self.run_dir, self.hang, self.names, self.give_up = Path(run_dir), hang, names, give_up
        self.on_interrupt = on_interrupt  # --on-hang wait: ends the process on a Ctrl-C or SIGTERM it cannot act on
        self._wakeup: _Wakeup | None = None
        self.verdict: HangVerdict | None = None
        self.record: dict | None = None  # the manifest's ``hang`` object, once hung
        self.remote: list[str] = []  # "job:index" of each task started elsewhere (--cluster-spec)
        self.steps, self._seen, self._last, self._longest_gap = 0, 0, time.monotonic(), 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rnnprof-cluster-hang-watch", daemon=True)

    def tick(self, *_) -> None:
        self.steps += 1

    def ticking(self, step: Callable):
        """``step``, counted."""
        def counted(*args, **kwargs):
            result = step(*args, **kwargs)
            self.tick()
            return result
        return counted

    def __enter__(self) -> "ClusterHangWatch":
        self._wakeup = _Wakeup.install() if not self.hang.stop else None
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        if self._wakeup is not None:
            self._wakeup.close()

    def _moved(self) -> bool:
        steps = self.steps
        if len(hang_collect.live_ranks(self.run_dir, TASKS)) < len(self.names) and not self._seen:
            self._last = time.monotonic()  # the clock starts once every task runs its probe
        if steps == self._seen:
            return False
        now = time.monotonic()
        if self._seen:
            self._longest_gap = max(self._longest_gap, now - self._last)
        self._seen, self._last = steps, now
        return True

    def threshold(self) -> float:
        return threshold_s(self.hang.after, self._seen > 0, self._longest_gap)

    def _run(self) -> None:
        try:
            self._watch()
        except Exception as exc:  # the job runs on unwatched: said, not dropped
            self.hang.on_note(f"the hang watch stopped ({type(exc).__name__}: {exc}); the job is not watched")

    def _watch(self) -> None:
        while not self._stop.wait(POLL_S):
            quiet = time.monotonic() - self._last
            if self._moved() or quiet < self.threshold():
                continue
            verdict = self._judge(quiet)
            if verdict is None:
                self._last = time.monotonic()
                continue
            self.verdict = verdict
            if not self.hang.stop:
                self.hang.on_note(f"hung: {verdict.summary}; --on-hang wait: the job keeps running")
                self._await_interrupt()
                return
            self.give_up(verdict)
            return

    def _await_interrupt(self) -> None:
        """A hung job left running: a Ctrl-C or SIGTERM reaches the main thread only once it runs Python again,
        which one stuck inside TensorFlow never does. ``INTERRUPT_GRACE_S`` after one, unless the block has
        ended meanwhile, ``on_interrupt`` ends the process."""
        while self._wakeup is not None and not self._stop.is_set():
            if self._wakeup.interrupted(POLL_S):
                if not self._stop.wait(INTERRUPT_GRACE_S):
                    self.on_interrupt()
                return

    def _sample(self, scratch: Path) -> hang_collect.Sample:
        live = hang_collect.live_ranks(self.run_dir, TASKS)
        got = hang_collect.sample(self.run_dir, live, scratch, TASKS)
        got.stack_texts[CHIEF] = _own_stacks()
        got.stacks[CHIEF] = parse_stacks(got.stack_texts[CHIEF], CHIEF)
        return got

    def _judge(self, quiet: float) -> HangVerdict | None:
        scratch = self.run_dir / rundir.HANG_DIR / ".sample"
        first = self._sample(scratch / "1")
        deadline = time.monotonic() + min(self.threshold(), CONFIRM_MAX_S)
        while time.monotonic() < deadline and self.steps == self._seen and not self._stop.is_set():
            time.sleep(POLL_S)
        if self._stop.is_set():
            hang_collect.clear(self.run_dir / rundir.HANG_DIR)
            return None
        second = self._sample(scratch / "2")
        chief = "the chief" if self.names or self.remote else "the process"
        why = "a step finished meanwhile" if self.steps != self._seen else _what_moved(first, second, chief)
        if why:
            hang_collect.clear(self.run_dir / rundir.HANG_DIR)
            self.hang.on_note(slow_verdict(quiet, why).summary)
            return None
        verdict, chief_file = self._verdict(second)
        chief_text = second.stack_texts.pop(CHIEF)
        files = hang_collect.save(self.run_dir, second, verdict.summary)
        atomic_write_bytes(self.run_dir / rundir.HANG_DIR / chief_file, chief_text.encode())
        hang_collect.clear(scratch)
        self.record = self._record(verdict, [*files, f"{rundir.HANG_DIR}/{chief_file}"])
        return verdict

    def _verdict(self, second: hang_collect.Sample) -> tuple[HangVerdict, str]:
        """The verdict on the last sample, and the name the chief's stacks are saved under in ``hang/``."""
        if self.remote:  # tasks started elsewhere: the chief's stacks alone
            return analyze_remote_cluster_hang(self.remote, second.stacks[CHIEF]), CHIEF_STACKS
        if not self.names:  # one process: it is the job
            return analyze_process_hang(second.stacks[CHIEF]), PROCESS_STACKS
        tasks = {n: s for n, s in second.stacks.items() if n != CHIEF}
        return analyze_cluster_hang(self.names, tasks, second.stacks[CHIEF]), CHIEF_STACKS

    def _record(self, verdict: HangVerdict, files: list[str]) -> dict:
        """The manifest's ``hang`` object."""
        record = {"kind": verdict.kind, "verdict": verdict.summary, "ranks": sorted({c.rank for c in verdict.culprits}),
                  "files": files, "hang_after_s": self.threshold(), "notes": list(verdict.notes),
                  "detected": time.time()}
        if self.remote:
            record.update(scope=rundir.HANG_SCOPE_REMOTE, tasks=[], task_names=list(self.remote))
        elif self.names:
            record.update(tasks=[self.names[c.rank] for c in verdict.culprits],
                          task_names=[self.names[n] for n in sorted(self.names)])
        else:
            record["scope"] = rundir.HANG_SCOPE_PROCESS
        return record


class _Wakeup:
    """The signals this process's Python handlers take (Ctrl-C, SIGTERM), seen from another thread: written to a
    pipe by the C handler (``signal.set_wakeup_fd``) even while the main thread never runs Python."""

    def __init__(self, read_fd: int, write_fd: int, old: int):
        self._read, self._write, self._old = read_fd, write_fd, old

    @classmethod
    def install(cls) -> "_Wakeup | None":
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        try:
            old = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        except ValueError:  # not the main thread: interrupts stay the main thread's alone
            os.close(read_fd)
            os.close(write_fd)
            return None
        return cls(read_fd, write_fd, old)

    def interrupted(self, timeout_s: float) -> bool:
        """Whether SIGINT or SIGTERM came (since the last look), waiting up to ``timeout_s``."""
        ready, _, _ = select.select([self._read], [], [], timeout_s)
        try:
            got = os.read(self._read, 512) if ready else b""
        except OSError:
            return False
        return int(signal.SIGINT) in got or int(signal.SIGTERM) in got

    def close(self) -> None:
        signal.set_wakeup_fd(self._old)
        os.close(self._read)
        os.close(self._write)


def _own_stacks() -> str:
    """This process's threads, as faulthandler writes them, after the main-thread line."""
    with tempfile.TemporaryFile("w+") as handle:  # faulthandler writes to a file descriptor
        faulthandler.dump_traceback(handle, all_threads=True)
        handle.seek(0)
        text = handle.read()
    text = f"{MAIN_MARK}0x{threading.main_thread().ident:016x}\n{text}"
    return with_source(text, lambda f, n: linecache.getline(f, n))


def _what_moved(first: hang_collect.Sample, second: hang_collect.Sample, chief: str) -> str:
    """A main thread whose stack changed between the samples (any frame); empty when none did."""
    for number in sorted(set(first.stacks) & set(second.stacks)):
        a, b = first.stacks[number].main_thread, second.stacks[number].main_thread
        if a and b and a.frames != b.frames:
            return f"{chief if number == CHIEF else 'task ' + str(number)}'s main thread runs"
    return ""
