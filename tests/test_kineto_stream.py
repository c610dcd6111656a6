"""The streamed Kineto loader against a straightforward whole-document decode of the same JSON.

The stream cuts the events array into pieces at guessed boundaries and checks each guess by
decoding; these tests pin that the table never depends on where the cuts fall, including on
traces built to fool the guess (the boundary pattern inside strings and nested objects).
"""

import dataclasses
import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

from rnnprof.errors import InputError
from rnnprof.events import JsonCuts, TableMetadata
from rnnprof.traces import kineto

from fixtures import FIXTURES
KINETO = sorted(FIXTURES.glob("kineto-*.json.gz"))


CATEGORY = {"cpu_op": "HOST_OP", "cuda_runtime": "RUNTIME", "cuda_driver": "RUNTIME", "kernel": "KERNEL",
            "gpu_memcpy": "MEMCPY", "gpu_memset": "MEMSET", "user_annotation": "ANNOTATION",
            "python_function": "ANNOTATION", "gpu_user_annotation": "ANNOTATION"}
GPU = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}


def _doc(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def reference_rows(doc: dict) -> list[tuple]:
    """One tuple per kept event, in file order, from the whole document decoded by ``json``."""
    events = doc["traceEvents"]
    steps = sorted((e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1])) for e in events
                   if e.get("ph") == "X" and e.get("cat") in CATEGORY and e["cat"] not in GPU
                   and re.fullmatch(r"ProfilerStep#\d+", e.get("name", "")))
    rank = doc.get("distributedInfo", {}).get("rank")
    worker = f"rank{rank}/" if rank is not None else ""

    def step_at(ts):
        inside = [s for start, end, s in steps if start <= ts < end]
        return inside[-1] if inside else -1

    kept = [e for e in events if e.get("ph") == "X" and e.get("cat") in CATEGORY]
    launch_step = {}
    for e in kept:
        args = e.get("args") or {}
        if e["cat"] in ("cuda_runtime", "cuda_driver") and "correlation" in args:
            launch_step[args["correlation"]] = step_at(e["ts"])
    rows = []
    for e in kept:
        args = e.get("args") or {}
        on_gpu = e["cat"] in GPU
        kind = CATEGORY[e["cat"]]
        # NCCL's kernels and PyTorch's symmetric-memory all-reduce communicate
        if kind == "KERNEL" and re.search(r"^(?:void )?nccl(?:Dev)?Kernel|::multimem_all_reduce_kernel<", e["name"]):
            kind = "COMMUNICATION"
        correlation = args.get("correlation", args.get("External id", -1))
        if on_gpu:
            device = f"{worker}gpu:{args.get('device', e.get('pid'))}"
            lane = f"stream:{args.get('stream', e.get('tid'))}"
            # the step of its launch; none without its launch in the trace (or without step markers)
            step = launch_step.get(correlation, -1) if steps else -1
        else:
            device, lane, step = f"{worker}host", str(e.get("tid")), step_at(e["ts"])
        rows.append((float(e["ts"]), float(e.get("dur", 0)), e["name"], device, lane, kind, step,
                     correlation, int(args.get("bytes", -1))))  # ROCm writes bytes as text
    return rows


def table_rows(table) -> list[tuple]:
    names = table.text(table.name)
    lanes = table.text(table.lane)
    labels = [d.label for d in table.devices]
    return [(float(ts), float(dur), name, labels[dev], lane, kineto.Kind(kind).name, int(step), int(corr), int(nb))
            for ts, dur, name, dev, lane, kind, step, corr, nb in zip(
                table.ts, table.dur, names, table.device, lanes, table.kind, table.step, table.correlation,
                table.nbytes)]


def assert_same_table(a, b):
    assert len(a) == len(b)
    for column in ("ts", "dur", "device", "kind", "step", "correlation", "nbytes"):
        assert np.array_equal(getattr(a, column), getattr(b, column)), column
    for column in ("name", "op_type", "lane"):
        assert list(a.text(getattr(a, column))) == list(b.text(getattr(b, column))), column
    assert a.devices == b.devices
    assert _without_cuts(a.metadata) == _without_cuts(b.metadata)


def _without_cuts(metadata: TableMetadata) -> TableMetadata:
    return dataclasses.replace(metadata, json_cuts=JsonCuts())


@pytest.mark.parametrize("path", KINETO, ids=lambda p: p.name)
def test_streamed_table_equals_whole_document_decode_wherever_it_is_cut(path):
    """The stream's table holds the whole document's rows, and its pieces or blocks of any size give that table.
    (One test a trace: the document is decoded once, and each large trace costs seconds to decode.)"""
    doc = _doc(path)
    default = kineto.load(path)
    assert table_rows(default) == reference_rows(doc)
    every_event = kineto.load(path, piece_bytes=1)  # a guessed cut after every event
    assert_same_table(default, every_event)
    assert_same_table(default, kineto.load(path, block_bytes=777, piece_bytes=3000))
    exact_only = kineto.load(path, piece_bytes=1 << 30)  # no guesses: exact cuts only
    assert_same_table(default, exact_only)
    # On a well-formed trace the guesses hold: only the end of the array needs the exact cut.
    guessed = every_event.metadata.json_cuts
    assert guessed.guessed >= len(doc["traceEvents"]) - 2 and guessed.exact <= 2
    assert exact_only.metadata.json_cuts.guessed == 0


def test_odd_thread_stream_and_device_values_in_every_chunking(tmp_path):
    """Thread ids that are lists or objects, string devices, float streams, null args, and host and GPU events
    sharing a number: the same rows as the whole-document reference, whether a chunk holds one event (host-only
    and GPU chunks apart) or all of them (a chunk that mixes an unhashable tid with the others)."""
    def event(cat, name, ts, tid, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": 2.0, "args": args or None}

    events = [
        event("cpu_op", "ProfilerStep#7", 0.0, 7),
        event("cpu_op", "aten::mm", 1.0, [1, 2], **{"External id": 3}),
        event("cpu_op", "aten::add", 2.0, {"t": 1}),
        event("cuda_runtime", "cudaLaunchKernel", 3.0, 7, correlation=11, **{"External id": 3}),
        event("kernel", "gemm", 4.0, 7, correlation=11, device="1", stream=7),
        event("kernel", "gemm", 5.0, 9, correlation=12, stream=2.0),
        event("gpu_memcpy", "Memcpy HtoD", 6.0, 3, device=0, bytes=4096),
        event("cpu_op", "aten::mm", 7.0, 7),
        event("user_annotation", "ProfilerStep#8", 10.0, 7),
        event("cpu_op", "aten::add", 11.0, [1, 2]),
    ]
    doc = {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}, "deviceProperties": [],
           "traceEvents": events}
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(doc))
    expected = reference_rows(doc)
    assert table_rows(kineto.load(path)) == expected
    assert table_rows(kineto.load(path, piece_bytes=1)) == expected
    lanes = set(kineto.load(path).text(kineto.load(path).lane))
    assert {"7", "[1, 2]", "{'t': 1}", "stream:7", "stream:2.0", "stream:3"} <= lanes


def test_integers_beyond_int64_are_unknown_not_an_error(tmp_path, capsys):
    """A transfer of ``1e30`` bytes or a correlation id past int64 is read as unknown (-1), the rest of the event
    kept; the trace is analysed, not refused with an internal error."""
    events = [{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7, "ts": 10, "dur": 5,
               "args": {"device": 0, "stream": 7, "correlation": 1 << 70, "bytes": 1e30}},
              {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH", "pid": 0, "tid": 7, "ts": 20, "dur": 5,
               "args": {"device": 0, "stream": 7, "correlation": 2, "bytes": 4096}}]
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    table = kineto.load(path)
    assert sorted(table.nbytes.tolist()) == [-1, 4096]
    assert sorted(table.correlation.tolist()) == [-1, 2]
    from rnnprof.cli import main

    assert main(["comm", str(path)]) == 0, capsys.readouterr().err


def _tricky_trace(tmp_path: Path) -> Path:
    """The NCCL fixture with the boundary pattern planted where a cut would be wrong."""
    doc = _doc(FIXTURES / "kineto-2rank-nccl-rank0.json.gz")
    events = doc["traceEvents"]
    traps = ['x}, {"ph": "X", "cat": "kernel"', '}, {', '\\"}, {\\"', 'a\\\\}, {', '{"a": [1, {"b": "}, {"}]}']
    for i, e in enumerate(events):
        if e.get("cat") == "cpu_op" and i % 7 == 0:
            e["name"] = e["name"] + traps[i % len(traps)]
        if e.get("cat") == "cuda_runtime" and i % 5 == 0:
            e.setdefault("args", {})["nested"] = [{"k": "}, {"}, {"k": [{}, {}]}, {}]
    path = tmp_path / "tricky.json"
    # Kineto's own layout: one field per line, events separated by "},\n  {".
    path.write_text(json.dumps(doc, indent=2))
    return path


def test_boundary_pattern_inside_strings_and_nested_objects(tmp_path):
    path = _tricky_trace(tmp_path)
    table = kineto.load(path)
    assert table_rows(table) == reference_rows(_doc(path))
    for piece in (1, 200, 5000):
        again = kineto.load(path, block_bytes=4096, piece_bytes=piece)
        assert_same_table(table, again)
        cuts = again.metadata.json_cuts
        assert cuts.exact > 10 and cuts.guessed > 10  # wrong guesses were caught and cut exactly


def test_events_array_followed_by_a_long_tail(tmp_path):
    doc = _doc(FIXTURES / "kineto-sampled-rank1.json.gz")
    doc["zzTail"] = [{"a": i, "b": "}, {"} for i in range(20000)]  # boundary patterns after the array
    path = tmp_path / "tail.json"
    path.write_text(json.dumps(doc))
    table = kineto.load(path, block_bytes=65536, piece_bytes=2048)
    assert table_rows(table) == reference_rows(doc)


@pytest.mark.parametrize("cut", [0.3, 0.97])
def test_truncated_events_array_is_an_input_error(tmp_path, cut):
    data = gzip.decompress((FIXTURES / "kineto-2rank-nccl-rank0.json.gz").read_bytes())
    path = tmp_path / "cut.json"
    path.write_bytes(data[:int(len(data) * cut)])
    with pytest.raises(InputError, match="cut off|malformed"):
        kineto.load(path, piece_bytes=4096)
