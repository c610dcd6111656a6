"""Capture of one PyTorch rank: ``torch.profiler`` over a window of steps, one Kineto trace per rank.

    capture = TorchCapture(run_dir, rank, skip_steps=2, steps=3)   # profiling starts here: step 0 begins
    for batch in batches:
        with capture.phase("forward"):
            loss = model(batch)
        ...
        capture.step()                                             # after each optimizer step
    facts = capture.close()                                        # what the manifest records of this rank

Steps ``skip_steps`` to ``skip_steps + steps - 1`` are recorded, each in a ``ProfilerStep#N`` range; the step
before is the profiler's warm-up. A thread compresses Kineto's export into ``<run_dir>/torch/rank<r>.json.gz``
beside the training, at nice 19 on Linux (``background_priority``); ``close()`` waits for it. Every ``step()``
also times the step, in the window and out of it (``step_times``), so that an analysis can tell the profiler's
cost from the untraced steps. What is recorded: docs/commands/trace.md.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

from rnnprof import rundir
from rnnprof.events import names
from rnnprof.recording.interrupt import interrupts_deferred
from rnnprof.recording.nvtx import NvtxSpan, nvtx_range
from rnnprof.recording.recorder_window import write_window
from rnnprof.recording.torch_telemetry import CommThreadWaits, waited_s
from rnnprof.rundir.writer import atomic_write_bytes
from rnnprof.frameworks.torch import import_torch


def trace_path(run_dir: str | Path, rank: int) -> Path:
    """Where rank ``rank`` of the run in ``run_dir`` writes its Kineto trace."""
    return Path(run_dir) / rundir.TORCH_TRACES_DIR / rundir.torch_trace_name(rank)


class TorchCapture:
    """``torch.profiler`` over steps ``skip_steps`` .. ``skip_steps + steps - 1`` of one rank (see the module)."""

    def __init__(self, run_dir: str | Path, rank: int = 0, skip_steps: int = 1, steps: int = 2,
                 profile_memory: bool = True, first_step: int = 0):
        if skip_steps < 0 or steps < 1:
            raise ValueError(f"TorchCapture needs skip_steps >= 0 and steps >= 1 (got {skip_steps}, {steps})")
        torch = import_torch("capturing a PyTorch run")
        from torch.profiler import ProfilerActivity, profile, schedule

        self.run_dir = Path(run_dir)
        self.rank = int(rank)
        self.skip_steps = int(skip_steps)
        self.steps = int(steps)
        self.first_step = int(first_step)  # the number of the step profiling starts in (rnnprof watch: the job's)
        self.path = trace_path(self.run_dir, self.rank)
        self._torch = torch
        self._done = 0  # steps completed (calls to step())
        self._written = False
        self._closed = False
        self._compressing: threading.Thread | None = None
        self._compression: "BlockCompression | None" = None
        self._taking_over = threading.Event()  # wait() compresses what is left itself, at its own priority
        self._lowered = False  # the writer thread runs at nice 19 (``background_priority``)
        self._step_left = threading.Event()  # the step that exported the window has returned
        self._export_error: BaseException | None = None
        self.profile_memory = bool(profile_memory)
        self._baseline: dict | None = None
        self._comm = CommThreadWaits()
        self._step_ends: list[tuple] = []  # _clocks() at each step()
        self._export_span: list[float] = []  # perf_counter as the export began and as it ended (step_times)
        self._exported_at = 0.0  # perf_counter as Kineto's export ended (set by _export, before the thread starts)
        self._window_ns = 0  # time_ns() as the window's recording began (the flight recorder's clock)
        self._recorder: Path | None = None  # the window's flight-recorder entries, where written (recorder_window)
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self.activities = [a.name.lower() for a in activities]
        warmup = min(1, self.skip_steps)  # Kineto wants one warm-up step where there is room for it
        self._profile = profile(
            activities=activities,
            schedule=_from_step(schedule(wait=self.skip_steps - warmup, warmup=warmup, active=self.steps, repeat=1),
                                self.first_step),
            on_trace_ready=self._export, record_shapes=True, profile_memory=self.profile_memory)
        self._profile.step_num = self.first_step  # ProfilerStep#N numbers the job's steps
        self._window_ns = time.time_ns()
        self._profile.start()
        if self.skip_steps == 0:
            self._baseline = window_baseline(torch)
        self._nvtx = NvtxSpan(f"step {self.first_step}")
        self._began = _clocks(self._comm)

    # -- the training loop's calls -------------------------------------------------------------------

    @contextlib.contextmanager
    def phase(self, name: str):
        """A ``record_function`` range (in the trace) and an NVTX range (for Nsight Systems) named ``name``."""
        with nvtx_range(name), self._torch.profiler.record_function(name):
            yield

    def step(self) -> None:
        """End the current step and begin the next (call after each optimizer step); after ``close()`` it only
        records the step's times."""
        self._step_ends.append(_clocks(self._comm))
        self._done += 1
        if self._closed:
            return
        self._nvtx.end()
        if self._done == self.skip_steps:
            self._window_ns = time.time_ns()  # the next call begins the window's recording
            if self.profile_memory:
                self._baseline = window_baseline(self._torch)
        with interrupts_deferred():  # a Ctrl-C in the window's export comes once the trace is written
            self._profile.step()  # ends ProfilerStep#N, begins #N+1; writes the trace as the window ends
        self._step_left.set()  # the compressing thread starts only now, off the closing step's time
        self._nvtx = NvtxSpan(f"step {self.first_step + self._done}")

    def close(self, wait: bool = True) -> dict:
        """Stop profiling (writing a window cut short) and return this rank's facts for the manifest;
        ``wait=False``: return at once ({}), the trace still being written (``wait()``, then ``facts()``)."""
        if not self._closed:
            self._closed = True
            self._nvtx.end()
            self._profile.stop()
        if not wait:
            return {}
        self.wait()
        return self.facts()

    def __enter__(self) -> "TorchCapture":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- what was captured ---------------------------------------------------------------------------

    @property
    def captured_steps(self) -> list[int]:
        """The window's steps that ran to their end (a step cut short by ``close`` is in the trace, not here)."""
        first = self.first_step + self.skip_steps
        return list(range(first, min(first + self.steps, self.first_step + self._done)))

    @property
    def writing(self) -> bool:
        """The window's trace is being exported or compressed beside the training."""
        thread = self._compressing
        return thread is not None and thread.is_alive()

    def step_times(self) -> dict:
        """``{names.RANK_STEP_SECONDS: [each step's wall seconds], names.RANK_STEP_CPU_SECONDS: [its CPU seconds,
        all the process's threads], names.RANK_STEP_THREAD_CPU_SECONDS: [its CPU seconds in the thread that ends
        the steps, the training loop's, where the profiler records its operators],
        names.RANK_STEP_RUNQUEUE_SECONDS: [the seconds that thread waited for a core, where Linux says],
        names.RANK_STEP_COMM_RUNQUEUE_SECONDS: [the seconds gloo's threads that run collectives waited for a core,
        summed, where Linux says and the process has such threads],
        names.RANK_PROFILER_WARMUP_STEPS: [the step the profiler warmed up in, where there was one],
        names.RANK_EXPORT_STEPS: [the steps that overlap the export of the window's trace, from
        Kineto's export to the compressed file in place, or to the end of Kineto's export where the compression
        runs at nice 19]}``."""
        bounds = [self._began, *self._step_ends]
        seconds = [round(b[0] - a[0], 6) for a, b in zip(bounds, bounds[1:])]
        cpu = [round(b[1] - a[1], 6) for a, b in zip(bounds, bounds[1:])]
        thread_cpu = [round(b[2] - a[2], 6) for a, b in zip(bounds, bounds[1:])]
        known = all(b[3] is not None for b in bounds)
        runqueue = {names.RANK_STEP_RUNQUEUE_SECONDS: [round(b[3] - a[3], 6) for a, b in zip(bounds, bounds[1:])]
                    } if known else {}
        comm = [b[4] for b in bounds]
        if all(w is not None for w in comm) and any(comm):
            # a thread counts from the step it was first read at; an id the kernel gave a new thread counts 0 there
            runqueue[names.RANK_STEP_COMM_RUNQUEUE_SECONDS] = [
                round(sum(max(w - a[t], 0.0) for t, w in b.items() if t in a), 6) for a, b in zip(comm, comm[1:])]
        exporting = []
        if self._export_span:
            start = self._export_span[0]
            end = self._export_span[1] if len(self._export_span) > 1 else float("inf")
            exporting = [i for i, (a, b) in enumerate(zip(bounds, bounds[1:])) if a[0] < end and b[0] > start]
        warmup = [self.skip_steps - 1] if self.skip_steps >= 1 and self._done >= self.skip_steps else []
        return {names.RANK_STEP_SECONDS: seconds, names.RANK_STEP_CPU_SECONDS: cpu,
                names.RANK_STEP_THREAD_CPU_SECONDS: thread_cpu, **runqueue,
                names.RANK_PROFILER_WARMUP_STEPS: warmup, names.RANK_EXPORT_STEPS: exporting}

    def facts(self) -> dict:
        """``{"rank", "trace" and "flight_recorder" (relative to the run directory, or None), "steps",
        "skip_steps", "window_steps", "steps_run", "activities", "backend", "world_size", "memory"}`` and
        ``step_times()``'s fields:
        ``backend`` and ``world_size`` are None without a process group."""
        backend = world = None
        distributed = self._torch.distributed
        if distributed.is_available() and distributed.is_initialized():
            backend, world = str(distributed.get_backend()), distributed.get_world_size()
        return {"rank": self.rank,
                "trace": self.path.relative_to(self.run_dir).as_posix() if self._written else None,
                "flight_recorder": self._recorder.relative_to(self.run_dir).as_posix() if self._recorder else None,
                "steps": self.captured_steps, "skip_steps": self.skip_steps, "window_steps": self.steps,
                "first_step": self.first_step,
                "steps_run": self._done, "activities": self.activities,
                "backend": backend, "world_size": world, "memory": self.memory_facts(), **self.step_times()}

    def memory_facts(self) -> dict:
        """``{"profile_memory", "baseline" (``window_baseline`` at the window's start, or None), "max_allocated",
        "max_reserved"}``: the CUDA allocator's peaks over the process (None without CUDA)."""
        cuda = self._torch.cuda
        on_cuda = cuda.is_available() and cuda.is_initialized()
        return {"profile_memory": self.profile_memory, "baseline": self._baseline,
                "max_allocated": int(cuda.max_memory_allocated()) if on_cuda else None,
                "max_reserved": int(cuda.max_memory_reserved()) if on_cuda else None}

    def wait(self) -> None:
        """Until the window's trace is in place (or failed: the failure is raised here). The caller takes over
        what is left of the compression: a thread at nice 19 can be slow to finish on busy cores."""
        self._step_left.set()
        thread = self._compressing
        if thread is not None:
            self._taking_over.set()
            with interrupts_deferred():  # a Ctrl-C now comes once the trace is in place
                thread.join()  # it stops after the block it is compressing
                if not self._compression.done:  # set with the thread, in _export
                    self._finish_compression(self._compression.run())
        error, self._export_error = self._export_error, None
        if error is not None:
            raise error

    def _export(self, prof) -> None:
        """``on_trace_ready``: Kineto writes plain JSON to a scratch file, as torch's own export does, and the
        flight recorder's entries of the window are written beside the trace (``recorder_window``); a thread
        compresses the trace and renames it into place whole (``_compress``)."""
        self._export_span, window_end_ns = [time.perf_counter()], time.time_ns()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, scratch = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".json", dir=self.path.parent)
        os.close(fd)
        try:
            prof.export_chrome_trace(scratch)
        except BaseException:
            os.unlink(scratch)
            raise
        self._recorder = write_window(self._torch, self.path, self.rank, self._window_ns, window_end_ns)
        self._exported_at = time.perf_counter()
        self._compression = BlockCompression(scratch, self.path)
        # Not a daemon: a script that returns before the thread is done still leaves its trace.
        self._compressing = threading.Thread(target=self._compress, name="rnnprof-trace-writer")
        self._compressing.start()

    def _compress(self) -> None:
        self._step_left.wait()  # the training's thread keeps the GIL until its closing step is over
        self._lowered = background_priority()
        outcome = self._compression.run(until=self._taking_over)
        if self._compression.done:
            self._finish_compression(outcome)

    def _finish_compression(self, error: BaseException | None) -> None:
        """The trace in place, or the failure kept for ``wait()`` to raise in the caller's thread."""
        self._written = error is None
        self._export_error = error
        # the steps a compression at nice 19 runs beside are not slowed by it, and what wait() takes over runs
        # once they are over: the export ended with Kineto's
        self._export_span.append(self._exported_at if self._lowered else time.perf_counter())


def _from_step(schedule, first_step: int):
    """``schedule`` for a profiler whose first step is numbered ``first_step`` (the profiler's own schedule is
    asked about step 0 as it is made, before its number is set)."""
    return lambda step: schedule(max(0, step - first_step))


class BlockCompression:
    """A window's scratch trace gzipped a block at a time into its place, so that a thread that must wait for
    it can take over between two blocks (``run(until=...)``) instead of waiting on a thread at nice 19."""

    BLOCK = 1 << 20  # bytes read and compressed at a time

    def __init__(self, scratch: str, target: Path):
        self.scratch, self.target = scratch, target
        self.done = False
        self._parts: list[bytes] = []
        self._packer = zlib.compressobj(3, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # a gzip stream, mtime 0
        self._offset = 0

    def run(self, until: threading.Event | None = None) -> BaseException | None:
        """Compress block after block until the trace is in place and the scratch file gone (``done``), or until
        ``until`` is set; the failure that ended it, if one did."""
        try:
            while not self.done and (until is None or not until.is_set()):
                with open(self.scratch, "rb") as handle:
                    handle.seek(self._offset)
                    block = handle.read(self.BLOCK)
                self._offset += len(block)
                if block:
                    self._parts.append(self._packer.compress(block))
                    continue
                self._parts.append(self._packer.flush())
                atomic_write_bytes(self.target, b"".join(self._parts))
                self._end()
        except BaseException as exc:
            self._end()
            return exc
        return None

    def _end(self) -> None:
        self.done = True
        self._parts = []
        try:
            os.unlink(self.scratch)
        except OSError:
            pass


def _clocks(comm: CommThreadWaits) -> tuple[float, float, float, float | None, dict[str, float] | None]:
    """Now by the wall clock, the process's CPU time, the calling thread's CPU time, the time that thread has
    waited for a core while ready to run, and each of gloo's threads' (``comm``'s; seconds; None where the kernel
    does not say)."""
    return time.perf_counter(), time.process_time(), time.thread_time(), waited_s(), comm.read()


def background_priority() -> bool:
    """The calling thread at nice 19, where the kernel schedules threads on their own (Linux: a thread's native
    id is a scheduling entity of its own). Elsewhere the same call would renice the whole process, or whichever
    process has that id, so nothing is done there; nor where the kernel refuses. True where the thread runs at 19."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except OSError:
        return False
    return True


def window_baseline(torch) -> dict:
    """The memory in use as a window starts: the CUDA allocator's allocated and reserved bytes where CUDA is in
    use, else the process's resident memory (which counts more than tensors: code, libraries, the heap)."""
    cuda = torch.cuda
    if cuda.is_available() and cuda.is_initialized():
        return {"source": "cuda_allocator", "allocated": int(cuda.memory_allocated()),
                "reserved": int(cuda.memory_reserved())}
    return {"source": "process_rss", "allocated": resident_bytes(), "reserved": None}


def resident_bytes() -> int | None:
    """This process's resident memory (Linux's /proc/self/statm), None where it cannot be read."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")
