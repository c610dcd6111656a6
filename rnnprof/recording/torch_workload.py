"""The capture sequence of the built-in PyTorch workload (``rnnprof trace --framework torch``).

The ranks run as ``rnnprof scale --framework torch`` runs them (``torch_ddp.run_ranks``: warm-up, timed
steps), then each profiles ``trace_steps`` more steps with ``TorchCapture`` into the one run directory,
which this parent process owns: it writes the manifest (framework, backend, world size, the ranks' trace
files, steps and FLOP estimates, per-rank and combined throughput of the timed steps, the config) and
its status says how the run ended, as for TensorFlow runs.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from pathlib import Path
from typing import Callable, Sequence

from rnnprof.analyzers.throughput import summarize
from rnnprof.errors import InterruptedRun, JobHung, RankFailed
from rnnprof.recording.hang_collect import ProbedRanks, remark_hung
from rnnprof.recording.hang_probe import FR_BUFFER, FR_BUFFER_ENV, RankProbe, remove_probe_files
from rnnprof.recording.hang_watch import HangOptions, HangWatch
from rnnprof.models.config import TorchOptions
from rnnprof.recording.workload import WorkloadCapture
from rnnprof.training.measure import StepResult
from rnnprof.recording.torch_profiler import TorchCapture
from rnnprof.rundir.manifest import process_versions
from rnnprof.rundir.writer import RunWriter, default_run_dir
from rnnprof.frameworks.torch import import_torch
from rnnprof.training import torch_ddp
from rnnprof.training.torch_ddp import CPU_PROCESSES, CaptureWindow, combine_ranks, ranks_per_batch, run_ranks


def capture_torch_workload(options: TorchOptions, out: str | Path | None, force: bool, command: Sequence[str],
                           trace_steps: int, worker: Callable[..., dict] | None = None,
                           hang: HangOptions = HangOptions()) -> WorkloadCapture:
    """Capture ``options``' workload into ``out`` (None: a fresh ``runs/rnnlm-<time>``); ``worker`` replaces
    each rank's ``torch_ddp.rank_main`` (tests plant failures with it); ``hang``: the hang watch's options
    (a hung job raises ``JobHung`` with the verdict, the run marked ``hung``).

    Ctrl-C or SIGTERM marks the run interrupted and raises ``InterruptedRun``; a failing rank
    (``RankFailed``, naming it) or any other failure is recorded in the manifest's ``error`` and raised.
    Either way the traces that ranks had written are listed.
    """
    from rnnprof.models.torch.rnnlm import lm_data

    torch = import_torch("--framework torch")
    config = options.workload
    lm_data(options)  # a bad --data file stops here, before a run directory exists
    writer = RunWriter(out or default_run_dir(config.model), command=command, force=force,
                       config=options.to_dict())
    writer.manifest["versions"] = process_versions()
    writer.update(framework="torch", world_size=config.devices, backend=None, ranks=[])
    window = CaptureWindow(str(writer.path), trace_steps, TorchCapture, probe=RankProbe,
                           environment=((FR_BUFFER_ENV, FR_BUFFER),))
    ranks = ProbedRanks(writer.path, config.devices)
    watch = HangWatch(writer.path, ranks, hang, on_hung=lambda verdict: _kill(ranks.live()))
    try:
        with writer.recording(), watch:
            results = run_ranks(options, worker=worker or torch_ddp.rank_main, capture=window)
            timed = _record_results(writer, options, results)
    except (RankFailed, InterruptedRun):
        if watch.verdict is None or not hang.stop:
            raise
        remark_hung(writer.path, watch.record)  # the writer closed the run as failed: it hung
        raise JobHung(f"hung: {watch.verdict.summary}; stopped; run directory: {writer.path}") from None
    finally:
        remove_probe_files(writer.path)
    return WorkloadCapture(path=writer.path, device_kind=writer.device_kind,
                           timed=timed, captured=writer.captured, layout=writer.manifest.get("parallel"))


def _kill(ranks: dict[int, int]) -> None:
    """A hung job's live ranks (rank -> pid) killed: the launch ends with a failure the caller turns into
    ``JobHung``. Blocked in a collective, a rank cannot act on SIGTERM."""
    for pid in ranks.values():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _rank_entry(result: dict) -> dict:
    """A rank in the manifest: its trace and window (``TorchCapture.facts``) and its own timed throughput."""
    facts = dict(result["capture"])
    own = summarize([StepResult(*record) for record in result["timed"]])
    facts["throughput"] = {"words_per_second": own.words_per_second, "words": own.words,
                           "total_seconds": own.total_seconds, "median_step_seconds": own.median_step_seconds}
    facts["traced_step_seconds"] = [record[0] for record in result["traced"]]
    facts["peak_memory"] = result["peak_memory"]
    facts["process_groups"] = result["process_groups"]
    return facts


def _record_results(writer: RunWriter, options: TorchOptions, results: list[dict]):
    """The run's devices, throughput, ranks and window in the manifest; returns the timed steps' summary."""
    from rnnprof.models.torch.rnnlm import WORDS_DEFINITION

    config = options.workload
    group_backend = results[0]["backend"]
    gpu = group_backend == "nccl"
    writer.set_devices([f"rank{r['rank']}/{'gpu' if gpu else 'cpu'}:0" for r in results], "gpu" if gpu else "cpu")
    share = ranks_per_batch(results)
    timed = combine_ranks([r["timed"] for r in results], share)
    warmup = combine_ranks([r["warmup"] for r in results], share)
    throughput = dataclasses.asdict(summarize(timed))
    throughput["words_definition"] = WORDS_DEFINITION
    throughput["step_definition"] = "the slowest rank's wall time of each timed step"
    if config.include_warmup:
        throughput["with_warmup"] = dataclasses.asdict(summarize(warmup + timed))
    if options.eval:
        throughput["eval"] = dataclasses.asdict(summarize(combine_ranks([r["eval"] for r in results], share)))
    ranks = [_rank_entry(r) for r in results]
    window = sorted({step for r in ranks for step in r["steps"]})
    writer.update(backend=group_backend, device_kind="gpu" if gpu else CPU_PROCESSES, ranks=ranks,
                  throughput=throughput, profiled_steps=window, parallel=results[0]["layout"],
                  step_times={"warmup": [s.seconds for s in warmup], "timed": [s.seconds for s in timed]})
    return summarize(timed)
