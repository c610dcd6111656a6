"""What one PyTorch rank measures of each step without the profiler (``rnnprof watch``), with hooks that cost a
few microseconds a step:

* ``StepMarks``: the moments a step passes through: the model's first forward and its end (a forward pre-hook and
  a forward hook on each *root* module: one called while no other module runs; the roots are found in the first
  step by torch's global module hooks, which are then removed), the optimizer step's start and end (torch's global
  optimizer hooks, installed by the rank's watch);
* ``DdpWaits``: DDP's wait for its gradient all-reduce: from the moment the last gradient is computed (its last
  bucket launched) to the moment DDP has waited for every bucket (a hook on one parameter's gradient and two
  callbacks of the autograd engine a step; the all-reduce itself is DDP's own);
* ``LoaderTime``: the training thread's time in DataLoaders' ``__next__`` (torch's method timed, then put back);
* ``RunQueue``, ``CommThreadWaits``: how long the training thread, and each of gloo's threads that run
  collectives, has waited for a core (the machine's share of a slow step);
* ``MemoryGauge``: the CUDA allocator's bytes and their peak in the step (the peak reset at each step's end)
  where CUDA is in use, else the process's resident memory (``/proc/self/statm``, one ``pread``).
"""

from __future__ import annotations

import os
import threading
import time

from rnnprof.events.series import MEMORY_CUDA, MEMORY_RSS

NAN = float("nan")
NO_DDP = "no DistributedDataParallel module (other collectives are timed in the capture windows)"
PYTHON_REDUCER = "DDP runs its Python reducer (compiled autograd), or the model has no parameter to train"


class StepMarks:
    """The moments of the current step (``time.perf_counter``), and the hooks that set them (see the module)."""

    def __init__(self, on_root=None):
        self.forward = self.backward = self.optimizer = self.optimizer_end = None
        self.roots: list = []
        self._on_root = on_root  # called with each root module once found (the rank's DDP waits)
        self._depth = 0
        self._global: list = []
        self._handles: list = []

    def reset(self) -> None:
        self.forward = self.backward = self.optimizer = self.optimizer_end = None

    def discover(self) -> None:
        """Find the root modules from the next forward on (torch's global module hooks, until ``settle``)."""
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        self._global = [register_module_forward_pre_hook(self._global_pre),
                        register_module_forward_hook(self._global_post, always_call=True)]

    def _global_pre(self, module, args) -> None:
        if self._depth == 0 and not any(module is root for root in self.roots):
            self.roots.append(module)
            self._hook_root(module)
            if self.forward is None:
                self.forward = time.perf_counter()
        self._depth += 1

    def _global_post(self, module, args, output) -> None:
        self._depth = max(0, self._depth - 1)

    def settle(self) -> None:
        """Stop looking for roots (after the first step): only the roots' own hooks stay."""
        for handle in self._global:
            handle.remove()
        self._global.clear()

    def _hook_root(self, module) -> None:
        self._handles += [module.register_forward_pre_hook(self._root_pre),
                          module.register_forward_hook(self._root_post)]
        if self._on_root is not None:
            self._on_root(module)

    def _root_pre(self, module, args) -> None:
        if self.forward is None:
            self.forward = time.perf_counter()

    def _root_post(self, module, args, output) -> None:
        if self.backward is None:  # the model's output: what follows is the loss and its backward pass
            self.backward = time.perf_counter()

    def close(self) -> None:
        self.settle()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


class DdpWaits:
    """DDP's all-reduce waits of one rank (see the module); ``unmeasured``: why none are measured, "" once a DDP
    module is hooked. DDP launches each bucket's all-reduce as its gradients are ready, in the reverse of the model's
    order, and waits for them all in a callback of the autograd engine once the last is launched. A hook on the
    gradient of the model's first parameter, the last one computed, notes that moment and queues a callback, which
    queues one more at the queue's end as it runs: after DDP's, which has waited for every all-reduce (the engine
    runs the callbacks queued meanwhile too). The all-reduce itself stays DDP's own (C++)."""

    def __init__(self):
        self.unmeasured = NO_DDP
        self._launched = self._done = None
        self._queued = False
        self._hooked = False

    def offer(self, module) -> None:
        """A root module: hooked if it is a DDP module (not one of compiled autograd's Python reducer)."""
        from torch.nn.parallel import DistributedDataParallel

        if self._hooked or not isinstance(module, DistributedDataParallel):
            return
        first = next((p for p in module.module.parameters() if p.requires_grad), None)
        if getattr(module, "_use_python_reducer", False) or first is None:
            self.unmeasured = PYTHON_REDUCER
            return
        first.register_post_accumulate_grad_hook(self._gradients_done)
        self._hooked, self.unmeasured = True, ""

    def _gradients_done(self, parameter) -> None:
        if self._queued:
            return
        from torch.autograd import Variable

        self._launched, self._queued = time.perf_counter(), True
        Variable._execution_engine.queue_callback(self._after_ddp)

    def _after_ddp(self) -> None:
        from torch.autograd import Variable

        Variable._execution_engine.queue_callback(self._all_done)

    def _all_done(self) -> None:
        self._done, self._queued = time.perf_counter(), False

    def take(self) -> float:
        """The step's wait (seconds): 0 for a step without an all-reduce; NaN where none is measured."""
        if not self._hooked:
            return NAN
        wait = 0.0
        if self._launched is not None and self._done is not None:
            wait = max(0.0, self._done - self._launched)
        self._launched = self._done = None
        return wait


class LoaderTime:
    """The seconds the thread that made it spent in DataLoader iterators' ``__next__`` (torch's
    ``_BaseDataLoaderIter``, every DataLoader's iterator), summed from one ``take`` to the next; ``seen`` once one
    was iterated there. Other threads' iterations are not counted. ``close`` puts torch's method back."""

    def __init__(self):
        self.seen = False
        self._spent = 0.0
        self._thread = threading.get_ident()
        self._patched = None
        try:
            from torch.utils.data.dataloader import _BaseDataLoaderIter
        except ImportError:  # a torch without it: the data wait is the time before the forward
            return
        original = _BaseDataLoaderIter.__next__

        def timed(iterator):
            if threading.get_ident() != self._thread:
                return original(iterator)
            began = time.perf_counter()
            try:
                return original(iterator)
            finally:
                self._spent += time.perf_counter() - began
                self.seen = True

        _BaseDataLoaderIter.__next__ = timed
        self._patched = (_BaseDataLoaderIter, original, timed)

    def take(self) -> float:
        spent, self._spent = self._spent, 0.0
        return spent

    def close(self) -> None:
        if self._patched is not None:
            cls, original, timed = self._patched
            if cls.__next__ is timed:  # another wrapper installed since stays
                cls.__next__ = original
            self._patched = None


STATM = "/proc/self/statm"
SCHEDSTAT = "/proc/thread-self/schedstat"  # the opening thread's: ns on a core, ns waiting for one, slices


class RunQueue:
    """The seconds the thread that made it has waited for a core so far (Linux), read with one ``pread``; NaN
    elsewhere. Made on the training thread, read from the step hooks."""

    def __init__(self):
        try:
            self._fd: int | None = os.open(SCHEDSTAT, os.O_RDONLY)
        except OSError:
            self._fd = None

    def read(self) -> float:
        if self._fd is None:
            return NAN
        try:
            return schedstat_wait_s(os.pread(self._fd, 128, 0))
        except (OSError, ValueError, IndexError):
            return NAN

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


TASKS = "/proc/self/task"  # Linux: a folder per thread of the process; its link count is the threads + 2
COMM_THREADS = frozenset({"pt_gloo_runloop"})  # the names of gloo's threads that run collectives (Linux)


class CommThreadWaits:
    """How long each of the process's communication threads (``COMM_THREADS``, by name) has waited for a core so
    far (Linux): ``read()`` gives thread id -> seconds, or None where the kernel does not say. The threads are
    listed again where the process's count of threads changed since the read before last (one ``stat``; a thread
    names itself after it starts); then one read per such thread. A thread started as another ended between two
    reads is missed until the count changes."""

    def __init__(self):
        self._threads = (-1, -1)  # the count of threads at the last two reads
        self._ids: tuple[str, ...] = ()

    def read(self) -> dict[str, float] | None:
        try:
            threads = os.stat(TASKS).st_nlink
            if threads != self._threads[0] or threads != self._threads[1]:
                self._ids = tuple(t for t in os.listdir(TASKS) if _thread_name(t) in COMM_THREADS)
            self._threads = (self._threads[1], threads)
        except OSError:
            return None
        waits = {}
        for tid in self._ids:
            wait = waited_s(f"{TASKS}/{tid}/schedstat")
            if wait is not None:  # else the thread has ended
                waits[tid] = wait
        return waits


def _thread_name(tid: str) -> str:
    try:
        with open(f"{TASKS}/{tid}/comm", "rb") as f:
            return f.read().strip().decode(errors="replace")
    except OSError:
        return ""


def waited_s(path: str = SCHEDSTAT) -> float | None:
    """The seconds a thread has waited for a core while ready to run, from its ``schedstat`` (the calling thread's
    by default); None where the kernel does not say."""
    try:
        with open(path, "rb") as f:
            return schedstat_wait_s(f.read())
    except (OSError, ValueError, IndexError):
        return None


def schedstat_wait_s(raw: bytes) -> float:
    """The wait for a core (s) in a ``schedstat`` line: ns on a core, ns waiting for one, time slices."""
    return int(raw.split()[1]) / 1e9


class MemoryGauge:
    """The rank's memory at a step's end and its peak in the step (see the module)."""

    def __init__(self):
        import torch

        self._cuda = torch.cuda if torch.cuda.is_available() else None
        self._fd: int | None = None
        self.source = MEMORY_RSS
        try:
            self._fd = os.open(STATM, os.O_RDONLY)
        except OSError:
            pass
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

    def read(self) -> tuple[float, float]:
        """(bytes now, peak bytes in the step or NaN)."""
        cuda = self._cuda
        if cuda is not None and cuda.is_initialized():
            self.source = MEMORY_CUDA
            # both figures from one read of the allocator's statistics: memory_allocated() and
            # max_memory_allocated() each flatten all of them in Python (about 0.15 ms each on an H200, every step)
            allocated = cuda.memory_stats_as_nested_dict().get("allocated_bytes", {}).get("all", {})
            cuda.reset_peak_memory_stats()
            return float(allocated.get("current", 0)), float(allocated.get("peak", 0))
        if self._fd is None:
            return NAN, NAN
        try:
            return float(int(os.pread(self._fd, 64, 0).split()[1]) * self._page), NAN
        except (OSError, ValueError, IndexError):
            return NAN, NAN

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
