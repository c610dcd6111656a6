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
or failed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
from pathlib import Path

from rnnprof.errors import InputError
from rnnprof.profiler import rundir
from rnnprof.profiler.rundir.manifest import new_manifest, now, read_manifest
from rnnprof.profiler.rundir.writer import atomic_write_json

FRAMEWORK = "torch"
_RECORD = ".rank{rank}.facts.json"


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


def combine(run_dir: str | Path, command=None, exit_code: int | None = None) -> dict:
    """Rebuild and save the manifest from the ranks' records (see the module); ``exit_code``: the launcher
    has exited with it, so a rank still "running" died without closing its capture."""
    run_dir = Path(run_dir)
    with _locked(run_dir):
        records = read_records(run_dir)
        try:
            manifest = read_manifest(run_dir)
        except InputError:
            manifest = {}
        if manifest.get("format") != rundir.MANIFEST_FORMAT:
            command = list(command if command is not None else sys.argv)
            manifest = new_manifest(command, {"script": command})
        finished = exit_code is not None
        if finished:
            for record in records:
                if record.get("status") == rundir.STATUS_RUNNING:
                    record["status"] = rundir.STATUS_INTERRUPTED
                    record.setdefault("error", "the rank died without closing its capture")
        versions = next((r["versions"] for r in records if isinstance(r.get("versions"), dict)), None)
        if versions:  # the ranks' own: torch and its libraries, TensorFlow only where a rank imported it
            manifest["versions"] = dict(versions)
        world = max([r.get("world_size") or 1 for r in records] or [1])
        manifest.update({
            "framework": FRAMEWORK,
            "world_size": world,
            "backend": next((r["backend"] for r in records if r.get("backend")), None),
            "ranks": records,
            "steps_seen": max([r.get("steps_run") or 0 for r in records] or [0]),
        })
        traces = [r["trace"] for r in records if r.get("trace") and (run_dir / r["trace"]).is_file()]
        manifest.setdefault("captured", {})["kineto"] = sorted(traces)
        statuses = [r.get("status") for r in records]
        if rundir.STATUS_INTERRUPTED in statuses or (finished and exit_code != 0):
            manifest["status"] = rundir.STATUS_INTERRUPTED
        elif len(records) >= world and all(s == rundir.STATUS_COMPLETE for s in statuses):
            manifest["status"] = rundir.STATUS_COMPLETE
        else:
            manifest["status"] = rundir.STATUS_RUNNING
        failed = failing_rank(records)
        if failed is not None:
            manifest["error"] = f"rank {failed['rank']}: {failed['error']}"
        if finished:
            manifest["exit_code"] = exit_code
        if manifest["status"] != rundir.STATUS_RUNNING:
            manifest["finished"] = now()
        atomic_write_json(run_dir / rundir.MANIFEST, manifest)
        return manifest


def failing_rank(records: list[dict]) -> dict | None:
    """The rank whose failure ended the run: the first to fail on its own, not one stopped by a signal."""
    failed = [r for r in records if r.get("error") and not r.get("stopped")]
    return min(failed, key=lambda r: r.get("ended", float("inf"))) if failed else None


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
        if b"rnnprof.profiler.capture.script" in cmdline and state not in ("Z", "X"):
            left.append(pid)
    return left
