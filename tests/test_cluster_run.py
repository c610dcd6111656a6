"""Real localhost gRPC clusters: task processes' lifecycle, trace and scale across worker processes,
a worker killed mid-run, and the ps-balance rule on real captures."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixtures import FIXTURES
from processes import alive
from rnnprof.cli import main
from rnnprof.errors import TaskFailed
from rnnprof.training import cluster as cluster_module
from rnnprof.training.cluster import LocalCluster, local_spec, running_cluster

pytestmark = pytest.mark.slow

TINY = ["--model", "nmt", "--devices", "1", "--units", "16", "--layers", "1", "--src-max-len", "6",
        "--tgt-max-len", "6", "--vocab-size", "100", "--batch-size", "4", "--warmup", "1", "--batches", "1"]
W0, W1, PS0 = "/job:worker/replica:0/task:0", "/job:worker/replica:0/task:1", "/job:ps/replica:0/task:0"
PS1 = "/job:ps/replica:0/task:1"
REPO = Path(__file__).resolve().parents[1]


def _gone(pids, grace_s: float = 10.0) -> bool:
    deadline = time.monotonic() + grace_s
    while any(alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


# -- the task processes ---------------------------------------------------------------------------

class _Config:
    cluster_spec = None
    workers, ps_tasks, devices = 1, 1, 1


class _OneTask(_Config):
    ps_tasks = 0


@pytest.fixture(scope="module")
def one_task():
    """A one-task local cluster run through once: what was seen while its block ran, and after."""
    lines = []
    with running_cluster(_OneTask(), on_exposed=lines.append) as (spec, tasks):
        pids = [t["pid"] for t in tasks]
        seen = dict(tasks=tasks, alive=all(alive(p) for p in pids), master=spec.master(),
                    listening=_listening(tasks[0]["pid"]), libraries=_libraries(tasks[0]["pid"]))
    return {**seen, "gone": _gone(pids, 0.5), "exposed": lines}


def _libraries(pid: int) -> set[str]:
    """The files mapped into process ``pid`` (its loaded native libraries); empty where there is no /proc."""
    try:
        lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:
        return set()
    return {line.split(None, 5)[5] for line in lines if len(line.split(None, 5)) == 6}


def test_tasks_run_while_the_block_runs_and_stop_on_success(one_task):
    assert [(t["job"], t["task"]) for t in one_task["tasks"]] == [("worker", 0)]
    assert one_task["alive"] and one_task["master"].startswith("grpc://localhost:")
    assert one_task["gone"]


def test_a_task_serves_with_tensorflow_alone_without_the_keras_its_import_loads(one_task):
    """A task runs graphs its chief built: TensorFlow's eager load of Keras (and through it pandas, a third of the
    import's CPU time in every task) is left out. Seen in its mapped libraries: TensorFlow's, and no pandas."""
    libraries = one_task["libraries"]
    if not libraries:
        pytest.skip("no /proc/PID/maps here")
    assert any("/tensorflow/" in path for path in libraries)
    assert not [path for path in libraries if "/pandas/" in path]


@pytest.mark.parametrize("raised", [KeyboardInterrupt, RuntimeError])
def test_tasks_stop_on_ctrl_c_and_on_an_error(raised):
    with pytest.raises(raised):
        with running_cluster(_OneTask()) as (_, tasks):
            pids = [t["pid"] for t in tasks]
            raise raised()
    assert _gone(pids, 0.5)


def test_a_dead_task_stops_the_others_and_is_one_line_naming_it(monkeypatch):
    monkeypatch.setattr(cluster_module, "HUNG_GRACE_S", 0.5)
    hung = []
    local = LocalCluster(local_spec(1, 1), on_hung=hung.append).start()
    try:
        ps = next(t for t in local.tasks if t.job == "ps")
        worker = next(t for t in local.tasks if t.job == "worker")
        os.kill(ps.process.pid, signal.SIGKILL)
        # nobody handles the failure (the chief would be stuck in a step): the watcher stops the rest
        assert _gone([worker.process.pid], 15)
        deadline = time.monotonic() + 5
        while not hung and time.monotonic() < deadline:  # the watcher stops the tasks, then reports
            time.sleep(0.05)
        assert len(hung) == 1 and isinstance(hung[0], TaskFailed)
        message = str(hung[0])
        assert f"ps task 0 (localhost:{ps.address.rsplit(':')[1]}, pid {ps.process.pid}) was killed by SIGKILL" in message
        assert "\n" not in message
    finally:
        local.stop()


def test_an_error_while_a_task_is_dead_becomes_that_tasks_failure():
    """One task (the failure names whichever task died; the watch over the others is the test above)."""
    with pytest.raises(TaskFailed, match="worker task 0 .* was killed by SIGKILL"):
        with running_cluster(_OneTask()) as (_, tasks):
            (worker,) = tasks
            os.kill(worker["pid"], signal.SIGKILL)
            time.sleep(0.5)
            raise RuntimeError("the step failed: UNAVAILABLE")
    assert _gone([t["pid"] for t in tasks], 0.5)


# -- trace on 2 workers and a ps ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def ps_run(tmp_path_factory):
    """A traced parameter_server run on 2 workers and 2 ps tasks, the variables split over the ps tasks by the
    default greedy placement (also the run the ps-balance rule must not flag)."""
    out = tmp_path_factory.mktemp("cluster") / "run"
    code = main(["trace", *TINY, "--trace-steps", "1", "--workers", "2", "--ps-tasks", "2",
                 "--variable-update", "parameter_server", "--hang-after", "5s", "--out", str(out)])
    assert code == 0  # the hang watch's balanced control too: a healthy cluster watched with a short --hang-after
    return out


def _timeline(run: Path) -> dict:
    (path,) = sorted((run / "timelines").glob("*.trace.json.gz"))
    return json.loads(gzip.decompress(path.read_bytes()))


def test_timelines_name_the_devices_of_each_worker_and_the_ps(ps_run):
    doc = _timeline(ps_run)
    processes = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert {f"{W0}/device:CPU:0", f"{W1}/device:CPU:0", f"{PS0}/device:CPU:0", f"{PS1}/device:CPU:0"} <= processes


def test_every_task_is_profiled_into_its_own_xplane(ps_run):
    manifest = json.loads((ps_run / "manifest.json").read_text())
    (run,) = [p for p in (ps_run / "plugins" / "profile").iterdir() if not p.name.endswith("_devices")]
    assert sorted(p.name for p in run.glob("*.xplane.pb")) == ["ps_0.xplane.pb", "ps_1.xplane.pb",
                                                               "worker_0.xplane.pb", "worker_1.xplane.pb"]
    assert all(p.stat().st_size > 0 for p in run.glob("*.xplane.pb"))
    assert len(manifest["profiled_steps"]) >= 1 and "profile_error" not in manifest


def _untimed(run: Path) -> set[str]:
    """The tasks whose fetches from other tasks TensorFlow left untimed in some traced step (the manifest)."""
    manifest = json.loads((run / "manifest.json").read_text())
    return {task for tasks in manifest.get("untimed_fetches", {}).values() for task in tasks}


def test_cross_task_transfers_are_timed_and_drawn_as_arrows(ps_run):
    doc = _timeline(ps_run)
    events = doc["traceEvents"]
    fetches = [e for e in events if e.get("ph") == "X" and e["name"] == "RecvTensor"]
    assert fetches and all(e["args"]["from"].split("/device:")[0] != e["args"]["to"].split("/device:")[0]
                           for e in fetches)
    pid_of = {e["args"]["name"]: e["pid"] for e in events if e.get("name") == "process_name"}
    arrows = [e for e in events if e.get("ph") == "f" and e["cat"] == "transfer"]
    # a parameter server whose fetches TensorFlow timed (now and then one task's RPC log does not come back)
    ps = next(t for t in (PS0, PS1) if t not in _untimed(ps_run))
    into_ps = [a for a in arrows if a["pid"] == pid_of[f"{ps}/device:CPU:0"] and a["args"]["from"].startswith(W1)]
    assert into_ps  # gradients pushed from worker 1 to the ps
    ends_on_fetch = [a for a in into_ps if any(f["pid"] == a["pid"] and f["ts"] <= a["ts"] <= f["ts"] + f["dur"]
                                               for f in fetches)]
    assert ends_on_fetch


def test_manifest_records_the_cluster_and_clock_offsets_and_no_task_is_left(ps_run):
    manifest = json.loads((ps_run / "manifest.json").read_text())
    cluster = manifest["cluster"]
    assert sorted(cluster["spec"]) == ["ps", "worker"] and len(cluster["spec"]["worker"]) == 2
    pids = [t["pid"] for t in cluster["tasks"]]
    assert len(set(pids)) == 4 and os.getpid() not in pids and cluster["chief"]["pid"] == os.getpid()
    assert {t["host"] for t in cluster["tasks"]} == {"localhost"}
    offsets = manifest["clock_offsets"]
    assert set(offsets) == {W0, W1, PS0, PS1}
    for entry in offsets.values():
        assert entry["uncertainty_us"] > 0 and entry["end"] is not None
        assert abs(entry["offset_us"]) < 1e6  # one host, one clock: well under a second apart
    assert manifest["status"] == "complete" and "hang" not in manifest and not (ps_run / "hang").exists()
    assert not [p.name for p in (ps_run / "timelines").iterdir() if p.name.startswith(".rank")]  # probes removed
    assert _gone(pids, 0.5)


def test_comm_reports_cross_worker_transfer_time_and_the_straggler_worker(ps_run, capsys):
    assert main(["comm", "--json", str(ps_run)]) == 0
    document = json.loads(capsys.readouterr().out)
    tasks = {t["task"]: t for t in document["tasks"]}
    assert set(tasks) == {W0, W1, PS0, PS1}
    untimed = _untimed(ps_run)
    assert len(untimed) <= 1  # at most one task's RPC log lost in a step
    assert all(t["cross_task_transfer_us"] > 0 and t["cross_task_transfers"] > 0
               for name, t in tasks.items() if name not in untimed)
    assert [s["last_to_finish"] in (W0, W1) for s in document["straggler_workers"]] == [True]
    assert main(["comm", str(ps_run)]) == 0
    out, err = capsys.readouterr()
    assert "per task" in out and "straggler worker" in out
    for task in untimed:  # the task's 0 is said to be TensorFlow's missing log, not a task that fetched nothing
        assert tasks[task]["cross_task_transfers"] == 0 and f"tensor(s) that {task} fetched from other tasks" in err


def test_a_task_whose_fetches_tensorflow_did_not_time_is_named_with_their_count(ps_run):
    """The run's own RunMetadata, with one parameter server's timed fetches taken out as TensorFlow leaves them
    out when its RPC log does not come back: that task is named, with the tensors its partition graph receives
    from other tasks."""
    from tensorboard.compat.proto import config_pb2

    from rnnprof.rundir.chrome_trace import step_stats_to_chrome

    (path,) = (ps_run / "run_metadata").glob("step-*.pb")
    metadata = config_pb2.RunMetadata.FromString(path.read_bytes())
    step = int(path.stem.split("-")[1])
    whole = step_stats_to_chrome(metadata.step_stats, step, list(metadata.partition_graphs))["otherData"]
    manifest = json.loads((ps_run / "manifest.json").read_text())
    assert whole.get("untimed_fetches", {}) == manifest.get("untimed_fetches", {}).get(str(step), {})
    ps = next(t for t in (PS0, PS1) if t not in _untimed(ps_run))
    partition = next(g for g in metadata.partition_graphs if g.node[0].device.startswith(ps))
    receives = sum(1 for n in partition.node if n.op == "_Recv" and not n.attr["send_device"].s.decode().startswith(ps))
    kept = [d for d in metadata.step_stats.dev_stats
            if not (d.device.startswith(ps) and d.node_stats and all(n.node_name == "RecvTensor" for n in d.node_stats))]
    del metadata.step_stats.dev_stats[:]
    metadata.step_stats.dev_stats.extend(kept)
    cut = step_stats_to_chrome(metadata.step_stats, step, list(metadata.partition_graphs))["otherData"]
    assert receives > 0 and cut["untimed_fetches"] == {**whole.get("untimed_fetches", {}), ps: receives}


def test_count_ops_per_task(ps_run, capsys):
    assert main(["count-ops", "--json", str(ps_run)]) == 0
    by_task = json.loads(capsys.readouterr().out)["kernels"]["by_task"]
    assert set(by_task) == {W0, W1, PS0, PS1} and all(t["cpu_kernels"] > 0 for t in by_task.values())


# -- a worker killed mid-run -----------------------------------------------------------------------------

def test_a_worker_killed_mid_run_is_one_line_and_the_run_is_interrupted(tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    chief = subprocess.Popen([sys.executable, "-m", "rnnprof", "trace", *TINY[:-2], "--batches", "100000",
                              "--workers", "2", "--variable-update", "replicated", "--out", str(out)],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        tasks = None
        while time.monotonic() < deadline and chief.poll() is None:
            try:
                manifest = json.loads((out / "manifest.json").read_text())
            except (OSError, ValueError):
                manifest = {}
            if manifest.get("cluster") and manifest.get("session_config"):
                tasks = manifest["cluster"]["tasks"]
                time.sleep(1)  # into the steps (100000 timed steps: the run is still going)
                break
            time.sleep(0.2)
        assert tasks, "the run never started its steps"
        assert sorted((t["job"], t["task"]) for t in tasks) == [("worker", 0), ("worker", 1)]  # replicated: no ps
        victim = next(t for t in tasks if t["job"] == "worker" and t["task"] == 1)
        os.kill(victim["pid"], signal.SIGKILL)
        _, err = chief.communicate(timeout=60)
    finally:
        if chief.poll() is None:
            chief.kill()
            chief.wait()
    assert chief.returncode == 1
    lines = [line for line in err.splitlines() if "error" in line]
    assert lines == [f"rnnprof trace: error: worker task 1 ({victim['address']}, pid {victim['pid']}) was killed by "
                     "SIGKILL; the other tasks were stopped"]
    assert "Traceback" not in err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and "worker task 1" in manifest["error"]
    assert _gone([t["pid"] for t in tasks], 10)


# -- parameter servers: the greedy split against all variables on one ps task -----------------------------

@pytest.fixture(scope="module")
def two_ps_runs(ps_run):
    """The greedy split is ``ps_run``; against it, every variable on the first of the two ps tasks: the same
    cluster traced with ``--ps-placement first``, stored (tests/data/tf-run-cluster-ps-first, see its README; the
    capture of a cluster is checked on ``ps_run``, the rule's verdict here)."""
    return {"greedy": ps_run, "first": FIXTURES / "tf-run-cluster-ps-first"}


def _audit(run: Path, capsys) -> dict:
    main(["placement-audit", "--json", str(run)])
    return json.loads(capsys.readouterr().out)


def test_all_variables_on_one_of_two_ps_tasks_is_flagged(two_ps_runs, capsys):
    main(["placement-audit", "--json", str(two_ps_runs["first"])])
    out, err = capsys.readouterr()
    document = json.loads(out)
    pa008 = [f for f in document["findings"] if f["rule"] == "PA008-ps-task-imbalance"]
    # the traffic is judged where the trace holds it: now and then TensorFlow's RPC log of ps0's fetches does not
    # come back (the manifest's untimed fetches, said in a note), and the shares would follow what was recorded
    untimed = _untimed(two_ps_runs["first"])
    traffic = set() if PS0 in untimed else {"traffic received (bytes)"}
    assert {f["evidence"]["measure"] for f in pa008} == {"variable bytes"} | traffic
    for task in untimed:  # said on stderr, and in the document for a script
        assert f"tensor(s) that {task} fetched from other tasks" in err
        assert any(f"tensor(s) that {task} fetched from other tasks" in note for note in document["input_notes"])
    assert all(f["devices"] == [PS0] and f["evidence"]["share"] == 1.0 for f in pa008)
    pa003 = [f for f in document["findings"] if f["rule"] == "PA003-update-on-one-device"]
    assert [f["severity"] for f in pa003] == ["warning"] and PS0 in pa003[0]["title"]


def test_the_default_greedy_split_is_not_flagged(two_ps_runs, capsys):
    document = _audit(two_ps_runs["greedy"], capsys)
    assert "PA008-ps-task-imbalance" in document["rules_checked"]
    flagged = [f for f in document["findings"] if f["rule"] in ("PA008-ps-task-imbalance",
                                                                 "PA003-update-on-one-device")]
    assert flagged == []
    manifest = json.loads((two_ps_runs["greedy"] / "manifest.json").read_text())
    assert len({t["pid"] for t in manifest["cluster"]["tasks"]}) == 4


def test_a_balanced_cluster_has_no_memory_finding_between_its_workers_and_its_ps_tasks(ps_run, capsys):
    """Parameter servers hold variables while workers compute: the workers' peaks are compared with each other,
    the ps tasks' with each other. Against the four devices together, each worker stood above the ps tasks'
    median and PF008 raised an error on this balanced run."""
    assert main(["memory", "--json", str(ps_run)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert {d["device"].split("/replica:")[0] for d in document["devices"]} == {"/job:worker", "/job:ps"}
    assert document["imbalances"] == []
    main(["audit", "--json", str(ps_run)])
    assert [f for f in json.loads(capsys.readouterr().out)["findings"] if f["rule"] == "PF008"] == []


# -- scale across worker processes ----------------------------------------------------------------------

def test_scale_sweeps_workers_on_separate_processes(capsys):
    """Each worker count on a cluster of its own, its ps task too. The parameter-server mode only: a replicated
    cluster (workers, no ps task) is traced in the test of a worker killed mid-run and scaled on tasks started by
    hand below; the sweep's order over modes and counts is test_scale's (in one process)."""
    code = main(["scale", *TINY, "--workers", "1,2", "--variable-update", "parameter_server", "--json"])
    assert code == 0
    document = json.loads(capsys.readouterr().out)
    rows = document["rows"]
    assert [(r["variable_update"], r["workers"]) for r in rows] == [("parameter_server", 1), ("parameter_server", 2)]
    assert document["config"]["workers"] == [1, 2]
    for row in rows:
        jobs = sorted((p["job"], p["task"]) for p in row["processes"])
        assert jobs == sorted([("worker", k) for k in range(row["workers"])] + [("ps", 0)])
        assert row["batch_total"] == 4 * row["workers"]
    pids = [p["pid"] for r in rows for p in r["processes"]]
    assert len(set(pids)) == len(pids) and os.getpid() not in pids
    assert _gone(pids, 0.5)


# -- tasks started by hand, as on several hosts --------------------------------------------------------

def test_a_cluster_spec_runs_on_tasks_started_with_rnnprof_worker(tmp_path, capsys):
    from rnnprof.training import child_processes
    from rnnprof.training.cluster import free_ports

    spec = tmp_path / "cluster.json"
    spec.write_text(json.dumps({"worker": [f"localhost:{port}" for port in free_ports(2)]}))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    workers = [child_processes.start([sys.executable, "-m", "rnnprof", "worker", "--cluster-spec", str(spec),
                                    "--job", "worker", "--task", str(k)], env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL) for k in range(2)]
    try:
        code = main(["scale", *TINY, "--cluster-spec", str(spec), "--variable-update", "replicated", "--json"])
        assert code == 0
        (row,) = json.loads(capsys.readouterr().out)["rows"]
        assert row["workers"] == 2 and row["batch_total"] == 8
        assert [(p["job"], p["task"], p["pid"]) for p in row["processes"]] == [("worker", 0, None), ("worker", 1, None)]
        assert all(w.poll() is None for w in workers)  # rnnprof leaves tasks it did not start alone
    finally:
        for w in workers:
            child_processes.stop(w)


def test_the_critical_path_crosses_tasks_through_their_transfers(ps_run, capsys):
    """A parameter_server step on two workers and a ps: the step's DAG joins the tasks by their cross-task
    transfers, and the longest path runs on more than one task (a worker's push and the ps's update)."""
    assert main(["critical-path", "--json", str(ps_run)]) == 0
    document = json.loads(capsys.readouterr().out)
    for step in document["steps"]:
        assert step["edges"]["transfer"] > 0
        tasks = {link["device"].split("/device:")[0].rsplit("/", 1)[0] for link in step["links"]}
        tasks = {t for t in tasks if t.startswith("/job:")}
        assert len(tasks) >= 2 and any(t.startswith("/job:ps") for t in tasks), tasks
        assert any(link["edge"] == "transfer" for link in step["links"])


# -- what the servers expose ------------------------------------------------------------------------

def _listening(pid: int) -> set[tuple[str, int]]:
    import psutil

    return {(c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN}


def _reachable_from_outside(port: int) -> bool:
    """Whether a connection to ``port`` through this host's first non-loopback IPv4 address succeeds."""
    import ipaddress
    import socket

    import psutil

    outside = [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
               if a.family == socket.AF_INET and not ipaddress.ip_address(a.address).is_loopback]
    if not outside:
        pytest.skip("this host has no non-loopback IPv4 address")
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex((outside[0], port)) == 0


def test_worker_says_what_it_exposes_where_and_until_when_and_stops_then(tmp_path):
    from rnnprof.training.cluster import free_ports

    port = free_ports(1)[0]
    spec = tmp_path / "cs.json"
    spec.write_text(json.dumps({"worker": [f"localhost:{port}"]}))
    started = time.monotonic()
    worker = subprocess.Popen([sys.executable, "-m", "rnnprof", "worker", "--cluster-spec", str(spec), "--job",
                               "worker", "--task", "0", "--timeout", "8s"], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "300"})
    try:
        first = worker.stdout.readline()
        said = time.monotonic()  # the line comes once the server listens
        listening = _listening(worker.pid)
        reachable = _reachable_from_outside(port)
        worker.wait(timeout=60)
    finally:
        worker.kill()
    ended = time.monotonic()
    # TensorFlow listens on every interface, whatever the spec's host says: the line must say so
    assert {ip for ip, p in listening if p == port} & {"0.0.0.0", "::"}, listening
    assert reachable, "the server accepts connections through a non-loopback address"
    assert f":{port}, every interface" in first and "the cluster spec's host localhost limits nothing" in first
    assert "no authentication" in first and "trusted network" in first and "(--timeout 8s)" in first
    # the timeout counts from the moment the server listens: TensorFlow's import (seconds, a minute on loaded cores)
    # comes first
    assert worker.returncode == 0 and ended - started >= 8 and 7 <= ended - said < 38, (ended - started, ended - said)
    assert "stopped after --timeout 8s" in worker.stdout.read()


def test_a_local_cluster_says_once_what_its_servers_expose(one_task):
    port = int(one_task["tasks"][0]["address"].rpartition(":")[2])
    listening, lines = one_task["listening"], one_task["exposed"]
    assert {ip for ip, p in listening if p == port} & {"0.0.0.0", "::"}
    assert len(lines) == 1 and f"every interface, ports {port}" in lines[0] and "no authentication" in lines[0]


def test_worker_refuses_a_duration_it_cannot_read(capsys):
    from rnnprof.cli import main

    assert main(["worker", "--cluster-spec", "x.json", "--job", "worker", "--task", "0", "--timeout", "soon"]) == 2
    err = capsys.readouterr().err
    assert "'soon' is not a duration" in err and len(err.strip().splitlines()) <= 2
