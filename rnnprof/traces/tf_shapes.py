"""The shapes of a TensorFlow run's executed kernels, from its RunMetadata step stats: a side table like
``shapes.OpShapes`` for the roofline.

A traced step's ``run_metadata/step-N.pb`` records, per executed node, its kernel and inputs (``timeline_label``:
``node = Op(input, input:1, ...)``, the kernel that really ran, Grappler's and oneDNN's rewrites included) and
the shape and dtype of each output. An op's input shapes are its producers' output shapes; the op's own output is
appended last. Each operator is one host op of the run's event table (same node name and step), whose lane,
start and duration it takes; its ``own_time`` is its work (no GPU kernels are attributed).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from rnnprof import rundir
from rnnprof.errors import InputError
from rnnprof.events import EventTable, Kind
from rnnprof.traces import run_metadata
from rnnprof.traces.shapes import OpShapes, Signature

# tensorflow DataType enum -> the dtype names the FLOPs models read (as PyTorch records them)
_DTYPES = {1: "float", 2: "double", 3: "int", 4: "unsigned char", 5: "short int", 6: "signed char", 9: "long int",
           10: "bool", 14: "c10::BFloat16", 19: "c10::Half"}
# A node that allocated memory has, first, one "[<allocator> <total>MB <peak>MB] " per allocator (no peak where it
# is 0; TensorFlow's SetTimelineLabel): "[mklcpu 2.3MB 2.3MB] node = Op(...)", "[GPU_0_bfc 1.0MB] [cuda_host_bfc ..."
_ALLOCATED = r"\[[^\]]+? \d+\.\dMB(?: \d+\.\dMB)?\]\s*"
_LABEL = re.compile(rf"^\s*(?:{_ALLOCATED})*(?P<node>[^=]+?)\s*=\s*(?P<op>[A-Za-z0-9_.>-]+)\((?P<inputs>.*)\)\s*$",
                    re.S)


def _tensor(name: str) -> tuple[str, int]:
    node, _, slot = name.strip().lstrip("^").partition(":")
    return node, int(slot) if slot.isdigit() else 0


def _parse_label(label: str) -> tuple[str, str, list[tuple[str, int]]] | None:
    """(node, op, input tensors) of a step stats ``timeline_label`` ``node = Op(a, b:1, ^c)``; None for another form."""
    match = _LABEL.match(label or "")
    if match is None:
        return None
    inputs = [t for t in match.group("inputs").split(",") if t.strip()]
    return match.group("node"), match.group("op"), [_tensor(t) for t in inputs]


def _read(files) -> tuple[dict, dict]:
    """(node -> (op, [input tensors]), node -> {slot: (dims, dtype)}) over the step stats of ``files``."""
    kernels, outputs = {}, {}
    for path in files:
        meta = run_metadata.parse(path)
        for dev in meta.step_stats.dev_stats:
            for ns in dev.node_stats:
                for out in ns.output:
                    desc = out.tensor_description
                    if desc.HasField("shape") and not desc.shape.unknown_rank:
                        outputs.setdefault(ns.node_name, {})[out.slot] = (
                            [int(d.size) for d in desc.shape.dim], _DTYPES.get(int(desc.dtype), ""))
                parsed = _parse_label(ns.timeline_label)
                if parsed and parsed[0] == ns.node_name:
                    kernels[ns.node_name] = parsed[1:]
    return kernels, outputs


def load_tf_shapes(run_dir: str | Path, table: EventTable) -> OpShapes:
    """The executed kernels' shapes of a TensorFlow run directory, placed on its event ``table``'s host ops."""
    run_dir = Path(run_dir)
    files = sorted((run_dir / rundir.RUN_METADATA_DIR).glob("step-*.pb"))
    if not files:
        raise InputError(run_dir, f"no {rundir.RUN_METADATA_DIR}/step-N.pb", "a run directory with its traced "
                         "steps' RunMetadata (rnnprof trace)")
    kernels, outputs = _read(files)
    shapes = OpShapes(own_time=True)
    rows = np.flatnonzero(table.kind == Kind.HOST_OP)
    index: dict[tuple, int] = {}
    keep = []
    names = table.strings
    for row in rows.tolist():
        node = names[table.name[row]]
        kernel = kernels.get(node)
        produced = outputs.get(node, {}).get(0)
        if kernel is None or produced is None:
            continue
        op, inputs = kernel
        found = [outputs.get(n, {}).get(slot) for n, slot in inputs]
        if any(f is None for f in found):
            continue
        dims = [f[0] for f in found] + [produced[0]]
        types = [f[1] for f in found] + [produced[1]]
        key = (op, repr(dims), repr(types))
        k = index.get(key)
        if k is None:
            shapes.signatures.append(Signature(op, dims, types, None))
            k = index[key] = len(shapes.signatures) - 1
        shapes.sig.append(k)
        shapes.ordinal.append(len(keep))
        keep.append(row)
    keep = np.asarray(keep, dtype=np.int64)
    shapes.operators = int(len(rows))
    shapes.lane, shapes.ts, shapes.dur = table.lane[keep], table.ts[keep], table.dur[keep]
    shapes.step = table.step[keep]
    shapes.times_from = "table"
    return shapes


__all__ = ["load_tf_shapes"]
