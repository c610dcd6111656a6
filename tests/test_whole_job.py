"""A whole job: a folder of Kineto rank files (or several files) analysed one rank per worker process,
locally or on a Dask cluster, and combined into the figures the same analysis of the merged ranks gives."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixtures import FIXTURES
from processes import running_descendants
from rnnprof.analyzers.align import align, zero_offsets
from rnnprof.analyzers.collectives import instances
from rnnprof.analyzers.comm import analyze_comm
from rnnprof.analyzers.opcount import count_kernels
from rnnprof.cli import main
from rnnprof.events import Alignment
from rnnprof.job.workers import map_items
from rnnprof.traces import kineto, merge_tables
from rnnprof.reports.comm import to_document
from rnnprof.job.comm import combine_comm

SAMPLED = [FIXTURES / "kineto-sampled-rank0.json.gz", FIXTURES / "kineto-sampled-rank1.json.gz"]
GLOO = [FIXTURES / "torch-gloo-rank0.json.gz", FIXTURES / "torch-gloo-rank1.json.gz"]


def run_cli(capsys, *argv):
    code = main([*map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def _folder(tmp_path: Path, files, name="job") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    for f in files:
        shutil.copy(f, folder / f.name)
    return folder


def load_aligned_tables(tables):
    """The tables merged as ``load_aligned(paths, "none")`` merges the files."""
    table = merge_tables(align(tables, zero_offsets(tables)))
    table.metadata.alignment = Alignment("none", tuple(zero_offsets(tables)))
    return table


def _raw(path: Path) -> dict:
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as f:
        return json.load(f)


def _without_sources(doc: dict) -> dict:
    """The document with its file paths cut to file names (a folder's copies are the same files), without the
    schema_version the command adds and the notes it said about its input (a folder's, a merge's)."""
    doc = {k: v for k, v in doc.items() if k not in ("sources", "schema_version", "input_notes")}
    if "alignment" in doc:
        offsets = [{**o, "source": Path(o["source"]).name} for o in doc["alignment"]["offsets"]]
        doc["alignment"] = {**doc["alignment"], "offsets": offsets}
    return doc


def _merged_comm(files) -> dict:
    """The reference: every rank in one table, analysed at once, in this process."""
    from rnnprof.traces.left_out import leave_out, left_out_of

    table = load_aligned_tables([leave_out(kineto.load(f)) for f in files])
    return {**to_document(analyze_comm(table), per_step=True), "left_out": left_out_of(table.metadata)}


@pytest.mark.parametrize("files", [SAMPLED, GLOO], ids=["nccl-gpu", "gloo-cpu"])
def test_a_folder_analysed_in_worker_processes_equals_the_merged_analysis(tmp_path, capsys, files):
    code, out, err = run_cli(capsys, "comm", _folder(tmp_path, files), "--json", "--per-step", "--jobs", "2")
    assert code == 0, err
    doc = json.loads(out)
    expected = _merged_comm(files)
    assert _without_sources(doc) == _without_sources(expected)
    ranks = sorted(_raw(f)["distributedInfo"]["rank"] for f in files if "distributedInfo" in _raw(f))
    assert sorted({d["worker"] for d in doc["devices"]}) == [f"rank{r}" for r in ranks]
    assert doc["stragglers"], "two ranks: a straggler per step"


def test_reports_combined_shift_each_rank_to_the_common_clock():
    """Tables on clocks of their own (a time base each) combine as ``merge_tables`` puts them on one clock."""
    tables = []
    for path, base in zip(SAMPLED, (5_000.0, 1_000_000.0)):
        table = kineto.load(path)
        tables.append(dataclasses.replace(table, ts=table.ts - base, time_base_us=base))
    combined = combine_comm([(analyze_comm(t), instances(t), zero_offsets([t])[0]) for t in tables])
    assert combined.as_dict() == analyze_comm(load_aligned_tables(tables)).as_dict()
    absolute = analyze_comm(merge_tables([kineto.load(f) for f in SAMPLED]))
    assert [d.total.end_us for d in combined.devices] == pytest.approx(
        [d.total.end_us - 5_000.0 for d in absolute.devices])


def test_explicit_rank_files_go_to_workers_too_and_a_corrupt_one_is_named(tmp_path, capsys):
    code, out, err = run_cli(capsys, "comm", *SAMPLED, "--json", "--per-step", "--jobs", "2")
    assert code == 0, err
    assert _without_sources(json.loads(out)) == _without_sources(_merged_comm(SAMPLED))
    broken = tmp_path / "rank1.json"
    broken.write_bytes(gzip.decompress(SAMPLED[1].read_bytes())[:200_000])  # cut mid-file
    code, out, err = run_cli(capsys, "comm", SAMPLED[0], broken, "--jobs", "2")
    assert code == 2 and out == ""
    assert "rank1.json" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def _launches_from_raw(path: Path) -> int:
    """Runtime calls that launched a kernel of the same file, by correlation id, straight from the JSON."""
    events = _raw(path)["traceEvents"]
    kernels = {e["args"]["correlation"] for e in events if e.get("cat") == "kernel"}
    return sum(1 for e in events if e.get("cat") == "cuda_runtime" and (e.get("args") or {}).get("correlation") in kernels)


def test_count_ops_of_a_folder_counts_each_rank_launches_within_its_own_process(tmp_path, capsys):
    code, out, err = run_cli(capsys, "count-ops", _folder(tmp_path, SAMPLED), "--json", "--jobs", "2")
    assert code == 0, err
    devices = {d["device"]: d for d in json.loads(out)["kernels"]["devices"]}
    for rank, path in enumerate(SAMPLED):
        (gpu,) = [d for label, d in devices.items() if label.startswith(f"rank{rank}/gpu:")]
        assert gpu["gpu_launches"] == _launches_from_raw(path)


def test_a_merged_table_does_not_link_one_ranks_launches_to_another_ranks_kernels():
    merged = count_kernels(merge_tables([kineto.load(f) for f in SAMPLED]))
    launches = {d.device: d.gpu_launches for d in merged.devices}
    assert [launches["rank0/gpu:0"], launches["rank1/gpu:1"]] == [_launches_from_raw(f) for f in SAMPLED]


def test_ranks_without_distributed_info_take_the_number_in_their_name(tmp_path, capsys):
    folder = tmp_path / "job"
    folder.mkdir()
    for rank, path in enumerate(SAMPLED):
        trace = _raw(path)
        del trace["distributedInfo"]
        (folder / f"trace_{rank}.json").write_text(json.dumps(trace))
    code, out, err = run_cli(capsys, "comm", folder, "--json")
    assert code == 0, err
    assert sorted({d["worker"] for d in json.loads(out)["devices"]}) == ["rank0", "rank1"]
    assert "no distributedInfo" in err and "trace_0.json" in err


def _write(path: Path, trace: dict) -> None:
    path.write_text(json.dumps(trace))


@pytest.mark.parametrize("case", ["empty", "not-kineto", "duplicate", "world-sizes", "no-number"])
def test_bad_folders_are_one_line_errors(tmp_path, capsys, case):
    folder = tmp_path / "job"
    folder.mkdir()
    first = _raw(SAMPLED[0])
    if case == "not-kineto":
        _write(folder / "a.json", {"hello": 1})
        expected = "no Kineto rank file"
    elif case == "empty":
        expected = "holds no manifest.json"
    elif case == "duplicate":
        _write(folder / "a.json", first)
        _write(folder / "b.json", first)
        expected = "rank 0 appears in 2 files"
    elif case == "world-sizes":
        _write(folder / "a.json", first)
        other = _raw(SAMPLED[1])
        other["distributedInfo"]["world_size"] = 64
        _write(folder / "b.json", other)
        expected = "different world sizes (64, 128)"
    else:
        del first["distributedInfo"]
        _write(folder / "trace.json", first)
        expected = "no number in its name"
    for command in ("comm", "count-ops"):
        code, out, err = run_cli(capsys, command, folder)
        assert code == 2 and out == "", (command, err)
        assert expected in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_job_options_on_other_input_and_an_unreachable_scheduler_are_one_line_errors(tmp_path, capsys, monkeypatch):
    import rnnprof.job.workers

    monkeypatch.setattr(rnnprof.job.workers, "CONNECT_TIMEOUT_S", 1)  # nothing listens there: no need to wait 10 s
    code, out, err = run_cli(capsys, "comm", FIXTURES / "tf1-timeline-gpu-matmul.json", "--jobs", "2")
    assert code == 2 and "--jobs applies to a job's rank files" in err
    code, out, err = run_cli(capsys, "comm", *SAMPLED, "--scheduler", "tcp://127.0.0.1:9")
    assert code == 2 and out == ""
    assert "cannot reach a Dask scheduler" in err and len(err.strip().splitlines()) == 1


def _sleep_then_square(x: int) -> int:
    time.sleep(60)
    return x * x


def _square(x: int) -> int:
    return x * x


def test_the_local_map_keeps_the_items_order_and_reports_progress():
    seen = []
    assert map_items(_square, range(7), jobs=2, on_done=lambda done, total: seen.append((done, total))) == \
        [x * x for x in range(7)]
    assert seen == [(k, 7) for k in range(1, 8)]


def test_ctrl_c_stops_every_worker_process(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from rnnprof.job.workers import map_items\n"
        "from test_whole_job import _sleep_then_square\n"
        "print('started', flush=True)\n"
        "map_items(_sleep_then_square, range(4), jobs=2)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert child.stdout.readline().strip() == b"started"
    deadline = time.monotonic() + 60
    while len(running_descendants(child.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    workers = running_descendants(child.pid)
    assert len(workers) >= 2, "the pool's workers started"
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=60)
    assert child.returncode != 0 and b"KeyboardInterrupt" in err
    deadline = time.monotonic() + 20
    while any(Path(f"/proc/{pid}").exists() and running_descendants(pid) is not None and _alive(pid)
              for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in workers if _alive(pid)]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _scheduler_address(scheduler_file, scheduler, deadline):
    """The scheduler's address once its file is whole: the scheduler creates the file before it writes it."""
    while time.monotonic() < deadline:
        assert scheduler.poll() is None, f"the Dask scheduler exited with code {scheduler.returncode}"
        try:
            return json.loads(scheduler_file.read_text())["address"]
        except (OSError, ValueError, KeyError):
            time.sleep(0.2)
    pytest.fail(f"the Dask scheduler wrote no whole {scheduler_file.name} in 120 s")


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory):
    """A Dask scheduler and two single-threaded workers on localhost, as separate processes."""
    pytest.importorskip("distributed")
    folder = tmp_path_factory.mktemp("dask")
    scheduler_file = folder / "scheduler.json"
    common = ["--no-dashboard"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}  # rnnprof for the scheduler and workers
    started = [subprocess.Popen([sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1", "--port", "0",
                                 "--scheduler-file", str(scheduler_file), *common],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=folder, env=env)]
    try:
        address = _scheduler_address(scheduler_file, started[0], deadline=time.monotonic() + 120)
        started.append(subprocess.Popen([sys.executable, "-m", "dask", "worker", address, "--nworkers", "2",
                                         "--nthreads", "1", *common],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=folder, env=env))
        from distributed import Client

        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=90)
        yield address
    finally:
        for process in reversed(started):
            process.terminate()
        for process in reversed(started):
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:  # a nanny still closing its workers: the test is over, stop it
                process.kill()
                process.wait()


@pytest.mark.slow
def test_the_same_figures_come_back_from_a_localhost_dask_cluster(tmp_path, capsys, dask_cluster):
    folder = _folder(tmp_path, SAMPLED)
    code, local, err = run_cli(capsys, "comm", folder, "--json", "--per-step", "--jobs", "2")
    assert code == 0, err
    code, remote, err = run_cli(capsys, "comm", folder, "--json", "--per-step", "--scheduler", dask_cluster)
    assert code == 0, err
    assert json.loads(remote) == json.loads(local)
    code, local, _ = run_cli(capsys, "count-ops", folder, "--json", "--jobs", "2")
    code, remote, err = run_cli(capsys, "count-ops", folder, "--json", "--scheduler", dask_cluster)
    assert code == 0, err
    assert json.loads(remote) == json.loads(local)


def test_a_files_own_rank_wins_over_its_name_and_two_files_of_one_rank_are_refused(tmp_path, capsys):
    """The rank in distributedInfo names the rank whatever the file is called; two files that say the
    same rank are refused, here and when what the first bytes said is checked against the loaded events."""
    folder = tmp_path / "job"
    folder.mkdir()
    shutil.copy(GLOO[0], folder / "a_7.json.gz")
    shutil.copy(GLOO[1], folder / "b_3.json.gz")
    code, out, err = run_cli(capsys, "comm", folder, "--json")
    assert code == 0, err
    assert sorted({d["worker"] for d in json.loads(out)["devices"]}) == ["rank0", "rank1"]
    shutil.copy(GLOO[0], folder / "b_3.json.gz")
    code, out, err = run_cli(capsys, "comm", folder, "--jobs", "2")
    assert code == 2 and out == ""
    assert "rank 0 appears in 2 files (a_7.json.gz, b_3.json.gz)" in err and len(err.strip().splitlines()) == 1


def test_step_selection_and_launch_statistics_of_a_folder_equal_those_of_the_merged_ranks(tmp_path, capsys):
    """Each rank's steps are selected in its worker, and the launch statistics (medians, p95 over every
    rank's kernels) come back exact: the same document as the ranks merged in one process."""
    folder = _folder(tmp_path, SAMPLED)
    documents = {}
    for command in (["comm", "--per-step"], ["count-ops"]):
        code, out, err = run_cli(capsys, *command, folder, "--json", "--drop-last", "--jobs", "2")
        assert code == 0, err
        parallel = json.loads(out)
        code, out, err = run_cli(capsys, *command, *SAMPLED, "--json", "--drop-last", "--jobs", "1")
        assert code == 0, err
        here = documents[command[0]] = json.loads(out)
        if command[0] == "count-ops":
            assert parallel["launches"]["available"] and parallel["launches"] == here["launches"]
            assert parallel["kernels"] == here["kernels"]
            assert parallel["copies"]["available"] and parallel["copies"] == here["copies"]
            assert parallel["copies"]["total"]["copies"]["HtoD"]["count"] > 0
        else:
            assert _without_sources(parallel) == _without_sources(here)
            assert parallel["step_selection"]
    from rnnprof.analyzers.launches import launch_stats
    from rnnprof.analyzers.steps import StepSelection, select_steps

    merged = merge_tables([select_steps(kineto.load(f), StepSelection(drop_last=True)) for f in SAMPLED])
    assert documents["count-ops"]["launches"] == launch_stats(merged).as_dict()


@pytest.mark.parametrize("command", [["comm", "--per-step"], ["count-ops"], ["critical-path"],
                                     ["whatif", "--scale", "family:Elementwise=0.5"]])
def test_a_small_job_is_read_in_this_process_unless_jobs_are_asked_for(tmp_path, capsys, monkeypatch, command):
    """Starting workers costs more than reading two small rank files: without --jobs they are read here; with
    --jobs 2 (or, for comm, a job of more bytes than SMALL_JOB_BYTES) in worker processes, with the same
    document."""
    import multiprocessing

    from rnnprof.job import ranks

    folder = _folder(tmp_path, SAMPLED)
    started = []
    real_pool = multiprocessing.get_context("spawn").Pool

    class Context:
        def Pool(self, *args, **kwargs):
            started.append(args[0])
            return real_pool(*args, **kwargs)

    monkeypatch.setattr("rnnprof.job.workers.multiprocessing.get_context", lambda method: Context())
    code, here, err = run_cli(capsys, *command, folder, "--json")
    assert code == 0, err
    assert started == []
    code, workers, err = run_cli(capsys, *command, folder, "--json", "--jobs", "2")
    assert code == 0, err
    assert started == [2]
    assert _without_sources(json.loads(here)) == _without_sources(json.loads(workers))
    if command[0] != "comm":
        return  # the size threshold is the job layer's, the same for every command: checked once, on comm
    monkeypatch.setattr(ranks, "SMALL_JOB_BYTES", sum(f.stat().st_size for f in SAMPLED))
    monkeypatch.setattr("rnnprof.job.workers.default_jobs", lambda: 2)  # the cores, on any machine
    code, _, err = run_cli(capsys, *command, folder, "--json")
    assert code == 0, err
    assert started == [2, 2]
