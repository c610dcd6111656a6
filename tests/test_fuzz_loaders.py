"""Fuzzing the loaders with mutated real traces: every input either loads or is an ``InputError``.

Seeds are real: the shared fixtures (TF1 timelines, Kineto traces cut to a few dozen events of
each category) and a real ``rnnprof trace`` capture cut down in ``tests/fuzz_seeds``. Mutations:
byte flips, truncations, insertions, deletions, JSON structural edits (values of the wrong type,
deleted keys, duplicated events, hostile strings), gzip around mutated content, and run
directories with files deleted, corrupted or replaced. Hypothesis runs derandomized, so a CI
failure reproduces locally.
"""

from __future__ import annotations

import collections
import collections.abc
import copy
import functools
import gzip
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rnnprof.errors import InputError
from rnnprof import rundir
from rnnprof.traces import graphs
from rnnprof.traces import load_events

from fixtures import FIXTURES
SEEDS = Path(__file__).parent / "fuzz_seeds"
FUZZ = settings(derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
PER_KINETO_CATEGORY = 12
MIN_MUTATIONS = 1000
EXECUTED: collections.Counter = collections.Counter()  # fuzz test -> examples that ran to the end


def _kineto_slice(path: Path) -> bytes:
    """A valid Kineto document: the real header and the first events of each category."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    kept, seen = [], {}
    for event in doc["traceEvents"]:
        key = (event.get("ph"), event.get("cat"))
        if seen.get(key, 0) < PER_KINETO_CATEGORY or (event.get("name") or "").startswith("ProfilerStep#"):
            seen[key] = seen.get(key, 0) + 1
            kept.append(event)
    doc["traceEvents"] = kept
    return json.dumps(doc).encode()


class _Seeds(collections.abc.Mapping):
    """Seed name -> its bytes, each made when a test first reads it: collecting the tests reads only the names
    (cutting the Kineto traces takes seconds, on every xdist worker)."""

    def __init__(self, makers: dict):
        self._makers, self._made = makers, {}

    def __getitem__(self, name: str) -> bytes:
        if name not in self._made:
            self._made[name] = self._makers[name]()
        return self._made[name]

    def __iter__(self):
        return iter(self._makers)

    def __len__(self) -> int:
        return len(self._makers)


def _json_seeds() -> _Seeds:
    makers = {p.name: p.read_bytes for p in sorted(FIXTURES.glob("tf1-*.json"))}
    makers.update({p.name.replace(".gz", ""): functools.partial(_kineto_slice, p)
                   for p in sorted(FIXTURES.glob("kineto-*.json.gz"))})
    timeline = SEEDS / "rnnprof-timeline.trace.json.gz"
    makers["rnnprof-timeline.trace.json"] = lambda: gzip.decompress(timeline.read_bytes())
    return _Seeds(makers)


JSON_SEEDS = _json_seeds()
PROTO_SEEDS = {p.name: p.read_bytes() for p in sorted(SEEDS.glob("*.pb*"))}
TRACE_PROTOS = ("devices.xplane.pb", "profiler.xplane.pb", "step-2.pb")
GRAPH_PROTOS = ("graph.pb", "graph.pbtxt", "step-2.pb")



@pytest.fixture(scope="module")
def work():
    with tempfile.TemporaryDirectory(prefix="rnnprof-fuzz-") as d:
        yield Path(d)


# -- checks ---------------------------------------------------------------------------------------


def _expect_events_or_input_error(path: Path, root: Path):
    try:
        table = load_events(path)
    except InputError as exc:
        _check_message(exc, root)
        return None
    assert len(table) > 0, f"{path}: loaded an empty table instead of saying so"
    return table


def _expect_graphs_or_input_error(path: Path, root: Path):
    try:
        return graphs.load_graph_set(path)
    except InputError as exc:
        _check_message(exc, root)
        return None


def _check_message(exc: InputError, root: Path) -> None:
    text = str(exc)
    assert "\n" not in text, f"error is not one line: {text!r}"
    assert str(root) in exc.path or exc.path.startswith("("), f"error does not name the file: {text!r}"
    assert exc.problem


# -- mutations ------------------------------------------------------------------------------------

INTERESTING_STRINGS = ["", "X", "M", "kernel", "cpu_op", "cuda_runtime", "ac2g", "ProfilerStep#7",
                       "ProfilerStep#99999999999999999999", "/device:GPU:0", "/host:CPU", "stream:7",
                       "/job:localhost/replica:0/task:0/device:CPU:0 Compute", "/gpu:0/stream:all",
                       "process_name", "thread_name", "rnnprof", "\u0000", "\ud7ff\u00ff", "nccl:all_reduce"]
SCALARS = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(INTERESTING_STRINGS)
           | st.text(max_size=6))
JSON_VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.sampled_from(["ph", "cat", "name", "args", "pid", "tid", "ts", "dur",
                                                              "step", "device", "stream", "traceEvents"]) | st.text(max_size=4),
                                             inner, max_size=3), max_leaves=6)


def mutate_bytes(data: bytes, draw) -> bytes:
    op = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "overwrite", "duplicate"]))
    n = len(data)
    at = draw(st.integers(0, max(0, n - 1)))
    if op == "flip":
        flips = draw(st.lists(st.tuples(st.integers(0, max(0, n - 1)), st.integers(1, 255)), min_size=1, max_size=8))
        buf = bytearray(data)
        for pos, mask in flips:
            if buf:
                buf[pos] ^= mask
        return bytes(buf)
    if op == "truncate":
        return data[:at]
    if op == "insert":
        return data[:at] + draw(st.binary(min_size=1, max_size=16) | st.sampled_from(
            [b"{", b"}", b"[", b"]", b'"', b",", b"\\", b'"traceEvents":[', b"\xff\xfe", b"\x1f\x8b"])) + data[at:]
    if op == "delete":
        return data[:at] + data[at + draw(st.integers(1, 64)):]
    if op == "overwrite":
        chunk = draw(st.binary(min_size=1, max_size=32))
        return data[:at] + chunk + data[at + len(chunk):]
    end = min(n, at + draw(st.integers(1, 256)))
    return data[:end] + data[at:end] + data[end:]


def _containers(value, out):
    if isinstance(value, dict):
        out.append(value)
        for v in value.values():
            _containers(v, out)
    elif isinstance(value, list):
        out.append(value)
        for v in value:
            _containers(v, out)
    return out


def mutate_json(doc, draw):
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, 4))):
        containers = _containers(doc, [])
        target = containers[draw(st.integers(0, len(containers) - 1))]
        op = draw(st.sampled_from(["replace", "delete", "duplicate", "add", "retype"]))
        keys = list(target) if isinstance(target, dict) else list(range(len(target)))
        if not keys:
            op = "add"
        if op == "add":
            if isinstance(target, dict):
                target[draw(st.sampled_from(["args", "ph", "cat", "ts", "dur", "otherData", "distributedInfo"]))] = \
                    draw(JSON_VALUES)
            else:
                target.append(draw(JSON_VALUES))
            continue
        key = keys[draw(st.integers(0, len(keys) - 1))]
        if op == "replace":
            target[key] = draw(JSON_VALUES)
        elif op == "delete":
            del target[key]
        elif op == "duplicate":
            if isinstance(target, list):
                target.extend([copy.deepcopy(target[key])] * draw(st.integers(1, 3)))
            else:
                target[key] = [target[key], copy.deepcopy(target[key])]
        else:  # same content, another JSON type
            value = target[key]
            target[key] = str(value) if not isinstance(value, str) else [value]
    return doc


def _write(path: Path, data: bytes, gzipped: bool) -> Path:
    path.write_bytes(gzip.compress(data, mtime=0) if gzipped else data)
    return path


# -- the fuzz tests -----------------------------------------------------------------------------


@settings(FUZZ, max_examples=260)
@given(name=st.sampled_from(sorted(JSON_SEEDS) or ["-"]), gzipped=st.booleans(), data=st.data())
def test_fuzz_json_bytes(work, name, gzipped, data):
    mutated = mutate_bytes(JSON_SEEDS[name], data.draw)
    _expect_events_or_input_error(_write(work / ("b-" + name + (".gz" if gzipped else "")), mutated, gzipped), work)
    EXECUTED["test_fuzz_json_bytes"] += 1


@settings(FUZZ, max_examples=300)
@given(name=st.sampled_from(sorted(JSON_SEEDS) or ["-"]), gzipped=st.booleans(), data=st.data())
def test_fuzz_json_structure(work, name, gzipped, data):
    doc = mutate_json(json.loads(JSON_SEEDS[name]), data.draw)
    raw = json.dumps(doc).encode()
    if data.draw(st.booleans()):
        raw = mutate_bytes(raw, data.draw)  # a structural edit and a byte-level one together
    _expect_events_or_input_error(_write(work / ("s-" + name + (".gz" if gzipped else "")), raw, gzipped), work)
    EXECUTED["test_fuzz_json_structure"] += 1


@settings(FUZZ, max_examples=300)
@given(name=st.sampled_from(sorted(PROTO_SEEDS)), gzipped=st.booleans(), data=st.data())
def test_fuzz_protobufs(work, name, gzipped, data):
    path = _write(work / name, mutate_bytes(PROTO_SEEDS[name], data.draw), gzipped and name in TRACE_PROTOS)
    if name in TRACE_PROTOS:
        _expect_events_or_input_error(path, work)
    if name in GRAPH_PROTOS:
        _expect_graphs_or_input_error(path, work)
    EXECUTED["test_fuzz_protobufs"] += 1


RUN_FILES = {
    f"{rundir.TIMELINES_DIR}/step-2.trace.json.gz": SEEDS / "rnnprof-timeline.trace.json.gz",
    f"{rundir.RUN_METADATA_DIR}/step-2.pb": SEEDS / "step-2.pb",
    f"{rundir.GRAPHS_DIR}/graph.pb": SEEDS / "graph.pb",
    f"{rundir.PROFILE_DIR}/run_devices/host.xplane.pb": SEEDS / "devices.xplane.pb",
    f"{rundir.PROFILE_DIR}/run/host.xplane.pb": SEEDS / "profiler.xplane.pb",
}


@settings(FUZZ, max_examples=150)
@given(data=st.data())
def test_fuzz_run_directories(work, data):
    """Run directories with files missing, corrupted, replaced by folders or by symlinks that lead nowhere (a
    loop, a dangling link), and odd manifests."""
    run = work / "run"
    shutil.rmtree(run, ignore_errors=True)
    manifest = json.loads((SEEDS / "manifest.json").read_text())
    manifest["captured"] = {"timelines": [next(iter(RUN_FILES))], "run_metadata": [], "graphs": [], "xplane": []}
    for rel, source in RUN_FILES.items():
        fate = data.draw(st.sampled_from(["keep", "keep", "missing", "corrupt", "folder", "loop", "dangling"]),
                         label=rel)
        target = run / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if fate == "keep":
            shutil.copy(source, target)
        elif fate == "corrupt":
            target.write_bytes(mutate_bytes(source.read_bytes(), data.draw))
        elif fate == "folder":
            target.mkdir()
        else:
            target.symlink_to(target.name if fate == "loop" else work / "nowhere")
    manifest_fate = data.draw(st.sampled_from(["keep", "mutate", "bytes", "missing", "folder", "loop"]))
    text = json.dumps(manifest).encode()
    if manifest_fate == "mutate":
        text = json.dumps(mutate_json(manifest, data.draw)).encode()
    elif manifest_fate == "bytes":
        text = mutate_bytes(text, data.draw)
    if manifest_fate == "folder":
        (run / rundir.MANIFEST).mkdir()
    elif manifest_fate == "loop":
        (run / rundir.MANIFEST).symlink_to(rundir.MANIFEST)
    elif manifest_fate != "missing":
        (run / rundir.MANIFEST).write_bytes(text)
    _expect_events_or_input_error(run, work)
    _expect_graphs_or_input_error(run, work)
    EXECUTED["test_fuzz_run_directories"] += 1


def test_seeds_load_before_mutation(work):
    """The fuzzing starts from inputs that load, so mutations probe real parsing paths."""
    for name, raw in JSON_SEEDS.items():
        assert len(load_events(_write(work / name, raw, False))) > 0, name
    for name in TRACE_PROTOS:
        assert len(load_events(_write(work / name, PROTO_SEEDS[name], False))) > 0, name
    for name in GRAPH_PROTOS:
        found = graphs.load_graph_set(_write(work / name, PROTO_SEEDS[name], False))
        assert found.user is not None or found.runtime is not None, name


@settings(FUZZ, max_examples=60)
@given(name=st.sampled_from(sorted(JSON_SEEDS) or ["-"]), data=st.data())
def test_fuzz_commands_end_to_end(work, name, data, capsys):
    """Mutated traces through the analyses too: a report (exit 0) or one error line (exit 2)."""
    from rnnprof.cli import main

    path = _write(work / ("c-" + name), json.dumps(mutate_json(json.loads(JSON_SEEDS[name]), data.draw)).encode(),
                  False)
    for command in ("comm", "count-ops", "placement-audit"):
        code = main([command, str(path), "--json"])
        out, err = capsys.readouterr()
        if code == 0:
            assert json.loads(out)
        else:
            assert code == 2 and len(err.strip().splitlines()) == 1 and str(path) in err, err
    EXECUTED["test_fuzz_commands_end_to_end"] += 1


# -- impossible times -------------------------------------------------------------------------------

PLANTED_REASONS = ("negative duration", "outside the trace's time range")


@settings(FUZZ, max_examples=60)
@given(name=st.sampled_from(sorted(n for n in JSON_SEEDS if n != "rnnprof-timeline.trace.json")), data=st.data())
def test_fuzz_impossible_times_are_left_out_and_counted(work, name, data):
    """Events given a negative duration or a time 10^18 µs away: every one is left out, counted under its reason,
    and the table keeps every other event. (A NaN or infinite time is not valid JSON: the JSON loaders refuse
    the file in one line, as the byte fuzzing checks.)"""
    from rnnprof.traces.left_out import left_out_of

    doc = json.loads(JSON_SEEDS[name])
    clean = load_events(_write(work / ("clean-" + name), json.dumps(doc).encode(), False))
    kept = collections.Counter(zip(clean.text(clean.name), clean.ts.tolist()))
    base = clean.time_base_us
    # events of the clean table, found in the document by name and start (unique, so the count is exact)
    candidates = [i for i, e in enumerate(doc["traceEvents"])
                  if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))
                  and e["dur"] > 0 and kept.get((e.get("name"), float(e["ts"]) - base)) == 1
                  and not str(e.get("name", "")).startswith("ProfilerStep#")]
    if len(candidates) < 10:
        return
    reasons = PLANTED_REASONS
    chosen = data.draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=3, unique=True))
    planted = collections.Counter()
    for i in chosen:
        reason = data.draw(st.sampled_from(reasons))
        event = doc["traceEvents"][i]
        if reason == "negative duration":
            event["dur"] = -event["dur"]
        else:
            event["ts"] = event["ts"] + 1e18
        planted[reason] += 1
    table = load_events(_write(work / ("times-" + name), json.dumps(doc).encode(), False))
    counts = left_out_of(table.metadata)
    assert {r: n for r, n in counts.items() if n} == dict(planted)
    assert len(table) + sum(counts.values()) == len(clean)
    assert np.isfinite(table.ts).all() and np.isfinite(table.dur).all() and (table.dur >= 0).all()
    EXECUTED["test_fuzz_impossible_times_are_left_out_and_counted"] += 1


# after every fuzz test of the module (a test runs in the order of the file)
def test_fuzzing_ran_at_least_1000_mutations():
    """Hypothesis may stop early (an exhausted search space, a changed setting): count what really ran."""
    fuzzers = {name for name in globals() if name.startswith("test_fuzz_")}
    if set(EXECUTED) != fuzzers:
        pytest.skip(f"only {sorted(EXECUTED)} of the fuzz tests ran in this session")
    assert sum(EXECUTED.values()) >= MIN_MUTATIONS, dict(EXECUTED)
