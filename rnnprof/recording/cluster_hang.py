"""The hang watch's transport to a TensorFlow job this process drives (docs/commands/hang.md): a gRPC cluster it
started (``--workers N``), a built-in workload on this process's own devices, or a cluster of tasks started
elsewhere (``--cluster-spec``: they cannot be asked, the chief is judged alone).

The chief (this process) finishes the steps: each step it ends is counted (``tick``). Each task it started keeps
a probe (``hang_probe.task_probe``: faulthandler's stacks on a signal, its pid; no flight recorder); a sample asks
every task for its stacks and takes the chief's own. Without a cluster the chief's stacks are the job's
(``analyze_process_hang``); with one, the tasks' and the chief's are judged together (``analyze_cluster_hang``).
The chief's process writes the manifest (``RunWriter``): the watch leaves it to mark the run ``hung``."""

from __future__ import annotations

import faulthandler
import linecache
import os
import tempfile
import threading
from pathlib import Path
from typing import Callable

from rnnprof import rundir
from rnnprof.analyzers.hang import (HangVerdict, analyze_cluster_hang, analyze_process_hang,
                                    analyze_remote_cluster_hang)
from rnnprof.recording import hang_collect
from rnnprof.recording.hang_collect import Sample
from rnnprof.recording.hang_probe import TASKS
from rnnprof.traces.stack_dump import CHIEF_STACKS, MAIN_MARK, PROCESS_STACKS, parse_stacks, with_source

CHIEF = -1  # the chief's number among the stacks sampled


class ChiefTransport:
    """``names``: each task's number -> "job:index" of the tasks it can ask (empty: no cluster, one process, or a
    cluster of tasks started elsewhere: ``remote`` names them once known). ``tick()`` after each step the chief
    ends (``ticking(step)``: ``step``, counted)."""

    def __init__(self, run_dir: str | Path, names: dict[int, str]):
        self.run_dir, self.names = Path(run_dir), names
        self.remote: list[str] = []  # "job:index" of each task started elsewhere (--cluster-spec)
        self.steps = 0

    def tick(self, *_) -> None:
        self.steps += 1

    def ticking(self, step: Callable):
        """``step``, counted."""
        def counted(*args, **kwargs):
            result = step(*args, **kwargs)
            self.tick()
            return result
        return counted

    def progress(self) -> tuple[dict[int, int], bool]:
        tasks = hang_collect.live_ranks(self.run_dir, TASKS)
        return {CHIEF: self.steps}, len(tasks) >= len(self.names)  # the clock starts once every task runs its probe

    def live(self) -> dict[int, int]:
        return {**hang_collect.live_ranks(self.run_dir, TASKS), CHIEF: os.getpid()}

    def sample(self, live: dict[int, int], scratch: Path) -> Sample:
        tasks = {number: pid for number, pid in live.items() if number != CHIEF}
        got = hang_collect.sample(self.run_dir, tasks, scratch, TASKS)
        got.stack_texts[CHIEF] = _own_stacks()
        got.stacks[CHIEF] = parse_stacks(got.stack_texts[CHIEF], CHIEF)
        return got

    def who(self, number: int) -> str:
        if number != CHIEF:
            return f"task {number}"
        return "the chief" if self.names or self.remote else "the process"

    def judge(self, got: Sample) -> HangVerdict:
        if self.remote:  # tasks started elsewhere: the chief's stacks alone
            return analyze_remote_cluster_hang(self.remote, got.stacks[CHIEF])
        if not self.names:  # one process: it is the job
            return analyze_process_hang(got.stacks[CHIEF])
        tasks = {n: s for n, s in got.stacks.items() if n != CHIEF}
        return analyze_cluster_hang(self.names, tasks, got.stacks[CHIEF])

    def stacks_file(self, number: int) -> str:
        if number != CHIEF:
            return hang_collect.rank_stacks_file(number)
        return CHIEF_STACKS if self.names or self.remote else PROCESS_STACKS

    def keep(self, hang: dict) -> dict:
        """The run is marked by its writer, in this process, as it ends."""
        if self.remote:
            hang.update(scope=rundir.HANG_SCOPE_REMOTE, tasks=[], task_names=list(self.remote))
        elif self.names:
            hang.update(tasks=[self.names[rank] for rank in hang["ranks"]],
                        task_names=[self.names[n] for n in sorted(self.names)])
        else:
            hang["scope"] = rundir.HANG_SCOPE_PROCESS
        return hang


def _own_stacks() -> str:
    """This process's threads, as faulthandler writes them, after the main-thread line."""
    with tempfile.TemporaryFile("w+") as handle:  # faulthandler writes to a file descriptor
        faulthandler.dump_traceback(handle, all_threads=True)
        handle.seek(0)
        text = handle.read()
    text = f"{MAIN_MARK}0x{threading.main_thread().ident:016x}\n{text}"
    return with_source(text, lambda f, n: linecache.getline(f, n))
