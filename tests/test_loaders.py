"""Trace loaders on the real fixtures; expected counts are derived here from the raw JSON."""

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from rnnprof.cli import main
from rnnprof.errors import InputError
from rnnprof.events import Alignment, Device, Kind, Manifest
from rnnprof.traces import detect_format, load_events
from rnnprof.traces import kineto
from rnnprof.rundir.manifest import capture_notes

from fixtures import FIXTURES
KINETO_NCCL = FIXTURES / "kineto-2rank-nccl-rank0.json.gz"
KINETO_R0 = FIXTURES / "kineto-sampled-rank0.json.gz"
KINETO_R1 = FIXTURES / "kineto-sampled-rank1.json.gz"
TF1_GPU_LOOP = FIXTURES / "tf1-timeline-gpu-loop-step0.json"
TF1_GPU_MATMUL = FIXTURES / "tf1-timeline-gpu-matmul.json"
TF1_CPU_LOOP = FIXTURES / "tf1-timeline-cpu-loop-step0.json"



def raw_events(path):
    """The trace's ``traceEvents`` from its raw JSON, gzipped or not (``path``: a path or its text)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def kineto_expected(path):
    """(device label, kind name) -> count, straight from the JSON."""
    cats = {"cpu_op": "HOST_OP", "cuda_runtime": "RUNTIME", "cuda_driver": "RUNTIME", "kernel": "KERNEL",
            "gpu_memcpy": "MEMCPY", "gpu_memset": "MEMSET", "user_annotation": "ANNOTATION",
            "python_function": "ANNOTATION", "gpu_user_annotation": "ANNOTATION"}
    gpu_cats = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}
    counts = Counter()
    for e in raw_events(path):
        if e.get("ph") != "X" or e.get("cat") not in cats:
            continue
        kind = cats[e["cat"]]
        if kind == "KERNEL" and e["name"].startswith("nccl"):
            kind = "COMMUNICATION"
        device = f"gpu:{e['args'].get('device', e['pid'])}" if e["cat"] in gpu_cats else "host"
        counts[(device, kind)] += 1
    return counts


def table_counts(table, strip_worker=True):
    labels = [d.label.split("/")[-1] if strip_worker else d.label for d in table.devices]
    return Counter((labels[d], Kind(k).name) for d, k in zip(table.device, table.kind))


@pytest.mark.parametrize("path", [KINETO_NCCL, KINETO_R0, KINETO_R1])
def test_kineto_counts_per_device_match_raw_json(path):
    table = load_events(path)
    assert table.source_format == "kineto"
    assert table_counts(table) == kineto_expected(path)
    rank = json.loads(json.dumps(raw_events(path) and _header(path)))["distributedInfo"]["rank"]
    assert {d.worker for d in table.devices} == {f"rank{rank}"}


def _header(path):
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    doc.pop("traceEvents")
    return doc


def test_a_committed_trace_decoded_once_for_the_tests_is_handed_out_as_a_copy():
    """The tests read tests/data's traces through ``fixtures.decode_each_trace_once``: what one test does to its
    table never reaches the next, whose table is still the file's, as a fresh decode gives it."""
    assert kineto.load.__name__ == "load_once"  # conftest installed it
    first = kineto.load(KINETO_NCCL)
    first.ts[:] = -1.0
    first.metadata.json_bytes = 0
    again = kineto.load(KINETO_NCCL)
    fresh = kineto.load(KINETO_NCCL, block_bytes=1 << 16)  # other sizes: always decoded
    assert again is not first and np.array_equal(again.ts, fresh.ts) and (again.ts >= 0).all()
    assert again.metadata.json_bytes == fresh.metadata.json_bytes > 0


def test_kineto_streaming_is_independent_of_block_size():
    whole = kineto.load(KINETO_NCCL)
    chunked = kineto.load(KINETO_NCCL, block_bytes=4096)  # thousands of chunk boundaries
    assert len(whole) == len(chunked)
    for column in ("ts", "dur", "kind", "step", "correlation", "nbytes"):
        assert np.array_equal(getattr(whole, column), getattr(chunked, column)), column
    assert list(whole.text(whole.name)) == list(chunked.text(chunked.name))


def test_kineto_steps_from_profiler_step_ranges():
    table = load_events(KINETO_NCCL)
    raw = raw_events(KINETO_NCCL)
    spans = sorted((e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1]))
                   for e in raw if e.get("name", "").startswith("ProfilerStep#"))
    assert list(table.steps()) == [s for _, _, s in spans]
    # Host ops: the step whose range holds their start.
    expected = Counter()
    for e in raw:
        if e.get("ph") == "X" and e.get("cat") == "cpu_op":
            for start, end, s in spans:
                if start <= e["ts"] < end:
                    expected[s] += 1
    host_ops = table.of_kind(Kind.HOST_OP)
    assert Counter(int(s) for s in host_ops.step if s >= 0) == expected
    # Kernels: the step of the runtime call with the same correlation id.
    launch_step = {}
    for e in raw:
        if e.get("ph") == "X" and e.get("cat") == "cuda_runtime":
            for start, end, s in spans:
                if start <= e["ts"] < end:
                    launch_step[e["args"]["correlation"]] = s
    expected_kernels = Counter(launch_step[e["args"]["correlation"]] for e in raw
                               if e.get("cat") == "kernel" and e["args"]["correlation"] in launch_step)
    kernels = table.of_kind(Kind.KERNEL, Kind.COMMUNICATION)
    assert Counter(int(s) for s in kernels.step if s >= 0) == expected_kernels


def test_kineto_nccl_kernels_are_communication():
    table = load_events(KINETO_NCCL)
    comm = table.of_kind(Kind.COMMUNICATION)
    names = set(comm.text(comm.name))
    assert names and all(n.startswith("ncclKernel_") for n in names)
    kernels = table.of_kind(Kind.KERNEL)
    assert not any(n.startswith("nccl") for n in kernels.text(kernels.name))


def test_two_ranks_merge_with_absolute_alignment():
    merged = load_events([KINETO_R0, KINETO_R1])
    r0, r1 = load_events(KINETO_R0), load_events(KINETO_R1)
    assert len(merged) == len(r0) + len(r1)
    assert {d.worker for d in merged.devices} == {"rank0", "rank1"}
    assert Device("gpu", 1, "rank1") in merged.devices
    assert merged.ts.min() == min(r0.ts.min(), r1.ts.min())  # same clock: not shifted
    assert merged.metadata.alignment == Alignment("absolute")  # merged on the recorded clocks: no offsets


def tf1_expected(path):
    """Per (device, kind) from the raw TF1 timeline: Compute lanes are ops, stream:N kernels, memcpy copies."""
    events = raw_events(path)
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    by_lane = {}
    for e in events:
        if e.get("ph") == "X":
            by_lane.setdefault(names[e["pid"]], []).append(e)
    copies = {(e["name"], e["ts"], e["dur"]) for lane, evs in by_lane.items() if lane.endswith("/memcpy Compute")
              for e in evs}
    counts = Counter()
    for lane, evs in by_lane.items():
        dev = re.search(r"(cpu|gpu):(\d+)", lane)
        device = f"{dev.group(1)}:{dev.group(2)}"
        if "/stream:all" in lane:
            continue
        if "/stream:" in lane:
            counts[(device, "KERNEL")] += sum((e["name"], e["ts"], e["dur"]) not in copies for e in evs)
        elif lane.endswith("/memcpy Compute"):
            counts[(device, "MEMCPY")] += len(evs)
        elif lane.endswith(" Compute"):
            counts[(device, "HOST_OP")] += len(evs)
    return +counts


@pytest.mark.parametrize("path", [TF1_GPU_LOOP, TF1_GPU_MATMUL, TF1_CPU_LOOP])
def test_tf1_timeline_counts_match_raw_json(path):
    table = load_events(path)
    assert table.source_format == "tf1-timeline"
    assert table_counts(table) == tf1_expected(path)


def test_tf1_stream_all_is_not_double_counted():
    table = load_events(TF1_GPU_LOOP)
    events = raw_events(TF1_GPU_LOOP)
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    all_lane = [e for e in events if e.get("ph") == "X" and names[e["pid"]].startswith("/gpu:0/stream:all")]
    assert all_lane  # the fixture does repeat kernels there
    kernels = table.of_kind(Kind.KERNEL)
    assert "stream:all" not in set(kernels.text(kernels.lane))
    keys = Counter(zip(kernels.text(kernels.name), kernels.ts))
    assert max(keys.values()) == 1  # every kernel once
    assert table.metadata.dropped_stream_all == len(all_lane)


def test_tf1_ops_keep_node_names_and_op_types():
    table = load_events(TF1_CPU_LOOP)
    ops = dict(zip(table.text(table.name), table.text(table.op_type)))
    events = raw_events(TF1_CPU_LOOP)
    expected = {e["args"]["name"]: e["args"]["op"] for e in events if e.get("ph") == "X"}
    assert ops == expected


def _write_rnnprof_run(root: Path, steps, listed=None, status="complete"):
    """A run directory following rundir's schema: 2 CPU devices, one with two executor threads."""
    devices = ["/job:localhost/replica:0/task:0/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:1"]
    (root / "timelines").mkdir(parents=True)
    for step in steps:
        trace = []
        for pid, device in enumerate(devices, 1):
            trace.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": device}})
            trace.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 1, "args": {"name": "ops"}})
            trace.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 2, "args": {"name": "ops/2"}})
            for k in range(3 + pid):
                trace.append({"ph": "X", "cat": "op", "name": "MatMul", "pid": pid, "tid": 1 + k % 2,
                              "ts": 1000.0 * step + 10 * k, "dur": 5.0,
                              "args": {"name": f"layer/{k}/MatMul", "op": "MatMul", "step": step, "bytes": 64}})
        trace.append({"ph": "X", "cat": "op", "name": "_Send", "pid": 1, "tid": 1, "ts": 1000.0 * step + 90,
                      "dur": 1.0, "args": {"name": "send", "op": "_Send", "step": step}})
        doc = {"traceEvents": trace, "displayTimeUnit": "ms",
               "otherData": {"producer": "rnnprof", "version": 1, "step": step}}
        with gzip.open(root / "timelines" / f"step-{step}.trace.json.gz", "wt") as f:
            json.dump(doc, f)
    listed = steps if listed is None else listed
    manifest = {"format": "rnnprof-run", "version": 1, "status": status, "traced_steps": list(listed),
                "captured": {"timelines": [f"timelines/step-{s}.trace.json.gz" for s in listed]}}
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def test_run_directory_timelines(tmp_path):
    run = _write_rnnprof_run(tmp_path / "run", [3, 4])
    assert detect_format(run) == "rundir"
    table = load_events(run)
    assert list(table.steps()) == [3, 4]
    counts = table_counts(table)
    assert counts[("cpu:0", "HOST_OP")] == 2 * 4 and counts[("cpu:1", "HOST_OP")] == 2 * 5
    assert counts[("cpu:0", "COMMUNICATION")] == 2  # _Send
    assert set(table.text(table.lane)) == {"ops"}  # "ops/2" is a second thread of lane "ops"
    assert table.nbytes.max() == 64
    assert table.metadata.missing == ()


def test_interrupted_run_reads_what_exists(tmp_path):
    run = _write_rnnprof_run(tmp_path / "run", [0], listed=[0, 1], status="interrupted")
    table = load_events(run)
    assert list(table.steps()) == [0]
    assert table.metadata.missing == ("timelines/step-1.trace.json.gz",)
    interrupted, missing = table.metadata.warnings
    assert "interrupted" in interrupted and "(step 0)" in interrupted and "step-1.trace.json.gz" in missing


def test_capture_notes_say_which_steps_the_figures_cover(tmp_path):
    def notes(path, manifest: dict, missing):
        return capture_notes(path, Manifest.from_dict(manifest), missing)

    assert notes(tmp_path, {"status": "complete", "traced_steps": [2, 3]}, []) == []
    interrupted = notes(tmp_path, {"status": "interrupted", "traced_steps": [2, 3, 5]},
                        ["timelines/step-3.trace.json.gz"])
    assert len(interrupted) == 2
    assert "interrupted" in interrupted[0] and "2 traced step(s) (steps 2, 5)" in interrupted[0]
    assert "1 timeline(s)" in interrupted[1] and "step-3.trace.json.gz" in interrupted[1]
    killed = notes(tmp_path, {"status": "running", "traced_steps": [4, 5, 6]}, [])
    assert len(killed) == 1 and '"running"' in killed[0] and "killed" in killed[0] and "steps 4-6" in killed[0]
    scattered = notes(tmp_path, {"status": "interrupted", "traced_steps": list(range(0, 2000, 2))}, [])
    assert "1000 traced step(s) (steps 0, 2, 4, 6, 8, 10, 12, 14, ... 1998)" in scattered[0]
    odd = notes(tmp_path, {"status": "paused"}, [])
    assert len(odd) == 1 and "'paused'" in odd[0] and "no traced step" in odd[0]
    many_missing = notes(tmp_path, {"status": "complete"}, [f"timelines/step-{k}.trace.json.gz"
                                                           for k in range(100)])
    assert len(many_missing) == 1 and "100 timeline(s)" in many_missing[0] and "(95 more)" in many_missing[0]
    assert "status is missing" in notes(tmp_path, {}, [])[0]


@pytest.mark.parametrize("command", ["count-ops", "comm", "placement-audit"])
def test_analyses_note_a_partial_run_on_stderr_and_keep_stdout_json(tmp_path, capsys, command):
    complete = _write_rnnprof_run(tmp_path / "complete", [0, 1])
    assert main([command, "--json", str(complete)]) in (0, 1)
    out, err = capsys.readouterr()
    json.loads(out)
    assert err == ""
    partial = _write_rnnprof_run(tmp_path / "partial", [0], listed=[0, 1], status="interrupted")
    assert main([command, "--json", str(partial)]) in (0, 1)
    out, err = capsys.readouterr()
    json.loads(out)
    notes = err.splitlines()
    assert [line.split(":")[0] for line in notes] == ["note", "note"], err
    assert "interrupted" in notes[0] and "1 traced step(s) (step 0)" in notes[0]
    assert "step-1.trace.json.gz" in notes[1]


def test_no_note_when_the_analysis_fails(tmp_path, capsys):
    run = _write_rnnprof_run(tmp_path / "run", [], listed=[0], status="interrupted")
    assert main(["comm", str(run)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1  # the error alone


def test_run_without_any_timeline_is_an_input_error(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"status": "interrupted", "traced_steps": [0]}))
    with pytest.raises(InputError, match="no readable timeline"):
        load_events(run)


def _truncated(tmp_path, source, name, keep=0.5):
    data = source.read_bytes()
    target = tmp_path / name
    target.write_bytes(data[: int(len(data) * keep)])
    return target


def _write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


@pytest.mark.parametrize("make", [
    lambda tmp: _truncated(tmp, KINETO_NCCL, "cut.json.gz"),
    lambda tmp: _truncated(tmp, TF1_GPU_LOOP, "cut.json"),
    lambda tmp: _write(tmp, "plain.json", gzip.decompress(KINETO_R0.read_bytes())[:200000]),
    lambda tmp: _write(tmp, "notes.txt", "hello, this is not a trace\n"),
    lambda tmp: _write(tmp, "binary.pb", bytes(range(256)) * 4),
    lambda tmp: _write(tmp, "other.json", json.dumps({"a": [1, 2, 3]})),
    lambda tmp: _write(tmp, "empty.json", ""),
])
def test_bad_inputs_fail_with_one_line_and_exit_2(tmp_path, capsys, make):
    path = make(tmp_path)
    with pytest.raises(InputError):
        load_events(path)
    assert main(["count-ops", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert str(path) in err and "Traceback" not in err


def test_unknown_format_names_the_formats_tried(tmp_path):
    path = tmp_path / "x.bin"
    path.write_bytes(b"\x00\x01garbage")
    with pytest.raises(InputError) as info:
        load_events(path)
    assert "Kineto" in str(info.value) and "xplane" in str(info.value) and "TF timeline" in str(info.value)


def test_json_loaders_do_not_import_tensorflow():
    import subprocess
    import sys

    code = ("import sys; from rnnprof.traces import load_events; "
            f"[load_events(p) for p in {[str(KINETO_R0), str(TF1_GPU_LOOP)]!r}]; "
            "from rnnprof.cli import main; main(['count-ops', '--json', %r]); "
            "assert 'tensorflow' not in sys.modules" % str(TF1_CPU_LOOP))
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_steps_in_spans_takes_the_marker_an_event_starts_in():
    from rnnprof.events import steps_in_spans

    spans = [(100.0, 200.0, 7), (0.0, 50.0, 6)]  # unsorted on purpose
    ts = np.array([-1.0, 0.0, 49.9, 50.0, 99.0, 100.0, 199.0, 200.0])
    assert steps_in_spans(ts, spans).tolist() == [-1, 6, 6, -1, -1, 7, 7, -1]
    assert steps_in_spans(ts, []).tolist() == [-1] * len(ts)


def test_match_correlation_links_each_id_to_its_partner():
    from rnnprof.events import match_correlation

    keys = np.array([30, 10, 20, -1])
    index = match_correlation(keys, np.array([20, 10, 99, -1, 30]))
    assert index.tolist() == [2, 1, -1, -1, 0]
    assert match_correlation(np.array([], dtype=np.int64), np.array([1])).tolist() == [-1]


# -- formats: recognised from their first bytes, parsed once ---------------------------------------

SEEDS = Path(__file__).parent / "fuzz_seeds"  # real captures, cut down (see make_seeds.py)
# What each real file is, from its provenance (tests/data/README.md, fuzz_seeds/make_seeds.py).
REAL_FILES = {
    KINETO_NCCL: "kineto", KINETO_R0: "kineto", KINETO_R1: "kineto",
    TF1_GPU_LOOP: "chrome-json", TF1_GPU_MATMUL: "chrome-json", TF1_CPU_LOOP: "chrome-json",
    SEEDS / "rnnprof-timeline.trace.json.gz": "chrome-json",
    SEEDS / "devices.xplane.pb": "xplane", SEEDS / "profiler.xplane.pb": "xplane",
    SEEDS / "step-2.pb": "run-metadata", SEEDS / "graph.pb": "graphdef", SEEDS / "graph.pbtxt": "graphdef-text",
}


def _graph_only_run_metadata(tmp_path):
    """The real RunMetadata seed without its step stats, and a TF2-style one holding function graphs."""
    from tensorboard.compat.proto import config_pb2, graph_pb2

    meta = config_pb2.RunMetadata.FromString((SEEDS / "step-2.pb").read_bytes())
    meta.ClearField("step_stats")
    partitions = tmp_path / "partitions.pb"
    partitions.write_bytes(meta.SerializeToString())
    functions = config_pb2.RunMetadata()
    fg = functions.function_graphs.add()
    fg.pre_optimization_graph.CopyFrom(graph_pb2.GraphDef.FromString((SEEDS / "graph.pb").read_bytes()))
    fg.partition_graphs.add().CopyFrom(meta.partition_graphs[0])
    (tmp_path / "functions.pb").write_bytes(functions.SerializeToString())
    return {partitions: "run-metadata-graphs", tmp_path / "functions.pb": "run-metadata-graphs"}


def _folders(tmp_path):
    run = _write_rnnprof_run(tmp_path / "run", [0])
    xplanes = tmp_path / "logdir" / "plugins" / "profile" / "run"
    xplanes.mkdir(parents=True)
    (xplanes / "host.xplane.pb").write_bytes((SEEDS / "profiler.xplane.pb").read_bytes())
    graphs_only = tmp_path / "exported"
    (graphs_only / "graphs").mkdir(parents=True)
    (graphs_only / "graphs" / "graph.pb").write_bytes((SEEDS / "graph.pb").read_bytes())
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for name in ("kineto-sampled-rank0.json.gz", "kineto-sampled-rank1.json.gz"):
        (ranks / name).write_bytes((FIXTURES / name).read_bytes())
    return {run: "rundir", tmp_path / "logdir": "xplane-dir", graphs_only: "graphs-dir", ranks: "rank-folder"}


def test_every_real_file_and_folder_is_sniffed_as_exactly_one_format(tmp_path):
    from rnnprof.traces.registry import REGISTRY, probe

    inputs = {**REAL_FILES, **_graph_only_run_metadata(tmp_path), **_folders(tmp_path)}
    assert {f.name for f in REGISTRY} == set(inputs.values())  # every format is exercised
    for path, expected in inputs.items():
        target = probe(path)
        assert [f.name for f in REGISTRY if f.sniff(target)] == [expected], path


def test_sniffing_reads_only_the_first_bytes(tmp_path):
    """A file cut to its first 64 KB is still recognised: the sniffs never need the rest."""
    from rnnprof.traces.jsonstream import read_prefix
    from rnnprof.traces.registry import REGISTRY, probe

    for path, expected in REAL_FILES.items():
        head = tmp_path / ("head-" + path.name.replace(".gz", ""))
        head.write_bytes(read_prefix(path))
        assert [f.name for f in REGISTRY if f.sniff(probe(head))] == [expected], path


class ParseCounter:
    """Counts ``ParseFromString`` on TF's proto classes (and text-format parses) by the bytes parsed."""

    def __init__(self, monkeypatch):
        from google.protobuf import text_format
        from tensorboard.compat.proto import config_pb2, graph_pb2

        from rnnprof.traces.xplane import xplane_pb2

        self.calls = Counter()
        for cls in (config_pb2.RunMetadata, graph_pb2.GraphDef, xplane_pb2().XSpace):
            original = cls.ParseFromString

            def parse(message, data, original=original, name=cls.__name__):
                self.calls[(name, hash(bytes(data)))] += 1
                return original(message, data)

            monkeypatch.setattr(cls, "ParseFromString", parse)
        original_text = text_format.Parse

        def parse_text(text, message, *args, **kwargs):
            self.calls[("text", hash(text))] += 1
            return original_text(text, message, *args, **kwargs)

        monkeypatch.setattr(text_format, "Parse", parse_text)

    def of(self, *paths) -> Counter:
        """Parses per (proto, file) for the given files; keys of anything else parsed are kept as they are."""
        names = {hash(p.read_bytes()): p.name for p in paths}
        names.update({hash(p.read_text(errors="replace")): p.name for p in paths if p.suffix == ".pbtxt"})
        return Counter({(kind, names.get(h, h)): n for (kind, h), n in self.calls.items()})


def test_detecting_a_format_parses_nothing(monkeypatch):
    counter = ParseCounter(monkeypatch)
    for path in REAL_FILES:
        try:
            detect_format(path)
        except InputError:
            pass  # graph files: not a trace format
    assert counter.calls == Counter()


@pytest.mark.parametrize("name, proto", [("devices.xplane.pb", "XSpace"), ("profiler.xplane.pb", "XSpace"),
                                         ("step-2.pb", "RunMetadata")])
def test_loading_a_protobuf_trace_parses_it_once(monkeypatch, name, proto):
    counter = ParseCounter(monkeypatch)
    assert len(load_events(SEEDS / name)) > 0
    assert counter.of(SEEDS / name) == Counter({(proto, name): 1})


@pytest.mark.parametrize("name, proto", [("step-2.pb", "RunMetadata"), ("graph.pb", "GraphDef"),
                                         ("graph.pbtxt", "text")])
def test_count_ops_parses_each_protobuf_once_for_events_and_graphs(monkeypatch, name, proto):
    from rnnprof.commands.count_ops import analyze_input

    counter = ParseCounter(monkeypatch)
    result = analyze_input([str(SEEDS / name)])
    assert result.runtime_graph.available or result.user_graph.available
    assert result.kernels.available == (name == "step-2.pb")  # the RunMetadata's step stats
    assert counter.of(SEEDS / name) == Counter({(proto, name): 1})


@pytest.mark.parametrize("one_run", [False, True], ids=["count-ops", "placement-audit"])
def test_reading_a_run_directory_parses_each_graph_file_once(tmp_path, monkeypatch, one_run):
    from test_count_ops import _run_with_graphs

    from rnnprof.inputs.read import read_inputs

    run = _run_with_graphs(tmp_path)
    files = sorted((run / "graphs").rglob("*.pb"))
    counter = ParseCounter(monkeypatch)
    inputs = read_inputs([str(run)], one_run=one_run)
    graphs = inputs.graph if one_run else inputs.graph_set.user
    assert inputs.events is not None and graphs is not None and graphs.number_of_nodes() > 0
    assert counter.of(*files) == Counter({("GraphDef", f.name): 1 for f in files})


def test_kineto_trace_recognised_only_once_decoded_is_not_read_again(tmp_path, monkeypatch):
    """Kineto keys pushed past the first 64 KB: the file is Chrome JSON to the sniffs, Kineto once decoded,
    and its decoded events are used as they are instead of streaming the file a second time."""
    doc = json.loads(gzip.decompress(KINETO_R0.read_bytes()))
    padding = [{"ph": "i", "name": "pad", "cat": "pad", "ts": 0, "pid": 0, "tid": 0}] * 2000
    late = {"traceEvents": padding + doc.pop("traceEvents"), **doc}  # the header after the events
    path = tmp_path / "late-keys.json"
    path.write_text(json.dumps(late))
    assert detect_format(path) == "chrome-json"
    monkeypatch.setattr(kineto, "EventStream", None)  # streaming the file again would fail
    table = load_events(path)
    assert table.source_format == "kineto"
    assert table_counts(table) == kineto_expected(KINETO_R0)
    assert {d.worker for d in table.devices} == {"rank0"}  # distributedInfo, read from the decoded header
