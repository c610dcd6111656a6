"""A TensorFlow gRPC cluster: its spec, the server of one task, and a localhost cluster of task processes.

A cluster spec maps each job (``worker``, ``ps``) to its tasks' ``host:port`` addresses, as
``tf.train.ClusterSpec`` does. ``rnnprof worker`` runs one task's ``tf.distribute.Server`` (``serve``);
``LocalCluster`` starts one such process per task on free localhost ports, waits until each listens,
watches them, and stops them all when the run ends, on success, error, Ctrl-C, or when one dies.
A run on real machines uses a spec file whose tasks the user started with ``rnnprof worker``.

The chief is the rnnprof process: it builds the graph and drives a ``Session`` on worker 0's master.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rnnprof.training import child_processes
from rnnprof.errors import InputError, TaskFailed, UsageError
from rnnprof.rundir.writer import atomic_write_json
from rnnprof.frameworks.tensorflow import import_tensorflow
from rnnprof.training.exposure import cluster_line, listening

WORKER_JOB = "worker"
PS_JOB = "ps"
JOBS = (WORKER_JOB, PS_JOB)
READY_TIMEOUT_S = 60.0
WATCH_INTERVAL_S = 0.2
# After a task dies, how long the chief may stay blocked in a step before it gives up on its own:
# a dead master (worker 0) leaves the session retrying its RPC without end.
HUNG_GRACE_S = 10.0
# After an error in the chief, how long to look for a task that died and caused it.
DEATH_WAIT_S = 1.0
# Set in a task's environment when the chief watches for hangs: "RUN<TAB>N", the task's probe (its stacks and pid)
# under the run directory, N its place in ``ClusterSpec.tasks()`` (rnnprof.recording.hang_probe.task_probe).
TASK_PROBE_ENV = "RNNPROF_TASK_PROBE"
EXPECTED = 'a JSON object mapping "worker" (and optionally "ps") to lists of "host:port"'


def task_name(job: str, index: int) -> str:
    """The TF device prefix of a task: ``/job:worker/replica:0/task:1``."""
    return f"/job:{job}/replica:0/task:{index}"


@dataclass(frozen=True)
class ClusterSpec:
    """Jobs to their tasks' addresses; ``worker`` has at least one task."""

    jobs: dict  # job -> tuple of "host:port"

    @property
    def workers(self) -> int:
        return len(self.jobs.get(WORKER_JOB, ()))

    @property
    def ps_tasks(self) -> int:
        return len(self.jobs.get(PS_JOB, ()))

    def tasks(self) -> list[tuple[str, int, str]]:
        """(job, index, address) of every task, workers first."""
        return [(job, k, address) for job in JOBS for k, address in enumerate(self.jobs.get(job, ()))]

    def master(self) -> str:
        """The session target: worker 0's gRPC address."""
        return f"grpc://{self.jobs[WORKER_JOB][0]}"

    def to_dict(self) -> dict:
        return {job: list(addresses) for job, addresses in self.jobs.items()}


def parse_cluster_spec(value, source: str) -> ClusterSpec:
    """A ``ClusterSpec`` from the parsed JSON of ``source``; ``InputError`` naming what is wrong."""
    if not isinstance(value, dict) or not value:
        raise InputError(source, "not a cluster spec", EXPECTED)
    unknown = sorted(set(value) - set(JOBS))
    if unknown:
        raise InputError(source, f"unknown job {unknown[0]!r}", EXPECTED)
    jobs = {}
    for job in JOBS:
        addresses = value.get(job, [])
        if not isinstance(addresses, list) or not all(isinstance(a, str) and _address_ok(a) for a in addresses):
            raise InputError(source, f"job {job!r} is not a list of \"host:port\"", EXPECTED)
        if addresses:
            jobs[job] = tuple(addresses)
    if not jobs.get(WORKER_JOB):
        raise InputError(source, "no worker task", EXPECTED)
    every = [a for addresses in jobs.values() for a in addresses]
    if len(set(every)) != len(every):
        raise InputError(source, "an address is given to two tasks", EXPECTED)
    return ClusterSpec(jobs)


def _address_ok(address: str) -> bool:
    host, _, port = address.rpartition(":")
    return bool(host) and port.isdigit() and 0 < int(port) < 65536


def read_cluster_spec(path: str | Path) -> ClusterSpec:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror or exc})", EXPECTED) from None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InputError(path, f"not JSON ({exc})", EXPECTED) from None
    return parse_cluster_spec(value, str(path))


def free_ports(count: int, host: str = "localhost") -> list[int]:
    """``count`` distinct ports free on ``host`` now (held open together, so none is handed out twice)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def local_spec(workers: int, ps_tasks: int, host: str = "localhost") -> ClusterSpec:
    ports = free_ports(workers + ps_tasks, host)
    jobs = {WORKER_JOB: tuple(f"{host}:{p}" for p in ports[:workers])}
    if ps_tasks:
        jobs[PS_JOB] = tuple(f"{host}:{p}" for p in ports[workers:])
    return ClusterSpec(jobs)


def server_config(devices: int, inter_op_threads: int = 0, intra_op_threads: int = 0):
    """The ConfigProto every task's server runs with: ``devices`` logical CPU devices, worker 0 leads collectives."""

    tf = import_tensorflow()
    proto = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=inter_op_threads,
                                     intra_op_parallelism_threads=intra_op_threads)
    proto.device_count["CPU"] = devices
    proto.experimental.collective_group_leader = task_name(WORKER_JOB, 0)
    return proto


def serve(spec: ClusterSpec, job: str, task: int, devices: int = 1, on_ready: Callable[[], None] = lambda: None,
          timeout_s: float | None = None) -> None:
    """Run task ``job``/``task`` of ``spec`` until the process is stopped, or for ``timeout_s`` seconds
    (``rnnprof worker``); ``on_ready`` runs once the server listens."""
    if job not in spec.jobs:
        raise UsageError(f"--job {job}: the cluster spec has no such job (it has {', '.join(spec.jobs)})")
    if not 0 <= task < len(spec.jobs[job]):
        raise UsageError(f"--task {task}: job {job} has tasks 0 to {len(spec.jobs[job]) - 1}")

    tf = import_tensorflow()
    server = tf.distribute.Server(tf.train.ClusterSpec(spec.to_dict()), job_name=job, task_index=task,
                                  config=server_config(devices if job == WORKER_JOB else 1), start=True)
    on_ready()
    if timeout_s is None:
        server.join()
        return
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 1.0))  # the server ends with the process


@dataclass
class TaskProcess:
    job: str
    index: int
    address: str
    process: subprocess.Popen
    log: Path

    @property
    def name(self) -> str:
        return f"{self.job} task {self.index} ({self.address}, pid {self.process.pid})"

    def exit_description(self) -> str:
        code = self.process.returncode
        if code is not None and code < 0:
            try:
                return f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        last = _last_line(self.log)
        return f"exited with code {code}" + (f": {last}" if last else "")


def _end_with_parent() -> None:
    """In a task process before it starts: SIGTERM when the chief dies, even by SIGKILL (Linux only)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _last_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""


class LocalCluster:
    """One ``rnnprof worker`` process per task of ``spec``, on this machine.

    ``start()`` launches them and waits until each accepts connections; a watcher thread notices a
    task that dies and stops the others. ``stop()`` ends every task (SIGTERM, then SIGKILL) and is safe
    to call twice. ``failure()`` is the ``TaskFailed`` of the first task that died, or None. If the
    chief is still blocked ``HUNG_GRACE_S`` after a death, ``on_hung`` runs (it should end the process).
    """

    def __init__(self, spec: ClusterSpec, devices: int = 1, on_hung: Callable[[TaskFailed], None] | None = None,
                 probe_dir: Path | None = None):
        self.spec = spec
        self.probe_dir = probe_dir  # the run directory, when the chief watches the tasks for a hang
        self.devices = devices
        self.tasks: list[TaskProcess] = []
        self.on_hung = on_hung
        self._dir = Path(tempfile.mkdtemp(prefix="rnnprof-cluster-"))
        self._dead: TaskProcess | None = None
        self._stopping = threading.Event()
        self._handled = threading.Event()
        self._watcher: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> "LocalCluster":
        spec_path = self._dir / "cluster.json"
        atomic_write_json(spec_path, self.spec.to_dict())
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
        env["PYTHONPATH"] = os.pathsep.join(p for p in [str(Path(__file__).resolve().parents[3]),
                                                        env.get("PYTHONPATH", "")] if p)
        try:
            for number, (job, index, address) in enumerate(self.spec.tasks()):
                if self.probe_dir is not None:
                    env[TASK_PROBE_ENV] = f"{self.probe_dir}\t{number}"
                log = self._dir / f"{job}-{index}.log"  # the task's own output, in the temporary folder
                out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    process = child_processes.start(
                        [sys.executable, "-m", "rnnprof", "worker", "--cluster-spec", str(spec_path), "--job", job,
                         "--task", str(index), "--devices", str(self.devices)],
                        stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                        preexec_fn=_end_with_parent)
                finally:
                    os.close(out)
                self.tasks.append(TaskProcess(job, index, address, process, log))
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self._watcher = threading.Thread(target=self._watch, name="rnnprof-cluster-watch", daemon=True)
        self._watcher.start()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        waiting = list(self.tasks)
        while waiting:
            for task in list(waiting):
                if task.process.poll() is not None:
                    raise TaskFailed(f"{task.name} {task.exit_description()} before it was ready")
                host, _, port = task.address.rpartition(":")
                try:
                    with socket.create_connection((host, int(port)), timeout=0.5):
                        waiting.remove(task)
                except OSError:
                    pass
            if waiting and time.monotonic() > deadline:
                raise TaskFailed(f"{waiting[0].name} did not listen within {READY_TIMEOUT_S:g} s")
            if waiting:
                time.sleep(0.1)

    def _watch(self) -> None:
        while not self._stopping.wait(WATCH_INTERVAL_S):
            dead = next((t for t in self.tasks if t.process.poll() is not None), None)
            if dead is None:
                continue
            self._dead = dead
            if self._handled.wait(HUNG_GRACE_S) or self._stopping.is_set():
                return
            self.give_up(self.failure())
            return

    def give_up(self, failure: TaskFailed) -> None:
        """Stop every task and hand ``failure`` to ``on_hung`` (which ends the process): the chief is blocked."""
        self.stop()
        if self.on_hung is not None:
            self.on_hung(failure)

    def failure(self) -> TaskFailed | None:
        """The first dead task as one line, or None while all run."""
        dead = self._dead or next((t for t in self.tasks if t.process.poll() is not None), None)
        if dead is None or self._stopping.is_set() and self._dead is None:
            return None
        self._dead = dead
        return TaskFailed(f"{dead.name} {dead.exit_description()}; the other tasks were stopped")

    def handled(self) -> None:
        """The chief has seen the failure and is cleaning up: the watcher need not end the process."""
        self._handled.set()

    def stop(self) -> None:
        self._stopping.set()
        for task in self.tasks:
            child_processes.stop(task.process)
        shutil.rmtree(self._dir, ignore_errors=True)

    def exposure(self) -> str:
        """One line: the addresses the tasks' servers listen on (measured) and what that exposes."""

        return cluster_line([(t.address, listening(int(t.address.rpartition(":")[2]))) for t in self.tasks])

    def describe(self) -> list[dict]:
        """The manifest's ``cluster.tasks``: job, index, address, host and pid of every task."""
        return [{"job": t.job, "task": t.index, "address": t.address, "host": t.address.rpartition(":")[0],
                 "pid": t.process.pid} for t in self.tasks]

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def describe_remote(spec: ClusterSpec) -> list[dict]:
    """Tasks rnnprof did not start: their pids are not known here."""
    return [{"job": job, "task": k, "address": address, "host": address.rpartition(":")[0], "pid": None}
            for job, k, address in spec.tasks()]


def exit_with(failure: TaskFailed) -> None:
    """End the process with the one line ``cli.main`` would print for ``failure``."""
    command = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in ("trace", "scale") else ""
    print(f"rnnprof{' ' + command if command else ''}: error: {failure}", file=sys.stderr, flush=True)
    os._exit(failure.exit_code)


@contextlib.contextmanager
def running_cluster(config, on_hung: Callable[[TaskFailed], None] | None = None, probe_dir: Path | None = None,
                    on_started: Callable[[LocalCluster], None] = lambda cluster: None,
                    on_exposed: Callable[[str], None] = lambda line: print(f"note: {line}", file=sys.stderr,
                                                                               flush=True)):
    """The cluster ``config`` runs on, for the length of the block: yields ``(spec, tasks)``.

    Without ``--workers`` or ``--cluster-spec``: ``(None, [])``. With ``--cluster-spec``: the spec and its
    tasks as described (started elsewhere with ``rnnprof worker``). With ``--workers``: a ``LocalCluster``
    started here and stopped when the block ends, however it ends; an error raised while a task is
    dead becomes that task's one-line ``TaskFailed``. ``on_hung(failure)`` runs, then the process exits,
    if the chief stays blocked after a task died (a dead worker 0 leaves its session waiting). ``probe_dir``:
    the tasks keep their hang probes there; ``on_started`` gets the ``LocalCluster`` once it runs.
    """
    if config.cluster_spec is not None:
        spec = read_cluster_spec(config.cluster_spec)
        yield spec, describe_remote(spec)
        return
    if not config.workers:
        yield None, []
        return

    def hung(failure: TaskFailed) -> None:
        if on_hung is not None:
            on_hung(failure)
        exit_with(failure)

    spec = local_spec(config.workers, config.ps_tasks)
    with child_processes.signals_interrupt():
        cluster = LocalCluster(spec, devices=config.devices, on_hung=hung, probe_dir=probe_dir).start()
        on_started(cluster)
        on_exposed(cluster.exposure())
        try:
            yield spec, cluster.describe()
        except BaseException as exc:
            failure = cluster.failure()
            deadline = time.monotonic() + DEATH_WAIT_S
            while failure is None and not isinstance(exc, KeyboardInterrupt) and time.monotonic() < deadline:
                time.sleep(0.05)  # a task's connections close as it exits, a moment before it can be reaped
                failure = cluster.failure()
            if failure is not None and not isinstance(exc, KeyboardInterrupt):
                cluster.handled()
                raise failure from None
            raise
        finally:
            cluster.handled()
            cluster.stop()
