"""The layout of an rnnprof run directory, shared by the writer and every reader.

    RUN/
      manifest.json                               config, versions, devices, throughput, what was captured, status
      plugins/profile/<run>/<host>.xplane.pb      tf.profiler capture of the traced steps (TensorBoard profile)
      plugins/profile/<run>_devices/<host>.xplane.pb   XSpace built from step_stats: lines per device lane, step markers
      timelines/step-<N>.trace.json.gz            Chrome trace of traced step N, built from step_stats
      run_metadata/step-<N>.pb                    raw RunMetadata of traced step N (step_stats, partition graphs)
      graphs/graph.pb [graph.pbtxt]               user-level GraphDef: requested devices
      graphs/partitions/<k>_<device>.pb [.pbtxt]  partition graphs: assigned devices
      graphs/functions/<function>/...             TF2 function graphs (pre-optimization and partitions)
      critical-path.trace.json                    older versions' critical-path overlay (removed by --force; no longer written)
      torch/rank<r>.json.gz                       PyTorch runs: rank r's Kineto trace of its captured window

Chrome trace schema (``timelines/*.trace.json.gz``): ``{"traceEvents": [...], "displayTimeUnit": "ms",
"otherData": {"producer": "rnnprof", "version": 1, "step": N}}``. One process per device, whose
``process_name`` metadata is the full TF device string; one thread per lane (``thread_name``: "ops" for the
device's executor, "stream:<id>", "memcpy", ...). A thread holds only ops that do not overlap at all
(one may start as the previous one ends): an op that starts while another of its lane is still running,
nested in it or not, goes to the first free extra thread "ops/2", "ops/3", ... (a thread name before
the first "/" is the lane). Nothing nests in a thread, so viewers draw no call stacks that never
happened. Ops are ``"ph": "X"`` events, ts/dur in µs on the
wall clock, ``name`` = op type, ``args`` = {"name": node name, "op": op type, "step": N, "bytes": n (when known)}.
Cross-device transfers are flow events (``"ph": "s"``/``"f"``, ``"cat": "transfer"``): the
``"s"`` end sits just before the end of the op producing the tensor on the sending device, the ``"f"`` end
(``"bp": "e"``) just after the start of the first op consuming it on the receiving device; both carry
``args`` = {"tensor": rendezvous tensor name, "key": rendezvous key, "from": device, "to": device}.
Collectives (``CollectiveReduce`` and the like: ring all-reduce) are flow events with ``"cat": "collective"``
linking the instance's op on each member device to the same instance's op on the next member, in
device-name order (the order a ring passes its chunks): ``"s"`` just after the start of the sender's op, ``"f"``
just before the end of the receiver's; ``args`` = {"op", "group_key", "instance_key", "group_size", "from",
"to", "step"}. Every flow end lies inside its op (1 µs from the edge, or half-way for shorter ops), so a
viewer, which binds a flow end to the slice enclosing it on that thread, binds it to that op even where
a neighbouring op touches it.

Steps: ``traced_steps`` in the manifest are the steps run with FULL_TRACE (timelines, RunMetadata);
``profiled_steps`` are the later steps recorded by tf.profiler (the two cannot run at once). Step
numbers count every step the run executed, warm-up included, from 0.

PyTorch runs (``"framework": "torch"`` in the manifest) hold no timelines, graphs or XSpaces: each rank writes
its ``torch.profiler`` trace, ``ProfilerStep#N`` ranges marking its steps N (counted from 0 like TF steps), to
``torch/rank<r>.json.gz`` (``capture.torch_profiler.TorchCapture``); the manifest lists them under
``captured["kineto"]`` and the per-rank facts under ``ranks``.
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
CRITICAL_PATH_OVERLAY = "critical-path.trace.json"
TORCH_TRACES_DIR = "torch"
STATUS_COMPLETE = "complete"
STATUS_INTERRUPTED = "interrupted"
STATUS_RUNNING = "running"


def timeline_name(step: int) -> str:
    return f"step-{step}.trace.json.gz"


def torch_trace_name(rank: int) -> str:
    """Rank ``rank``'s Kineto trace in ``TORCH_TRACES_DIR``."""
    return f"rank{rank}.json.gz"


def run_metadata_name(step: int) -> str:
    return f"step-{step}.pb"


def is_run_dir(path: Path) -> bool:
    return Path(path, MANIFEST).is_file()
