"""TensorFlow ``RunMetadata`` protos (``run_metadata/step-N.pb``, ``functions.pb``): step_stats and graphs.

One parse gives both: the step stats as events (through the same conversion as rnnprof's timelines, so
lanes, kinds and the handling of GPU stream records are identical to reading
``timelines/step-N.trace.json.gz``) and the graphs (``partition_graphs``: runtime graphs;
``function_graphs``: a function's pre-optimization graph is a user graph, its partitions runtime graphs).

Recognised from the first bytes: RunMetadata fields only, and either step_stats whose first device is a TF
device string (``/job:...``, ``/device:...``; format "run-metadata") or, without such step stats, a
partition or function graph that starts like a GraphDef (format "run-metadata-graphs").
"""

from __future__ import annotations

import re
from pathlib import Path

from rnnprof.errors import InputError
from rnnprof.events import EventTable
from rnnprof.traces import wire
from rnnprof import rundir
from rnnprof.rundir.chrome_trace import step_stats_to_chrome
from rnnprof.rundir.manifest import applied_offsets, read_manifest
from rnnprof.traces import tf_chrome
from rnnprof.traces.formats import GraphDefs
from rnnprof.traces.graphdef import looks_like_graph, plausible
from rnnprof.traces.jsonstream import read_content
from rnnprof.traces.messages import GRAPHS_EXPECTED, UNREADABLE

FORMAT = "tf-run-metadata"
_STEP = re.compile(r"step-(\d+)\.pb$")
# RunMetadata: step_stats, cost_graph, partition_graphs, function_graphs, session_metadata.
_FIELDS = {k: wire.LEN for k in range(1, 6)}
_DEVICE_STATS_FIELDS = {1: wire.LEN, 2: wire.LEN, 3: wire.LEN}  # device, node_stats, thread_names
_DEVICES = (b"/job:", b"/device:")
# FunctionGraphs: partition_graphs (1), pre_optimization_graph (3), post_optimization_graph (4) are GraphDefs.
_FUNCTION_GRAPH_FIELDS = (1, 3, 4)


def _first_device(prefix: bytes) -> bytes | None:
    """``step_stats.dev_stats[0].device``, as far as the prefix shows it."""
    step_stats = wire.first(prefix, 1)
    dev_stats = wire.first(step_stats, 1) if step_stats else None
    if not dev_stats or not wire.only(dev_stats, _DEVICE_STATS_FIELDS):
        return None
    return wire.first(dev_stats, 1)


def sniff(probe) -> bool:
    if probe.is_dir or not wire.only(probe.prefix, _FIELDS):
        return False
    device = _first_device(probe.prefix)
    return device is not None and device.startswith(_DEVICES)


def sniff_graphs_only(probe) -> bool:
    """A RunMetadata without step stats of a TF device, holding a graph (e.g. TF2's ``functions.pb``)."""
    if probe.is_dir or not wire.only(probe.prefix, _FIELDS) or sniff(probe):
        return False
    for field in wire.fields(probe.prefix):
        if field.number == 3 and looks_like_graph(field.value):
            return True
        if field.number == 4 and any(f.number in _FUNCTION_GRAPH_FIELDS and f.wire_type == wire.LEN
                                     and looks_like_graph(f.value) for f in wire.fields(field.value)):
            return True
    return False


def parse(path: Path):
    """The RunMetadata proto: the one full parse of the file."""
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto import config_pb2

    meta = config_pb2.RunMetadata()
    data = read_content(Path(path))
    try:
        meta.ParseFromString(data)
    except (DecodeError, ValueError) as exc:
        raise InputError(path, f"not a readable RunMetadata ({exc})", "a complete RunMetadata .pb") from None
    return meta


def events(path: Path, meta) -> EventTable:
    path = Path(path)
    match = _STEP.search(path.name)
    step = int(match.group(1)) if match else -1
    doc = step_stats_to_chrome(meta.step_stats, step, list(meta.partition_graphs), _run_offsets(path))
    return tf_chrome.load_doc(path, doc, FORMAT, step=step)


def _run_offsets(path: Path) -> dict[str, float]:
    """The clock offsets the capture applied to its timelines, when ``path`` lies in a run directory's
    ``run_metadata/``: each task's step stats are on its own clock and are aligned before merging."""
    run = path.parent.parent
    if path.parent.name != rundir.RUN_METADATA_DIR or not rundir.is_run_dir(run):
        return {}
    try:
        return applied_offsets(read_manifest(run).clock_offsets)
    except InputError:
        return {}


def graph_defs(path: Path, meta):
    """``partition_graphs`` are runtime graphs; each function's pre-optimization graph is a user graph and
    its partitions runtime graphs."""
    found = GraphDefs()
    if not (meta.partition_graphs or meta.function_graphs) or not all(plausible(g) for g in meta.partition_graphs):
        raise InputError(path, UNREADABLE, GRAPHS_EXPECTED)
    for k, g in enumerate(meta.partition_graphs):
        found.runtime.append((f"{path}#partition_graphs[{k}]", g, ""))
    for k, fg in enumerate(meta.function_graphs):
        if fg.pre_optimization_graph.node or fg.pre_optimization_graph.library.function:
            found.user.append((f"{path}#function_graphs[{k}].pre_optimization_graph", fg.pre_optimization_graph, ""))
        for j, g in enumerate(fg.partition_graphs):
            found.runtime.append((f"{path}#function_graphs[{k}].partition_graphs[{j}]", g, ""))
    return found
