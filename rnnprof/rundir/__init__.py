"""The layout of an rnnprof run directory, shared by the writer and every reader.

    RUN/
      manifest.json                               config, versions, devices, throughput, captured files, status
      plugins/profile/<run>/<host>.xplane.pb      tf.profiler capture of the profiled steps (TensorBoard)
      plugins/profile/<run>_devices/<host>.xplane.pb   XSpace built from step_stats, lines per device lane
      timelines/step-<N>.trace.json.gz            Chrome trace of traced step N, built from step_stats
      run_metadata/step-<N>.pb                    raw RunMetadata of traced step N
      graphs/graph.pb, partitions/, functions/    user graph, partition graphs, TF2 function graphs
      torch/rank<r>.json.gz, .flight-recorder     PyTorch runs: rank r's Kineto trace of its window, its entries
      hang/                                       a hung job: each rank's stacks, flight recorder, the verdict
      series/, windows/, anomalies.jsonl          rnnprof watch: the ranks' step series, windows, anomalies

What each file holds, the timelines' schema (lanes, ops, transfer and collective arrows) and the step
numbering (``traced_steps``, ``profiled_steps``): docs/run-directory.md.
"""

from __future__ import annotations

import re
from pathlib import Path

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "rnnprof-run"
MANIFEST_VERSION = 1
PROFILE_DIR = Path("plugins") / "profile"
DEVICES_RUN_SUFFIX = "_devices"
TIMELINES_DIR = "timelines"
RUN_METADATA_DIR = "run_metadata"
GRAPHS_DIR = "graphs"
GRAPH_FILE = "graph.pb"
PARTITIONS_DIR = "partitions"
FUNCTIONS_DIR = "functions"
CRITICAL_PATH_OVERLAY = "critical-path.trace.json"
TORCH_TRACES_DIR = "torch"
# in a timeline's otherData and the manifest: the tasks whose fetches from other tasks TensorFlow timed none of
UNTIMED_FETCHES = "untimed_fetches"
STATUS_COMPLETE = "complete"
STATUS_INTERRUPTED = "interrupted"
STATUS_RUNNING = "running"
STATUS_HUNG = "hung"  # the job stopped making progress (rnnprof trace's hang watch)
HANG_DIR = "hang"
HANG_SCOPE_PROCESS = "process"  # the manifest's hang.scope when the job is one TensorFlow process
HANG_SCOPE_REMOTE = "remote_cluster"  # ... a TensorFlow cluster of tasks started elsewhere: the chief's stacks only


def timeline_name(step: int) -> str:
    return f"step-{step}.trace.json.gz"


_TIMELINE = re.compile(r"step-(\d+)\.trace\.json\.gz$")


def timeline_step(name: str) -> int | None:
    """The step of a timeline's file (its name or path, as ``timeline_name`` names it), else None."""
    found = _TIMELINE.search(name)
    return int(found.group(1)) if found else None


def torch_trace_name(rank: int) -> str:
    """Rank ``rank``'s Kineto trace in ``TORCH_TRACES_DIR``."""
    return f"rank{rank}.json.gz"


FLIGHT_RECORDER_SUFFIX = ".flight-recorder"  # not .json: folders of rank traces are globbed for *.json (HTA too)
_KINETO_SUFFIXES = (".json.gz", ".json")


def flight_recorder_beside(trace: str | Path) -> Path:
    """Where the flight recorder's entries of a Kineto trace's window are, beside it: ``rank0.json.gz`` ->
    ``rank0.flight-recorder``."""
    trace = Path(trace)
    name = next((trace.name[:-len(s)] for s in _KINETO_SUFFIXES if trace.name.endswith(s)), trace.name)
    return trace.with_name(name + FLIGHT_RECORDER_SUFFIX)


def run_metadata_name(step: int) -> str:
    return f"step-{step}.pb"


def is_run_dir(path: Path) -> bool:
    return Path(path, MANIFEST).is_file()


# rnnprof watch (docs/commands/watch.md)
SERIES_DIR = "series"
WINDOWS_DIR = "windows"
ANOMALIES = "anomalies.jsonl"
VERDICT = "verdict.json"  # in a window's folder: what its analysis found
WINDOW_REQUEST = ".request.json"  # in WINDOWS_DIR: the window the ranks are asked to capture next
CAPTURE_ASKS = ".asks"  # in WINDOWS_DIR: a window asked for from another terminal (rnnprof watch --capture RUN)
_SERIES = re.compile(r"rank(\d+)\.jsonl$")


def series_name(rank: int | str) -> str:
    """Rank ``rank``'s series file in ``SERIES_DIR`` (``"*"``: the pattern of every rank's)."""
    return f"rank{rank}.jsonl"


def series_rank(name: str) -> int | None:
    found = _SERIES.search(name)
    return int(found.group(1)) if found else None


_WINDOW = re.compile(r"^\d+-step(\d+)$")


def window_first_step(name: str) -> int | None:
    """The first step of the window whose folder is ``name`` (as ``window_name`` names it), else None."""
    found = _WINDOW.match(name)
    return int(found.group(1)) if found else None


def window_name(number: int, first_step: int) -> str:
    """Capture window ``number``'s folder in ``WINDOWS_DIR``: ``003-step1207``."""
    return f"{number:03d}-step{first_step}"
