"""The layout of an rnnprof run directory, shared by the writer and every reader.

    RUN/
      manifest.json                               config, versions, devices, throughput, what was captured, status
      plugins/profile/<run>/<host>.xplane.pb      tf.profiler capture of the traced steps (TensorBoard profile)
      plugins/profile/<run>_devices/<host>.xplane.pb   XSpace built from step_stats, one line per device
      timelines/step-<N>.trace.json.gz            Chrome trace of traced step N, built from step_stats
      run_metadata/step-<N>.pb                    raw RunMetadata of traced step N (step_stats, partition graphs)
      graphs/graph.pb [graph.pbtxt]               user-level GraphDef: requested devices
      graphs/partitions/<k>_<device>.pb [.pbtxt]  partition graphs: assigned devices
      graphs/functions/<function>/...             TF2 function graphs (pre-optimization and partitions)

Chrome trace schema (``timelines/*.trace.json.gz``): ``{"traceEvents": [...], "displayTimeUnit": "ms",
"otherData": {"producer": "rnnprof", "version": 1, "step": N}}``. One process per device, whose
``process_name`` metadata is the full TF device string; one thread per lane (``thread_name``: "ops" for the
device's executor, "stream:<id>", "memcpy", ...). Ops are ``"ph": "X"`` events, ts/dur in µs on the
wall clock, ``name`` = op type, ``args`` = {"name": node name, "op": op type, "step": N, "bytes": n (when known)}.
Cross-device transfers are flow events (``"ph": "s"``/``"f"``, ``"cat": "transfer"``).
"""

from __future__ import annotations

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
STATUS_COMPLETE = "complete"
STATUS_INTERRUPTED = "interrupted"
STATUS_RUNNING = "running"


def timeline_name(step: int) -> str:
    return f"step-{step}.trace.json.gz"


def run_metadata_name(step: int) -> str:
    return f"step-{step}.pb"


def is_run_dir(path: Path) -> bool:
    return Path(path, MANIFEST).is_file()
