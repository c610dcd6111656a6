"""PyTorch data parallelism: N worker processes started by torchrun's elastic agent.

``run_ranks`` starts ``--devices`` processes through ``torch.distributed.launcher.api.elastic_launch``
(the agent behind ``torchrun --standalone``: a c10d rendezvous on a free local port, the environment
torchrun sets — RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Each rank joins the process
group (gloo on CPU, nccl where there are enough GPUs), runs the same warm-up + timed protocol
(``measure``) and returns its step records; ``torch_sweep`` combines the ranks' steps into the
``ScalePoint``s that TensorFlow runs give; each rank also logs its finished steps for the launching
process's progress bar (``torch_progress``). A rank that fails stops the others (the agent terminates
them) and becomes ``RankFailed`` naming it, after its traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import sys
import tempfile
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from rnnprof.analyzers.scale import MemoryFigures, ScalePoint
from rnnprof.analyzers.throughput import summarize
from rnnprof.models.config import TorchOptions
from rnnprof.errors import RankFailed, UsageError
from rnnprof.training.measure import StepCallback, StepResult, measure
from rnnprof.training.sweep import Progress, RunStages, Sweep, no_progress, no_stages, run_label
from rnnprof.training import torch_parallel
from rnnprof.training.torch_layout import plan_layout
from rnnprof.training.torch_memory import PeakMemory
from rnnprof.training.torch_progress import StepLog, combine_step, follow_steps
from rnnprof.frameworks.torch import import_torch
from rnnprof.training.torch_training import TorchTraining, no_phase

CPU_PROCESSES = "cpu-processes"  # the device kind of ranks that share the host's cores
STEP_DEFINITION = ("wall time of each timed step (forward, backward with the gradients' collectives, update) on "
                   "the slowest rank; warm-up batches are excluded")


@dataclass(frozen=True)
class CaptureWindow:
    """``rnnprof trace``: each rank profiles ``steps`` steps after its timed ones into ``run_dir``, with
    ``profiler`` (the capture's ``TorchCapture``, given by the capture layer: the run code does not import it)."""

    run_dir: str
    steps: int
    profiler: Callable[..., Any]
    probe: Callable[..., Any] | None = None  # the hang watch's RankProbe(run_dir, rank), given the same way
    environment: tuple[tuple[str, str], ...] = ()  # set in each rank unless set (the flight recorder's buffer)


@dataclass(frozen=True)
class RankJob:
    options: TorchOptions
    threads: int  # torch intra-op threads of each rank
    return_parameters: bool = False  # send each rank's parameters back after the run (tests)
    capture: CaptureWindow | None = None
    step_logs: str | None = None  # a folder where each rank logs its finished steps (torch_progress.StepLog)
    # rnnprof watch: ``watch(rank)``, a context manager around the rank's steps that measures each, given by the
    # capture layer; its ``environment`` is set in the rank as the capture's is
    watch: Callable[[int], Any] | None = None


class _CapturedSteps:
    """The training's steps, each followed by ``TorchCapture.step`` (outside the step's timing)."""

    def __init__(self, training, capture):
        self.training, self.capture = training, capture

    def step(self):
        result = self.training.step()
        self.capture.step()
        return result


class _Ticks:
    """``measure``'s ``on_step``: the step log's line, and the hang watch's count of finished steps."""

    def __init__(self, step_log, probe):
        self.step_log, self.probe = step_log, probe

    def __call__(self, phase: str, index: int, step) -> None:
        if self.step_log is not None:
            self.step_log(phase, index, step)
        if self.probe is not None:
            self.probe.tick()

    def after(self, result):
        if self.probe is not None:
            self.probe.tick()
        return result


def threads_per_process(processes: int, cores: int | None = None) -> int:
    """The host's cores split over the processes, at least one thread each."""
    cores = cores if cores is not None else (os.cpu_count() or 1)
    return max(1, cores // max(1, processes))


@dataclass(frozen=True)
class RankPlan:
    """What one rank runs on."""

    backend: str  # the process group's: nccl or gloo
    device: str  # the rank's torch device: cuda:<local rank> or cpu
    threads: int  # its torch intra-op threads


def rank_plan(world: int, local_rank: int, gpus: int, threads: int) -> RankPlan:
    """nccl and the rank's own GPU (``cuda:<local rank>``) where every rank of ``world`` can have one of the
    ``gpus`` visible, gloo and the CPU otherwise; ``threads`` intra-op threads either way."""
    if gpus > 0 and gpus >= world:
        return RankPlan(backend="nccl", device=f"cuda:{local_rank}", threads=threads)
    return RankPlan(backend="gloo", device="cpu", threads=threads)


def check_gpu_count(processes: int, gpus: int) -> None:
    """Where GPUs are visible, every process must have its own: more processes than GPUs is refused."""
    if gpus and processes > gpus:
        raise UsageError(f"--devices {processes} but only {gpus} GPU(s) are visible")


def torch_visible_gpus() -> int:
    """GPUs torch sees (0 without CUDA)."""
    torch = import_torch("--framework torch")
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _records(steps) -> list[tuple[float, int, float]]:
    return [(s.seconds, s.words, s.loss) for s in steps]


def rank_main(job: RankJob) -> dict:
    """One worker process: join the group, train with warm-up then timed batches, return the step records (and
    the rank's layout under ``--parallel`` and its peak memory over those steps)."""
    torch = import_torch("--framework torch")
    import torch.distributed as dist

    world = int(os.environ["WORLD_SIZE"])
    plan = rank_plan(world, int(os.environ.get("LOCAL_RANK", "0")), torch_visible_gpus(), job.threads)
    torch.set_num_threads(plan.threads)
    if plan.device.startswith("cuda"):
        torch.cuda.set_device(torch.device(plan.device))  # a device mesh's collectives run on the current GPU
    for name, value in (*(job.capture.environment if job.capture else ()), *(job.watch.environment if job.watch else ())):
        os.environ.setdefault(name, value)  # before the process group: torch reads it there
    dist.init_process_group(plan.backend)
    try:
        rank = dist.get_rank()
        torch_parallel.preload(plan_layout(job.options))
        peak = PeakMemory(torch, torch.device(plan.device))
        training = TorchTraining(job.options, rank=rank, device=plan.device, distributed=world > 1)
        result = {"rank": rank, "backend": plan.backend, "layout": training.layout.to_dict(),
                  "process_groups": training.groups, **_train(job, training, rank, peak)}
        if job.options.eval:
            config = job.options.workload
            e = measure(training.evaluation(), min(config.warmup, 1), config.batches)
            result["eval"] = _records(e.timed_steps)
        if job.return_parameters:
            result["parameters"] = training.parameters()
        if world > 1:
            dist.barrier()  # no rank leaves the group while another still trains
        return result
    finally:
        dist.destroy_process_group()


def _train(job: RankJob, training: TorchTraining, rank: int, peak: PeakMemory) -> dict:
    """Warm-up and timed steps (then the capture's window, with ``job.capture``): their records, the peak memory
    over the warm-up and timed steps, and the capture's facts."""
    config = job.options.workload
    runnable, capture = training, None
    if job.capture is not None:  # profiling starts with step 0; its window follows the timed steps
        capture = job.capture.profiler(job.capture.run_dir, rank, skip_steps=config.warmup + config.batches,
                                       steps=job.capture.steps)
        training.phase = capture.phase
        runnable = _CapturedSteps(training, capture)
    step_log = StepLog(job.step_logs, rank) if job.step_logs is not None else None
    probe = job.capture.probe(job.capture.run_dir, rank).install() if job.capture and job.capture.probe else None
    try:
        with job.watch(rank) if job.watch is not None else contextlib.nullcontext():
            m = measure(runnable, config.warmup, config.batches, on_step=_Ticks(step_log, probe))
        memory = peak.read(training.parameter_list, training.optimizer)
        traced = [_Ticks(None, probe).after(runnable.step()) for _ in range(job.capture.steps)] if capture else []
    finally:
        for done in (step_log, probe):
            if done is not None:
                done.close()
        if capture is not None:  # a failing step still ends the window and writes what it recorded
            training.phase = no_phase
            facts = capture.close()
    result = {"warmup": _records(m.warmup_steps), "timed": _records(m.timed_steps), "peak_memory": memory}
    if capture is not None:
        result.update(traced=_records(traced), capture=facts)
    return result


@contextlib.contextmanager
def _quiet_agent():
    """The agent logs every start and every failure; rnnprof reports a failure once, itself."""
    names = [name for name in list(logging.root.manager.loggerDict)
             if name.startswith(("torch.distributed.elastic", "torch.multiprocessing"))]
    loggers = [logging.getLogger(name) for name in ["torch.distributed.elastic", "torch.multiprocessing", *names]]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


@contextlib.contextmanager
def _workers_stderr():
    """File descriptor 2 goes to a file meanwhile, so the workers inherit that file as their stderr: what they
    write before their own redirection applies (a KeyboardInterrupt while they import torch, on Ctrl-C) is
    held. The caller sets ``held["keep"]`` to pass it on; a failure is reported from the rank's error file."""
    held = {"keep": False}
    try:
        saved = os.dup(2)
    except OSError:  # no stderr
        yield held
        return
    with tempfile.TemporaryFile() as file:
        sys.stderr.flush()
        os.dup2(file.fileno(), 2)
        try:
            yield held
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if held["keep"]:
                file.seek(0)
                text = file.read()
                if text:
                    os.write(2, text)


@contextlib.contextmanager
def _signal_handlers_kept():
    """The agent installs its own handler (one raising ``SignalException``) for each signal in
    ``TORCHELASTIC_SIGNALS_TO_HANDLE`` and never puts the previous one back: in the process that called rnnprof
    they would go on raising after the run, and its forked children (a ``multiprocessing`` pool) would catch
    the SIGTERM that should stop them. The handlers come back as they were."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    listed = os.environ.get("TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT").split(",")
    signums = {getattr(signal, name.strip(), None) for name in listed} - {None}
    previous = {signum: signal.getsignal(signum) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


@contextlib.contextmanager
def _temporary_files_in(folder: str):
    """Temporary files made meanwhile go to ``folder``: torch.multiprocessing names each worker's error file in
    the temporary directory and leaves the file of a failed worker there (pytorch-errorfile-*.pickle)."""
    saved = tempfile.tempdir
    tempfile.tempdir = folder
    try:
        yield
    finally:
        tempfile.tempdir = saved


def _stop_resource_tracker() -> None:
    """The spawned workers' queues start multiprocessing's resource tracker; it would outlive the run."""
    import gc
    from multiprocessing import resource_tracker

    gc.collect()  # the launch's queues release their semaphores first, or the tracker removes them under them
    tracker = getattr(resource_tracker, "_resource_tracker", None)
    if tracker is not None and hasattr(tracker, "_stop"):
        tracker._stop()


def _failure_summary(failure) -> tuple[str, str]:
    """(the rank's traceback, or what the agent saw of it; the last line, the exception)."""
    data = failure.error_file_data if isinstance(failure.error_file_data, dict) else {}
    detail = data.get("message", {})
    callstack = detail.get("extraInfo", {}).get("py_callstack") if isinstance(detail, dict) else None
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message", "") or str(message)
    text = str(callstack or message or "").rstrip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    last = lines[-1] if lines else f"exit code {failure.exitcode}"
    return text, last


SHUTDOWN_S = 5  # how long an interrupted run's worker that captures nothing has to exit before SIGKILL


def _shutdown_timeout(capture: CaptureWindow | None) -> int | None:
    """Seconds the agent gives each worker to exit once interrupted, before SIGKILL (None: torch's own, 30 s, or
    TORCH_ELASTIC_SHUTDOWN_TIMEOUT). A worker blocked in C++ (gloo's connect, while its peer is already gone)
    never sees the interrupt, and a run that captures nothing has nothing to write on the way out; a capture
    keeps the time to write its window."""
    if capture is not None or "TORCH_ELASTIC_SHUTDOWN_TIMEOUT" in os.environ:
        return None
    return SHUTDOWN_S


def _launch_config(processes: int, logs: str, capture: CaptureWindow | None):
    """The elastic agent's configuration: ``processes`` local workers, spawned, their output in ``logs``. A torch
    whose agent takes no ``shutdown_timeout`` (2.11 takes none) keeps its own: an interrupted worker gets 30 s."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.launcher.api import LaunchConfig

    timeout = {"shutdown_timeout": _shutdown_timeout(capture)} \
        if "shutdown_timeout" in {f.name for f in dataclasses.fields(LaunchConfig)} else {}
    return LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=processes, run_id=f"rnnprof-{uuid.uuid4().hex}",
                        rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=0.1,
                        start_method="spawn", logs_specs=DefaultLogsSpecs(log_dir=logs, redirects=Std.ALL), **timeout)


def run_ranks(options: TorchOptions, worker: Callable[[RankJob], dict] = rank_main,
              return_parameters: bool = False, capture: CaptureWindow | None = None,
              on_step: StepCallback | None = None, watch: Callable[[int], Any] | None = None) -> list[dict]:
    """Run ``worker`` in ``options.workload.devices`` processes; their results by rank (``capture``: each
    rank also profiles a window of steps after its timed ones, see ``rank_main``; ``on_step``: called in
    this process once per warm-up and timed step when every rank has finished it, see ``torch_progress``)."""
    import_torch("--framework torch")
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    from rnnprof.models.torch.rnnlm import lm_data

    processes = options.workload.devices
    check_gpu_count(processes, torch_visible_gpus())
    lm_data(options)  # a --data file that cannot be read is one line here, not N tracebacks
    plan_layout(options)  # a combination that cannot work is one line here (the flags were checked already)
    job = RankJob(options=options, threads=options.workload.intra_op_threads or threads_per_process(processes),
                  return_parameters=return_parameters, capture=capture, watch=watch)
    failure = interrupted = None
    try:
        # The workers' own output goes to files: a failure is reported from its error file, once, and the
        # KeyboardInterrupt every worker gets on Ctrl-C is not N tracebacks (see _workers_stderr).
        with tempfile.TemporaryDirectory(prefix="rnnprof-torch-") as logs, _temporary_files_in(logs), \
                _quiet_agent(), _signal_handlers_kept(), _workers_stderr() as held:
            if on_step is not None:
                job = dataclasses.replace(job, step_logs=os.path.join(logs, "steps"))
                os.mkdir(job.step_logs)
            launch = _launch_config(processes, logs, capture)
            with follow_steps(job.step_logs, processes, on_step, plan_layout(options).ranks_per_batch):
                results = elastic_launch(launch, worker)(job)
            held["keep"] = True
    except ChildFailedError as exc:
        failure = exc.get_first_failure()  # the exception (and the launch's queues in its frames) is freed below
    except (SignalException, KeyboardInterrupt):
        interrupted = True  # Ctrl-C or SIGTERM: the agent has stopped the workers
    _stop_resource_tracker()
    if interrupted:
        raise KeyboardInterrupt
    if failure is not None:
        rank, process_failure = failure
        text, last = _failure_summary(process_failure)
        if text:
            sys.stderr.write(f"rank {rank}:\n{text}\n")
            sys.stderr.flush()
        raise RankFailed(f"rank {rank} of {processes} failed: {last} (the other ranks were stopped)")
    return [results[rank] for rank in range(processes)]


def combine_ranks(per_rank: Sequence[Sequence[Sequence]], ranks_per_batch: int = 1) -> list[StepResult]:
    """Step i of the run from the ranks' ``(seconds, words, loss)`` records (``torch_progress.combine_step``)."""
    return [combine_step([StepResult(*record) for record in records], ranks_per_batch)
            for records in zip(*per_rank)]


def ranks_per_batch(results: Sequence[dict]) -> int:
    """How many ranks share each batch in the run whose rank results these are (``rank_main``'s layout)."""
    layout = results[0]["layout"]
    return layout["world"] // layout["data_ranks"]


def memory_figures(results: Sequence[dict]) -> MemoryFigures | None:
    """The ranks' peak memory and model state (``rank_main``'s ``peak_memory``), None where no rank has them."""
    figures = [r.get("peak_memory") or {} for r in results]
    if not any(figures):
        return None
    return MemoryFigures(peak_per_rank=tuple(f.get("bytes") for f in figures), source=figures[0].get("source", ""),
                         model_state_per_rank=tuple(f.get("model_state_bytes") for f in figures))


def torch_sweep(configs: Sequence[TorchOptions], progress: Progress = no_progress,
                on_warning: Callable[[str], None] = lambda warning: None, on_run: RunStages = no_stages) -> Sweep:
    """Measure every configuration in order (fresh processes each) and return one ``ScalePoint`` per configuration.
    ``progress(label, warmup, batches)`` gives each configuration's step callback, and ``on_run`` hears each
    configuration start and end, as ``sweep``'s do."""
    import_torch("--framework torch")
    from rnnprof.models.torch.rnnlm import WORDS_DEFINITION

    if not configs:
        raise ValueError("torch_sweep needs at least one configuration")
    points, device_kind = [], CPU_PROCESSES
    for index, options in enumerate(configs):
        config = options.workload
        label = run_label(config) + (f" --parallel {options.parallel}" if options.parallel != "ddp" else "")
        on_run(index, len(configs), label, None)
        results = run_ranks(options, on_step=progress(label, config.warmup, config.batches))
        group_backend = results[0]["backend"]
        device_kind = "gpu" if group_backend == "nccl" else CPU_PROCESSES
        share = ranks_per_batch(results)
        warmup = combine_ranks([r["warmup"] for r in results], share)
        timed = combine_ranks([r["timed"] for r in results], share)
        evaluation = combine_ranks([r["eval"] for r in results], share) if options.eval else None
        replicated = config.variable_update == "replicated"
        points.append(ScalePoint(
            variable_update=config.variable_update,
            all_reduce=f"DDP {group_backend}" if replicated and options.parallel == "ddp" else None,
            devices=config.devices,
            per_device_batch=config.per_device_batch(),
            total_batch=config.per_device_batch() * results[0]["layout"]["data_ranks"],
            parallel=options.parallel,
            layout=results[0]["layout"],
            memory=memory_figures(results),
            timed=summarize(timed),
            with_warmup=summarize(warmup + timed) if config.include_warmup else None,
            step_seconds=tuple(s.seconds for s in timed),
            warmup_step_seconds=tuple(s.seconds for s in warmup),
            eval_timed=summarize(evaluation) if evaluation else None,
        ))
        on_run(index, len(configs), label, points[-1])
    return Sweep(points=tuple(points), device_kind=device_kind, words_definition=WORDS_DEFINITION,
                 model=configs[0].workload.model, step_definition=STEP_DEFINITION)
