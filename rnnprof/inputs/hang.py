"""What ``rnnprof hang`` reads: a run directory's ``hang/`` folder, or flight-recorder dumps and stack files
made elsewhere (one per rank, the rank the last number of the file's name), given or in a folder."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from rnnprof import rundir
from rnnprof.analyzers.hang import RankRecorder, RankStacks
from rnnprof.errors import InputError
from rnnprof.rundir.manifest import read_manifest
from rnnprof.traces.flight_recorder import rank_of, read_flight_recorder
from rnnprof.traces.stack_dump import CHIEF_STACKS, read_stacks

EXPECTED = ("a run directory that `rnnprof trace` marked hung, or flight-recorder dumps (one per rank) and "
            "faulthandler stack files (*.txt)")
STACKS_SUFFIX = ".txt"


@dataclass
class HangInputs:
    recorders: dict[int, RankRecorder] = field(default_factory=dict)
    stacks: dict[int, RankStacks] = field(default_factory=dict)
    world_size: int | None = None
    task_names: dict[int, str] = field(default_factory=dict)  # a TensorFlow cluster's tasks, by number
    chief: RankStacks | None = None  # ... and its chief's stacks
    process: bool = False  # one TensorFlow process (a script, a workload without a cluster): its stacks alone
    remote: bool = False  # a TensorFlow cluster of tasks started elsewhere: its chief's stacks alone
    notes: list[str] = field(default_factory=list)


def read_hang_inputs(paths: Sequence[str | Path]) -> HangInputs:
    got = HangInputs()
    for path in map(Path, paths):
        if path.is_dir():
            _run_dir(path, got)
        elif path.is_file():
            _file(path, got)
        else:
            raise InputError(path, "does not exist", EXPECTED)
    if not got.recorders and not got.stacks and got.chief is None:
        raise InputError(", ".join(map(str, paths)), "holds no flight-recorder dump and no stacks", EXPECTED)
    return got


def _run_dir(path: Path, got: HangInputs) -> None:
    if not rundir.is_run_dir(path):  # a folder of dumps and stack files
        files = [f for f in sorted(path.iterdir()) if f.is_file() and not f.name.startswith(".")]
        if not files:
            raise InputError(path, "is an empty folder", EXPECTED)
        for file in files:
            _file(file, got)
        return
    manifest = read_manifest(path)
    folder = path / rundir.HANG_DIR
    if not folder.is_dir():
        raise InputError(path, f"has no {rundir.HANG_DIR}/ folder: the run did not hang (its status is "
                               f"{manifest.status or 'missing'!r})", EXPECTED)
    got.world_size = manifest.world_size
    got.task_names = dict(enumerate((manifest.hang or {}).get("task_names") or []))
    got.process = (manifest.hang or {}).get("scope") == rundir.HANG_SCOPE_PROCESS
    got.remote = (manifest.hang or {}).get("scope") == rundir.HANG_SCOPE_REMOTE
    if got.task_names and (folder / CHIEF_STACKS).is_file():
        got.chief = read_stacks(folder / CHIEF_STACKS, -1)
    for file in sorted(folder.iterdir()):
        if file.name.startswith("rank") and file.is_file():
            _file(file, got)


def _file(path: Path, got: HangInputs) -> None:
    rank = rank_of(path)
    if path.name.endswith(STACKS_SUFFIX):
        if rank in got.stacks:
            raise InputError(path, f"a second stack file of rank {rank}", "one per rank")
        got.stacks[rank] = read_stacks(path, rank)
        return
    if rank in got.recorders:
        raise InputError(path, f"a second flight-recorder dump of rank {rank}", "one per rank")
    got.recorders[rank], notes = read_flight_recorder(path, rank)
    got.notes += notes
