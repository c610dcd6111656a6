"""The manifest of a PyTorch run whose ranks capture themselves, combined from one record per rank.

Each rank of a captured script writes ``torch/.rank<r>.facts.json`` (its ``TorchCapture`` facts plus
pid, status, exit code and error) when it starts and when it ends, then rebuilds ``manifest.json`` from
every record present, under a lock on ``torch/.lock``: the last rank to finish leaves the complete
manifest, with no process that has to outlive the ranks. ``rnnprof trace`` rebuilds it once more after
the launcher exits (``finish``), marking ranks that died without a word and the run's exit code.

Manifest fields of such a run: ``framework`` "torch", ``world_size``, ``backend`` (from
``torch.distributed`` once initialised, else None), ``ranks`` (one record per rank, by rank),
``captured["kineto"]`` (the ranks' trace files), ``versions`` (the lowest rank's: torch, CUDA or ROCm,
cuDNN, NCCL, the GPU model, TensorFlow only where imported), ``steps_seen`` (the most steps a rank ran) and
``status``: "complete" once every rank has closed normally, "interrupted" as soon as one was stopped
or failed. Where ranks failed: ``error`` "rank R: why" of the first to fail (``failures``), ``failed_rank``
R, and ``errors_after``, the other ranks' errors, in the order they came (consequences of the first).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import sys
import threading
import time
from pathlib import Path

from rnnprof.errors import InputError
from rnnprof import rundir
from rnnprof.rundir.manifest import new_manifest, now, read_manifest_json
from rnnprof.rundir.writer import atomic_write_json

FRAMEWORK = "torch"
_RECORD = ".rank{rank}.facts.json"


def env_int(name: str, default: int) -> int:
    """A whole number torchrun sets in each rank's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), or
    ``default`` where it is missing or not a number."""
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def process_group_backend() -> str | None:
    """The process group's backend once ``torch.distributed`` is initialised in this rank, else None."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return str(dist.get_backend())
    return None


def record_path(run_dir: str | Path, rank: int) -> Path:
    return Path(run_dir) / rundir.TORCH_TRACES_DIR / _RECORD.format(rank=int(rank))


def write_record(run_dir: str | Path, record: dict, command=None) -> dict:
    """Save one rank's record and rebuild the manifest from every rank's; returns the manifest."""
    atomic_write_json(record_path(run_dir, record["rank"]), record)
    return combine(run_dir, command)


def read_records(run_dir: str | Path) -> list[dict]:
    """Every rank's record, by rank; unreadable ones (a rank killed while writing cannot leave one) skipped."""
    records = []
    for path in sorted((Path(run_dir) / rundir.TORCH_TRACES_DIR).glob(_RECORD.format(rank="*"))):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and isinstance(record.get("rank"), int):
            records.append(record)
    return sorted(records, key=lambda r: r["rank"])


@contextlib.contextmanager
def _locked(run_dir: Path):
    lock = run_dir / rundir.TORCH_TRACES_DIR / ".lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDONLY | os.O_CREAT, 0o644)  # an empty file, only ever locked
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


DIED = "the rank's process ended without closing its capture (killed, crashed or os._exit)"


def combine(run_dir: str | Path, command=None, exit_code: int | None = None, exited: dict | None = None) -> dict:
    """Rebuild and save the manifest from the ranks' records (see the module); ``exit_code``: the launcher
    has exited with it, so a rank still "running" died without closing its capture; ``exited``: when each
    rank's process was seen to end (``ExitWatch``), by rank, which orders the ranks' failures."""
    run_dir = Path(run_dir)
    with _locked(run_dir):
        records = read_records(run_dir)
        for record in records:
            if exited and record["rank"] in exited:
                record["exited"] = exited[record["rank"]]
        manifest = _manifest_or_new(run_dir, command)
        finished = exit_code is not None
        if finished:
            for record in records:
                if record.get("status") == rundir.STATUS_RUNNING:
                    record["status"] = rundir.STATUS_INTERRUPTED
                    record.setdefault("error", DIED)
            _match_disk(run_dir, records)
        _record_ranks(manifest, run_dir, records)
        hung = manifest.get("status") == rundir.STATUS_HUNG  # kept: the ranks were stopped because they hung
        manifest["status"] = rundir.STATUS_HUNG if hung else _job_status(records, manifest["world_size"], exit_code)
        failed = None if hung else failing_rank(records)
        if failed is not None:
            manifest["error"] = f"rank {failed['rank']}: {failed['error']}"
            manifest["failed_rank"] = failed["rank"]
            manifest["errors_after"] = [f"rank {r['rank']}: {r['error']}" for r in failures(records)[1:]]
        if finished:
            manifest["exit_code"] = exit_code
        if manifest["status"] != rundir.STATUS_RUNNING:
            manifest["finished"] = now()
        atomic_write_json(run_dir / rundir.MANIFEST, manifest)
        return manifest


def mark_hung(run_dir: str | Path, hang: dict) -> None:
    """Mark the run ``hung`` with what the hang watch found (``hang``: the manifest's ``hang`` object)."""
    run_dir = Path(run_dir)
    with _locked(run_dir):
        manifest = _manifest_or_new(run_dir, None)
        manifest["status"] = rundir.STATUS_HUNG
        manifest["hang"] = hang
        atomic_write_json(run_dir / rundir.MANIFEST, manifest)


def update_manifest(run_dir: str | Path, **fields) -> None:
    """Set ``fields`` in the run's manifest, under the ranks' lock (the watch's summary, once the job has ended)."""
    run_dir = Path(run_dir)
    with _locked(run_dir):
        manifest = _manifest_or_new(run_dir, None)
        manifest.update(fields)
        atomic_write_json(run_dir / rundir.MANIFEST, manifest)


def _manifest_or_new(run_dir: Path, command) -> dict:
    """The run directory's manifest, or a new one for ``command`` (default: this process's) where it has none."""
    try:
        manifest = read_manifest_json(run_dir)  # rewritten below, every key kept
    except InputError:
        manifest = {}
    if manifest.get("format") != rundir.MANIFEST_FORMAT:
        command = list(command if command is not None else sys.argv)
        manifest = new_manifest(command, {"script": command})
    return manifest


def _record_ranks(manifest: dict, run_dir: Path, records: list[dict]) -> None:
    """The job's figures from its ranks' records: versions, world size, backend, the records, steps seen and the
    traces on disk."""
    versions = next((r["versions"] for r in records if isinstance(r.get("versions"), dict)), None)
    if versions:  # the ranks' own: torch and its libraries, TensorFlow only where a rank imported it
        manifest["versions"] = dict(versions)
    manifest.update({
        "framework": FRAMEWORK,
        "world_size": max([r.get("world_size") or 1 for r in records] or [1]),
        "backend": next((r["backend"] for r in records if r.get("backend")), None),
        "ranks": records,
        "steps_seen": max([r.get("steps_run") or 0 for r in records] or [0]),
    })
    traces = [r["trace"] for r in records if r.get("trace") and (run_dir / r["trace"]).is_file()]
    manifest.setdefault("captured", {})["kineto"] = sorted(traces)
    recorders = [r["flight_recorder"] for r in records if r.get("flight_recorder")
                 and (run_dir / r["flight_recorder"]).is_file()]
    if recorders:
        manifest["captured"]["flight_recorder"] = sorted(recorders)


def _job_status(records: list[dict], world: int, exit_code: int | None) -> str:
    """Interrupted when a rank was (or the launcher exited with an error), complete when every rank of the world
    completed, else running."""
    statuses = [r.get("status") for r in records]
    if rundir.STATUS_INTERRUPTED in statuses or (exit_code is not None and exit_code != 0):
        return rundir.STATUS_INTERRUPTED
    if len(records) >= world and all(s == rundir.STATUS_COMPLETE for s in statuses):
        return rundir.STATUS_COMPLETE
    return rundir.STATUS_RUNNING


def _match_disk(run_dir: Path, records: list[dict]) -> None:
    """Once every rank has ended: each record names its trace exactly when the file is there. A trace is only
    ever renamed into place whole, so one on disk that its rank did not record (the rank was killed after
    writing it) is a complete window: the window's steps. Scratch files of an export cut short are removed."""
    for record in records:
        path = run_dir / rundir.TORCH_TRACES_DIR / rundir.torch_trace_name(record["rank"])
        listed = record.get("trace")
        if listed and not (run_dir / listed).is_file():
            record.update(trace=None, steps=[])
        elif not listed and path.is_file():
            skip, window = record.get("skip_steps"), record.get("window_steps")
            skip = skip + record.get("first_step", 0) if isinstance(skip, int) else skip
            record["trace"] = path.relative_to(run_dir).as_posix()
            record["steps"] = list(range(skip, skip + window)) if isinstance(skip, int) and isinstance(window, int) else []
        elif not listed:
            record["steps"] = []
        atomic_write_json(record_path(run_dir, record["rank"]), record)
    for scratch in (run_dir / rundir.TORCH_TRACES_DIR).glob(".rank*.json.gz.*"):
        scratch.unlink(missing_ok=True)


# A rank's end is seen (``ExitWatch``) only after the kernel has torn the process down, its sockets closed
# first: a peer blocked in a collective may record the broken connection a moment earlier than that.
EXIT_SEEN_LAG_S = 1.0


def failures(records: list[dict]) -> list[dict]:
    """The ranks that failed (not those stopped by a signal), first failure first: by when the rank closed
    its capture with its error (``ended``) or, for one that could not (it died without a word), when its
    process was seen to end (``exited``) less ``EXIT_SEEN_LAG_S``. A rank whose peer died fails after it (a
    collective finds the connection closed)."""
    def failed_at(record: dict) -> float:
        if isinstance(record.get("ended"), (int, float)):
            return record["ended"]
        if isinstance(record.get("exited"), (int, float)):
            return record["exited"] - EXIT_SEEN_LAG_S
        return float("inf")

    failed = [r for r in records if r.get("error") and not r.get("stopped")]
    return sorted(failed, key=lambda r: (failed_at(r), r["rank"]))


def failing_rank(records: list[dict]) -> dict | None:
    """The rank whose failure ended the run: the first to fail (``failures``)."""
    failed = failures(records)
    return failed[0] if failed else None


class ExitWatch:
    """When each rank's process ends, seen from rnnprof's own process: the ranks are torchrun's children, not
    rnnprof's, so their exits are watched through pidfds (Linux), read from their records as they appear.
    ``exited``: rank -> wall time (``time.time()``) its process was seen to end."""

    def __init__(self, run_dir: str | Path, poll_s: float = 0.02):
        self.run_dir = Path(run_dir)
        self.exited: dict[int, float] = {}
        self._poll_s = poll_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="rnnprof-rank-exits", daemon=True)

    def __enter__(self) -> "ExitWatch":
        if hasattr(os, "pidfd_open"):
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)

    def _watch(self) -> None:
        watched: dict[int, int] = {}  # pidfd -> rank
        seen: set[tuple[int, int]] = set()
        poller = select.poll()
        last_read = 0.0
        try:
            while not self._stop.is_set():
                if time.monotonic() - last_read > 0.1:
                    last_read = time.monotonic()
                    for record in read_records(self.run_dir):
                        key = (record["rank"], record.get("pid"))
                        if key in seen or not isinstance(key[1], int) or key[1] == os.getpid():
                            continue
                        seen.add(key)
                        try:
                            fd = os.pidfd_open(key[1])
                        except OSError:  # gone before it was watched: it ended by now
                            self.exited.setdefault(key[0], time.time())
                            continue
                        watched[fd] = key[0]
                        poller.register(fd, select.POLLIN)
                for fd, _ in poller.poll(self._poll_s * 1000):
                    self.exited.setdefault(watched.pop(fd), time.time())
                    poller.unregister(fd)
                    os.close(fd)
        finally:
            for fd in watched:
                os.close(fd)


def exit_code_of(records: list[dict], launcher_code: int) -> int:
    """The run's exit code: the failing rank's own where it has one (torchrun reports 1 for any failure)."""
    failed = failing_rank(records)
    if failed is not None and isinstance(failed.get("exit_code"), int) and failed["exit_code"]:
        return failed["exit_code"]
    return launcher_code


def leftover_ranks(records: list[dict]) -> list[int]:
    """Pids of ranks still running the capture bootstrap (by /proc), to be stopped after the launcher exited."""
    left = []
    for record in records:
        pid = record.get("pid")
        if not isinstance(pid, int) or pid == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if b"rnnprof.recording.script" in cmdline and state not in ("Z", "X"):
            left.append(pid)
    return left
