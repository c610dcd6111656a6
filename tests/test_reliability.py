"""Reliability and safety across commands: bad input is one line and exit 2, limits hold,
nothing the user made is overwritten, and nothing read from a trace is executed."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

import rnnprof
from rnnprof.cli import main
from rnnprof.errors import InputError, InterruptedRun, UsageError
from rnnprof import limits
from rnnprof import rundir
from rnnprof.rundir.writer import RunWriter, check_out_dir, default_run_dir, prepare_out_dir, safe_name

from fixtures import FIXTURES
SEEDS = Path(__file__).parent / "fuzz_seeds"
TF1 = FIXTURES / "tf1-timeline-gpu-matmul.json"
KINETO = FIXTURES / "kineto-sampled-rank0.json.gz"
ANALYSES = ("count-ops", "placement-audit", "comm")
TF1_DEVICE = "/job:localhost/replica:0/task:0/device:CPU:0 Compute"


def _tf1(events) -> bytes:
    meta = {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": TF1_DEVICE}}
    return json.dumps({"traceEvents": [meta, *events]}).encode()


def _kineto(events, **header) -> bytes:
    return json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": 0}, **header, "traceEvents": events}).encode()


def _run_dir(root: Path, manifest: bytes | None, files: dict[str, bytes | None]) -> Path:
    run = root / "run"
    run.mkdir()
    if manifest is not None:
        (run / rundir.MANIFEST).write_bytes(manifest)
    for rel, data in files.items():
        (run / rel).parent.mkdir(parents=True, exist_ok=True)
        if data is None:
            (run / rel).mkdir()
        else:
            (run / rel).write_bytes(data)
    return run


KERNEL = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2, "args": {"device": 0}}
# name -> (files to create: path -> bytes, a directory when None; the argument; text the error must hold)
BAD_INPUTS = {
    "empty": ({"t.json": b""}, "t.json", "is empty"),
    "whitespace": ({"t.json": b" \n\t "}, "t.json", "is empty"),
    "binary": ({"t.bin": bytes(range(256)) * 4}, "t.bin", "matches no trace"),
    "json-scalar": ({"t.json": b"42"}, "t.json", "matches no trace"),
    "json-not-a-trace": ({"t.json": b'{"hello": [1, 2]}'}, "t.json", "not a trace"),
    "truncated-json": ({"t.json": TF1.read_bytes()[:5000]}, "t.json", "not valid JSON"),
    "invalid-utf8": ({"t.json": _tf1([{"ph": "X", "pid": 1, "name": "x"}]).replace(b'"x"', b'"\xff\xfe"')},
                     "t.json", "not valid JSON"),
    "nesting-bomb": ({"t.json": b'{"traceEvents": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"},
                     "t.json", "JSON"),
    "args-wrong-type": ({"t.json": _tf1([{"ph": "M", "name": "thread_name", "pid": [1], "args": "zz"},
                                         {"ph": "X", "pid": [1], "tid": {}, "ts": "a", "name": "MatMul",
                                          "args": [1]}])}, "t.json", "no op or kernel events"),
    "no-events": ({"t.json": _tf1([])}, "t.json", "no op or kernel events"),
    "kineto-only-flows": ({"t.json": _kineto([{"ph": "s", "cat": "ac2g", "id": 1, "ts": 1}] * 3)},
                          "t.json", "no profiler events"),
    "kineto-list-stream": ({"t.json": _kineto([{**KERNEL, "args": {"device": [0], "stream": {"a": 1}}}])},
                           "t.json", "malformed trace event"),
    "kineto-truncated": ({"t.json": _kineto([KERNEL] * 3)[:-10]}, "t.json", "cut off"),
    "gzip-corrupt": ({"t.json.gz": gzip.compress(_kineto([KERNEL] * 50))[:40]}, "t.json.gz",
                     "compressed data"),
    "gzip-of-nothing": ({"t.json.gz": gzip.compress(b"")}, "t.json.gz", "is empty"),
    "xplane-garbage": ({"h.xplane.pb": b"\x0a\xff\xff\xff\x0f" + b"\x00" * 40}, "h.xplane.pb", None),
    "xplane-truncated": ({"h.xplane.pb": (SEEDS / "devices.xplane.pb").read_bytes()[:999]}, "h.xplane.pb", None),
    "run-metadata-truncated": ({"step-1.pb": (SEEDS / "step-2.pb").read_bytes()[:777]}, "step-1.pb", None),
    "directory-not-a-run": ({"d/readme.txt": b"hi"}, "d", "holds no manifest.json"),
    "missing-path": ({}, "nope.json", "does not exist"),
}
RUN_INPUTS = {
    "manifest-missing": (None, {"timelines/step-0.trace.json.gz": b""}, "holds no manifest.json"),
    "manifest-corrupt": (b'{"status": "comp', {}, "unreadable manifest"),
    "manifest-not-object": (b"[1, 2]", {}, "not a JSON object"),
    "manifest-is-folder": (None, {rundir.MANIFEST: None}, "holds no manifest.json"),
    "listed-timelines-missing": (json.dumps({"status": "complete", "traced_steps": [3, 4]}).encode(), {},
                                 "2 listed timelines missing"),
    "timeline-is-folder": (json.dumps({"traced_steps": [0]}).encode(),
                           {"timelines/step-0.trace.json.gz": None}, "no readable timeline"),
    "timeline-corrupt": (json.dumps({"traced_steps": [0]}).encode(),
                         {"timelines/step-0.trace.json.gz": b"\x1f\x8b\x08\x00junk"}, "compressed data"),
    "hostile-step-numbers": (json.dumps({"traced_steps": [-1, 10**40]}).encode(), {}, "no readable timeline"),
    "manifest-step-not-a-number": (json.dumps({"traced_steps": [0, "x", True]}).encode(), {},
                                   "malformed manifest: Expected `int`, got `str` - at `$.traced_steps[1]`"),
    "manifest-field-not-an-object": (json.dumps({"status": "complete", "config": "fast"}).encode(), {},
                                     "malformed manifest: Expected `object`, got `str` - at `$.config`"),
    "manifest-device-without-name": (json.dumps({"devices": [{"kind": "gpu"}]}).encode(), {},
                                     "malformed manifest: Object missing required field `name` - at `$.devices[0]`"),
}


@pytest.mark.parametrize("command", ANALYSES)
@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_naming_the_file_and_exit_2(tmp_path, capsys, monkeypatch, command, case):
    files, arg, expected_text = BAD_INPUTS[case]
    for rel, data in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    monkeypatch.chdir(tmp_path)
    code = main([command, arg])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"rnnprof {command}: error: {arg}"), err
    if expected_text:
        assert expected_text in lines[0]


@pytest.mark.parametrize("command", ANALYSES)
@pytest.mark.parametrize("case", sorted(RUN_INPUTS))
def test_broken_run_directories_are_one_line_and_exit_2(tmp_path, capsys, command, case):
    manifest, files, expected_text = RUN_INPUTS[case]
    run = _run_dir(tmp_path, manifest, files)
    code = main([command, str(run)])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(run) in lines[0] and expected_text in lines[0], err


def test_corrupt_graph_in_a_run_is_named(tmp_path, capsys):
    run = _run_dir(tmp_path, b'{"status": "complete"}', {"graphs/graph.pb": b"\x0a\xff\xff\xff\x0f junk"})
    assert main(["placement-audit", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(run / "graphs" / "graph.pb") in err


def test_partial_run_reads_what_exists(tmp_path, capsys):
    """An interrupted run listing a step that never finished still analyses the steps it has."""
    manifest = json.dumps({"status": "interrupted", "traced_steps": [2, 3]}).encode()
    run = _run_dir(tmp_path, manifest, {"timelines/step-2.trace.json.gz":
                                        (SEEDS / "rnnprof-timeline.trace.json.gz").read_bytes()})
    assert main(["comm", str(run), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["devices"]) == 2


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_the_traceback(tmp_path, capsys, where):
    bad = tmp_path / "t.json"
    bad.write_bytes(b'{"traceEvents": [')
    argv = ["--debug", "comm", str(bad)] if where == "before" else ["comm", str(bad), "--debug"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.strip().splitlines()[-1].startswith("rnnprof comm: error:")
    assert main(["comm", str(bad)]) == 2
    assert "Traceback" not in capsys.readouterr().err


# -- size limits ------------------------------------------------------------------------------------


def test_gzip_bomb_stops_at_the_ratio_limit(tmp_path, capsys):
    bomb = tmp_path / "bomb.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as f:
        f.write(b'{"schemaVersion": 1, "distributedInfo": {}, "traceEvents": [')
        chunk = b" " * (1 << 20)
        for _ in range(80):  # 80 MiB of blanks in ~80 KB
            f.write(chunk)
    assert bomb.stat().st_size < 1 << 20
    assert main(["comm", str(bomb)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "gzip bomb" in err and str(bomb) in err


def test_size_limit_from_flag_and_environment(tmp_path, capsys, monkeypatch):
    size = TF1.stat().st_size
    assert main(["comm", str(TF1), "--max-input-size", str(size - 1)]) == 2
    err = capsys.readouterr().err
    assert "input limit" in err and "--max-input-size" in err
    assert main(["comm", str(TF1), "--max-input-size", str(size)]) == 0
    capsys.readouterr()
    monkeypatch.setenv(limits.ENV_MAX_INPUT, "1K")
    assert main(["count-ops", str(TF1)]) == 2
    assert "input limit of 1.0 KiB" in capsys.readouterr().err
    assert main(["count-ops", str(TF1), "--max-input-size", "1G"]) == 0  # the flag wins over the environment
    capsys.readouterr()
    monkeypatch.setenv(limits.ENV_MAX_INPUT, "lots")
    assert main(["comm", str(TF1)]) == 2
    assert limits.ENV_MAX_INPUT in capsys.readouterr().err


def test_size_limit_counts_decompressed_bytes_and_applies_to_protobufs(tmp_path, monkeypatch):
    from rnnprof.traces import load_events

    monkeypatch.setenv(limits.ENV_MAX_INPUT, str(KINETO.stat().st_size * 2))
    with pytest.raises(InputError, match="once decompressed"):
        load_events(KINETO)  # small on disk, larger than the limit once gunzipped
    xplane = SEEDS / "devices.xplane.pb"
    monkeypatch.setenv(limits.ENV_MAX_INPUT, str(xplane.stat().st_size - 1))
    with pytest.raises(InputError, match="input limit"):
        load_events(xplane)
    from rnnprof.traces import graphs

    monkeypatch.setenv(limits.ENV_MAX_INPUT, "100")
    with pytest.raises(InputError, match="input limit"):
        graphs.load_graph_set(SEEDS / "graph.pb")


@pytest.mark.parametrize("text,expected", [("1024", 1024), ("8G", 8 << 30), ("512MiB", 512 << 20),
                                           ("1.5k", 1536), ("2 GB", 2 << 30)])
def test_parse_size(text, expected):
    assert limits.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "-1", "0", "ten", "5X"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError):
        limits.parse_size(text)


# -- nothing is overwritten ---------------------------------------------------------------------------


def test_out_dir_refusals_leave_everything_in_place(tmp_path):
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("keep me")
    with pytest.raises(UsageError, match="--force"):
        RunWriter(user)
    link = tmp_path / "link"
    link.symlink_to(user, target_is_directory=True)
    with pytest.raises(UsageError):
        check_out_dir(link)
    a_file = tmp_path / "file"
    a_file.write_text("data")
    with pytest.raises(InputError, match="not a directory"):
        prepare_out_dir(a_file, force=True)
    assert (user / "notes.txt").read_text() == "keep me" and a_file.read_text() == "data"


def test_force_never_follows_symlinks_out_of_the_run(tmp_path):
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "data.bin").write_bytes(b"irreplaceable")
    run = tmp_path / "run"
    run.mkdir()
    (run / rundir.TIMELINES_DIR).symlink_to(outside, target_is_directory=True)
    (run / "user.txt").write_text("not rnnprof's")
    prepare_out_dir(run, force=True)
    assert (outside / "data.bin").read_bytes() == b"irreplaceable"
    assert not (run / rundir.TIMELINES_DIR).exists() and (run / "user.txt").exists()


def test_default_run_dir_is_always_fresh(tmp_path):
    first = default_run_dir("nmt", tmp_path)
    first.mkdir(parents=True)
    second = default_run_dir("nmt", tmp_path)
    assert second != first and not second.exists() and second.parent == first.parent


def _recorded(path: Path, body) -> dict:
    with RunWriter(path).recording() as writer:
        (path / rundir.TORCH_TRACES_DIR).mkdir()
        (path / rundir.TORCH_TRACES_DIR / "rank0.json.gz").write_bytes(gzip.compress(b"{}"))
        body(writer)
    return json.loads((path / rundir.MANIFEST).read_text())


def test_a_recording_ends_complete_interrupted_or_failed_and_lists_what_is_in_place(tmp_path):
    done = _recorded(tmp_path / "done", lambda w: w.update(throughput={"words_per_sec": 1.0}))
    assert done["status"] == rundir.STATUS_COMPLETE and "error" not in done

    def interrupt(writer):
        raise KeyboardInterrupt

    with pytest.raises(InterruptedRun, match=r"interrupted; kept in .*stopped: 1 file\(s\) of no whole step$"):
        _recorded(tmp_path / "stopped", interrupt)
    stopped = json.loads((tmp_path / "stopped" / rundir.MANIFEST).read_text())
    assert stopped["status"] == rundir.STATUS_INTERRUPTED and "error" not in stopped

    def fail(writer):
        raise ValueError("rank 1 exited with code 1")

    with pytest.raises(ValueError):
        _recorded(tmp_path / "failed", fail)
    failed = json.loads((tmp_path / "failed" / rundir.MANIFEST).read_text())
    assert failed["status"] == rundir.STATUS_INTERRUPTED
    assert failed["error"] == "ValueError: rank 1 exited with code 1"
    for manifest in (done, stopped, failed):
        assert any(name.endswith("rank0.json.gz") for name in manifest["captured"]["kineto"]), manifest["captured"]


def test_an_interrupt_before_anything_was_captured_says_the_run_holds_only_its_manifest(tmp_path):
    """Ctrl-C while a workload still builds (nothing traced yet) names no capture that is not there."""
    path = tmp_path / "nmt2"

    def interrupt(writer):
        raise KeyboardInterrupt

    with pytest.raises(InterruptedRun) as raised:
        with RunWriter(path).recording() as writer:
            interrupt(writer)
    assert sorted(p.name for p in path.iterdir()) == [rundir.MANIFEST]
    assert str(raised.value) == f"interrupted; nothing was kept in {path}: no capture window had been written"


@pytest.mark.parametrize("hostile", ["../../escape", "/etc/passwd", "..", ".", "a/../../b", "~root", "\x00x",
                                     "run\\..\\..\\win", ""])
def test_run_and_host_names_stay_inside_the_run(tmp_path, hostile):
    name = safe_name(hostile)
    assert name and "/" not in name and "\\" not in name and name not in (".", "..")
    writer = RunWriter(tmp_path / "run")

    class Space:
        def SerializeToString(self):
            return b"x"

    rel = writer.write_xspace(Space(), hostile, host=hostile)
    target = (writer.path / rel).resolve()
    assert target.is_relative_to(writer.path.resolve()) and target.is_file()
    assert rel.startswith(str(rundir.PROFILE_DIR))


def test_every_file_write_in_the_package_goes_through_a_rename():
    """Direct writes would leave half files on a crash; everything goes through atomic_write_*."""
    # The one sanctioned writer is capture._write_then_rename: mkstemp + os.fdopen + os.replace.
    direct = re.compile(r"\.write_(text|bytes)\(|(?<!fd)open\([^)]*['\"][wax]b?['\"]|gzip\.open\([^)]*['\"]w")
    # faulthandler writes a rank's stacks into a file kept open from the capture's start (a hung rank cannot
    # write a whole file on request); the collector copies it whole, through a rename, into hang/
    # A watched job's files grow a record at a time and are read up to their last whole record: anomalies.jsonl and
    # the TensorBoard scalars (appended), and a window analysis' stderr, the file its process writes to.
    # A job's scratch keeps a rank's arrays in one file written array after array; the rank's JSON, written through
    # a rename once that file is whole, is what makes it read (the scratch folder goes with the command).
    streamed = {"recording/hang_probe.py": 'self._stacks = open(self.files["stacks"], "w")',
                "rundir/windows.py": 'with open(Path(run_dir) / rundir.ANOMALIES, "ab") as handle:',
                "rundir/tensorboard.py": 'writer = RecordWriter(open(folder / name, "ab"))',
                "commands/watch.py": 'with open(self._log, "wb") as log:',
                "job/scratch.py": 'with open(data, "wb") as f:'}
    offenders = []
    root = Path(rnnprof.__file__).parent
    for path in root.rglob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if direct.search(line) and "corpus/make_corpus.py" not in path.as_posix() \
                    and streamed.get(path.relative_to(root).as_posix()) != line.strip():
                offenders.append(f"{path.name}:{n}: {line.strip()}")
    assert offenders == []


# -- hostile content ----------------------------------------------------------------------------------


def test_nothing_read_is_unpickled_or_evaluated():
    forbidden = re.compile(r"\bimport pickle\b|\bpickle\.|\bcPickle\b|\bdill\b|\bmarshal\.loads|\bshelve\b"
                           r"|allow_pickle\s*=\s*True|yaml\.(unsafe_)?load\(|(?<![\w.])eval\(|(?<![\w.])exec\("
                           r"|\btorch\.load\(|np\.load\(")
    # flight-recorder dumps are pickles: the one reader loads plain data only (its Unpickler refuses every
    # global and persistent reference; tests/test_hang.py plants a pickle that would run code)
    plain_only = "traces/flight_recorder.py"
    hits = []
    for path in Path(rnnprof.__file__).parent.rglob("*.py"):
        if path.relative_to(Path(rnnprof.__file__).parent).as_posix() == plain_only:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if forbidden.search(line):
                hits.append(f"{path.relative_to(Path(rnnprof.__file__).parent)}:{n}: {line.strip()}")
    assert hits == []


def test_view_binds_localhost_unless_told(tmp_path, announced_tensorboard, capsys):
    run = tmp_path / "run"
    shutil.copytree(SEEDS, run / rundir.PROFILE_DIR / "r", ignore=shutil.ignore_patterns("*.py", "*.json*", "*.txt"))
    launched = announced_tensorboard
    assert main(["view", str(run)]) == 0
    assert main(["view", str(run), "--host", "0.0.0.0"]) == 0
    hosts = [argv[argv.index("--host") + 1] for argv in launched]
    assert hosts == ["127.0.0.1", "0.0.0.0"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files regardless of their mode")
def test_unreadable_file_is_an_input_error(tmp_path, capsys):
    locked = tmp_path / "t.json"
    locked.write_bytes(TF1.read_bytes())
    locked.chmod(0)
    assert main(["comm", str(locked)]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_permission_denied_is_an_input_error_even_as_root(tmp_path, capsys, monkeypatch):
    """The same path as above, for CI running as root: the OS refusing the open."""
    locked = tmp_path / "t.json"
    locked.write_bytes(TF1.read_bytes())
    real_open = open

    def refuse(path, *args, **kwargs):
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(limits, "open", refuse, raising=False)
    assert main(["comm", str(locked)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [f"rnnprof comm: error: {locked}: cannot read: Permission denied"]


@pytest.mark.parametrize("command", ["scale", "trace"])
def test_workload_data_file_obeys_the_size_limit(tmp_path, capsys, command):
    big = tmp_path / "big.txt"
    big.write_text("the cat sat on the mat\n" * 200)
    out = ["--out", str(tmp_path / "run")] if command == "trace" else []
    code = main([command, "--model", "rnnlm", "--preset", "small", "--devices", "1", "--data", str(big),
                 "--max-input-size", "1K", *out])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.splitlines() == [err] and str(big) in err and "input limit of 1.0 KiB" in err


def test_a_bug_is_one_line_exit_3_and_the_traceback_only_with_debug(monkeypatch, capsys):
    """An unexpected exception inside a command (a bug, not bad input) never dumps a traceback by default."""
    from rnnprof.commands import comm

    def broken(args, console):
        raise ZeroDivisionError("division by zero\nsecond line")

    monkeypatch.setattr(comm, "run", broken)
    assert main(["comm", str(TF1)]) == 3
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [err.strip()] and "Traceback" not in err
    assert "internal error: ZeroDivisionError: division by zero second line" in err and "--debug" in err
    assert main(["comm", str(TF1), "--debug"]) == 3
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "ZeroDivisionError" in err


SYMLINK_COMMANDS = [
    ("report", "{p}", "-o", "{out}/r.html"), ("comm", "{p}"), ("count-ops", "{p}"), ("critical-path", "{p}"),
    ("diff", "{p}", str(KINETO)), ("placement-audit", "{p}"), ("view", "{p}", "--port", "0"), ("roofline", "{p}"),
]


@pytest.mark.parametrize("argv", SYMLINK_COMMANDS, ids=lambda a: a[0])
@pytest.mark.parametrize("case", ["loop", "dangling", "loop in a rank folder"])
def test_a_symlink_that_leads_nowhere_is_one_line_exit_2_on_every_command(tmp_path, capsys, argv, case):
    """A symlink loop or a dangling link, given or inside a rank folder: one line naming it, exit 2, no report."""
    if case == "loop":
        path = tmp_path / "loop1"
        path.symlink_to("loop1")
    elif case == "dangling":
        path = tmp_path / "gone.json"
        path.symlink_to(tmp_path / "nowhere.json")
    else:
        path = tmp_path / "job"
        path.mkdir()
        shutil.copy(FIXTURES / "torch-gloo-rank0.json.gz", path / "rank0.json.gz")
        (path / "rank1.json.gz").symlink_to("rank1.json.gz")
        if argv[0] in ("view", "placement-audit"):
            pytest.skip(f"{argv[0]} reads no rank folder")
    out = tmp_path / "out"
    out.mkdir()
    code = main([a.format(p=path, out=out) for a in argv])
    stdout, err = capsys.readouterr()
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "internal error" not in err, err
    wanted = {"loop": "is a symlink loop", "dangling": "which does not exist",
              "loop in a rank folder": "rank1.json.gz: is a symlink loop"}[case]
    assert wanted in err, err
    assert not (out / "r.html").exists()


@pytest.mark.parametrize("argv", [a for a in SYMLINK_COMMANDS if a[0] != "view"], ids=lambda a: a[0])
def test_a_symlink_loop_inside_a_run_directory_is_named_and_the_rest_analysed(tmp_path, capsys, argv):
    """A run directory whose manifest lists a rank trace that is a symlink loop: the other rank is analysed and
    a note names the loop (never an internal error)."""
    from rnnprof.rundir.manifest import new_manifest

    run = tmp_path / "run"
    (run / "torch").mkdir(parents=True)
    shutil.copy(FIXTURES / "torch-gloo-rank0.json.gz", run / "torch" / "rank0.json.gz")
    (run / "torch" / "rank1.json.gz").symlink_to("rank1.json.gz")
    manifest = new_manifest()
    manifest.update(status="complete", framework="torch",
                    ranks=[{"rank": r, "trace": f"torch/rank{r}.json.gz"} for r in (0, 1)])
    manifest["captured"]["kineto"] = [f"torch/rank{r}.json.gz" for r in (0, 1)]
    (run / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "out"
    out.mkdir()
    code = main([a.format(p=run, out=out) for a in argv])
    stdout, err = capsys.readouterr()
    assert code == 0 and "internal error" not in err, err
    assert "torch/rank1.json.gz (is a symlink loop" in err, err
    assert stdout.strip() or (out / "r.html").is_file()


def _with_impossible_times(source: Path, target: Path) -> Path:
    """``source`` with its first kernel given a negative duration and its second moved 10^18 µs away."""
    doc = json.loads(gzip.decompress(source.read_bytes()))
    device_work = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("kernel", "cpu_op")]
    device_work[0]["dur"] = -50
    device_work[1]["ts"] += 1e18
    target.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return target


IMPOSSIBLE = {"negative duration": 1, "non-finite time": 0, "outside the trace's time range": 1}
LEFT_OUT_LINE = "left out 1 event with a negative duration, 1 outside the trace's time range"


@pytest.mark.parametrize("command", ["comm", "count-ops", "critical-path", "placement-audit", "diff", "report"])
def test_events_with_impossible_times_are_counted_and_said_on_every_command(tmp_path, capsys, command):
    bad = _with_impossible_times(KINETO, tmp_path / "bad.json.gz")
    argv = {"diff": ["diff", bad, bad, "--json"], "report": ["report", bad, "-o", tmp_path / "r.html", "--force"]}.get(
        command, [command, bad, "--json"])
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert LEFT_OUT_LINE in err and "--debug names the first few" in err
    if command == "diff":
        assert json.loads(out)["left_out"] == {"a": IMPOSSIBLE, "b": IMPOSSIBLE}
    elif command != "report":
        assert json.loads(out)["left_out"] == IMPOSSIBLE
    code = main([str(a) for a in [*argv, "--debug"]])
    assert code == 0 and "first 2: " in capsys.readouterr().err


@pytest.mark.parametrize("command", ["comm", "count-ops"])
def test_a_rank_folder_counts_what_each_ranks_worker_left_out(tmp_path, capsys, command):
    folder = tmp_path / "job"
    folder.mkdir()
    gloo = [FIXTURES / "torch-gloo-rank0.json.gz", FIXTURES / "torch-gloo-rank1.json.gz"]
    shutil.copy(gloo[0], folder / gloo[0].name)
    _with_impossible_times(gloo[1], folder / gloo[1].name)
    code = main([command, str(folder), "--json", "--jobs", "2"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["left_out"] == IMPOSSIBLE and LEFT_OUT_LINE in err
    code = main([command, str(gloo[0]), "--json"])
    out, err = capsys.readouterr()
    assert json.loads(out)["left_out"] == {r: 0 for r in IMPOSSIBLE} and "left out" not in err


def _digest(folder: Path) -> dict[str, str]:
    import hashlib

    return {str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir")
            for p in sorted(folder.rglob("*"))}


def test_no_analysis_changes_the_run_directory_it_reads(tmp_path, capsys):
    """Every command that reads a run leaves it byte for byte as it was (it may sit on read-only storage)."""
    from test_count_ops import _run_with_graphs

    run = _run_with_graphs(tmp_path)
    before = _digest(run)
    out = tmp_path / "out"
    out.mkdir()
    for argv in (["comm", run, "--per-step"], ["count-ops", run], ["critical-path", run],
                 ["placement-audit", run], ["diff", run, run], ["report", run, "-o", out / "r.html"]):
        code = main([str(a) for a in argv])
        capsys.readouterr()
        assert code in (0, 1), argv
        assert _digest(run) == before, f"{argv[0]} changed the run directory it read"
    assert (out / "r.html").exists()


def test_a_write_interrupted_right_after_its_scratch_file_is_made_leaves_nothing(tmp_path, monkeypatch):
    """A signal whose handler raises can land between the scratch file's creation and the call's return (an
    interrupted run once kept ``.step-4.trace.json.gz.*.tmp``): the scratch file is removed all the same, and
    what was there before is kept."""
    from rnnprof import files

    target = tmp_path / "manifest.json"
    target.write_bytes(b"before")
    real_open = os.open

    def open_then_interrupted(path, flags, mode=0o777):
        real_open(path, flags, mode)  # made, and its descriptor lost to the interruption
        raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "open", open_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        files.atomic_write_bytes(target, b"after")
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]
    assert target.read_bytes() == b"before"
