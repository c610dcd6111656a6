"""A folder of Kineto rank files (``*.json``, ``*.json.gz``): the traces of one job, one file per rank.

``parse`` finds the files and each one's rank without decoding them: the rank and world size come
from the ``distributedInfo`` in the file's first bytes (where PyTorch writes it), or, when a file
has none, from the last number in its name (``rank3.json``, ``trace_3.json.gz``), with a note
saying so. Files that are not Kineto traces are skipped with a note. A folder with no rank file,
two files of one rank, or files of different world sizes is an ``InputError``.

``events`` loads and merges every rank (one process); the commands that analyse a whole job read
``RankFolder.files`` themselves and analyse each rank apart (``rnnprof.job.ranks``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from rnnprof.traces.left_out import leave_out
from rnnprof.paths import broken, broken_links, shown
from rnnprof.errors import InputError
from rnnprof.events import EventTable, Manifest
from rnnprof import rundir
from rnnprof.rundir.manifest import listed_torch_traces, read_manifest
from rnnprof.traces import kineto
from rnnprof.traces.formats import PREFIX_BYTES
from rnnprof.traces.jsonstream import read_prefix
from rnnprof.traces.memo import remembered
from rnnprof.traces.merge import merge_tables

PATTERNS = ("*.json", "*.json.gz")
EXPECTED = "a folder of Kineto/PyTorch profiler traces, one per rank (*.json or *.json.gz)"
FROM_INFO, FROM_NAME = "distributedInfo", "file name"
_INFO = re.compile(rb'"distributedInfo"\s*:\s*(?=\{)')
_NUMBER = re.compile(r"(\d+)")


@dataclass(frozen=True)
class RankFile:
    path: Path
    rank: int
    world_size: int | None  # None when the file does not say
    rank_from: str  # FROM_INFO or FROM_NAME


@dataclass(frozen=True)
class RankFolder:
    path: Path
    files: tuple[RankFile, ...]  # by rank
    notes: tuple[str, ...] = field(default=())

    @property
    def world_size(self) -> int | None:
        sizes = {f.world_size for f in self.files if f.world_size is not None}
        return sizes.pop() if sizes else None


def candidates(path: Path) -> list[Path]:
    """The folder's JSON files, symlinks that lead nowhere included (``parse`` refuses them by name)."""
    return sorted({p for pattern in PATTERNS for p in Path(path).glob(pattern) if p.is_file() or p.is_symlink()})


def sniff(probe) -> bool:
    """A folder that is no run directory, holds no ``*.xplane.pb`` nor ``graphs/``, and has JSON files."""
    path = probe.path
    return (probe.is_dir and not rundir.is_run_dir(path) and not (path / rundir.GRAPHS_DIR).is_dir()
            and next(path.rglob("*.xplane.pb"), None) is None and bool(candidates(path)))


def parse(path: Path) -> RankFolder:
    path = Path(path)
    files, skipped = [], []
    found = candidates(path)
    for link in broken_links(found):
        raise InputError(link, broken(link), "every rank file of the folder to be readable")
    for candidate in found:
        prefix = read_prefix(candidate, PREFIX_BYTES)
        if not kineto.looks_like(prefix):
            skipped.append(candidate.name)
            continue
        files.append(_rank_file(candidate, prefix))
    if not files:
        found = f" ({len(skipped)} JSON file(s), none a Kineto trace)" if skipped else ""
        raise InputError(path, f"holds no Kineto rank file{found}", EXPECTED)
    files.sort(key=lambda f: (f.rank, f.path.name))
    _check(path, files)
    notes = []
    if skipped:
        notes.append(f"{path}: skipped {len(skipped)} file(s) that are not Kineto traces: {_names(skipped)}")
    return RankFolder(path, tuple(files), tuple(notes))


def loaded_notes(folder: RankFolder, infos: Sequence[dict | None], loaded_workers: Sequence[str]) -> list[str]:
    """Once every rank is loaded (``infos``: each file's ``distributedInfo``, in ``folder.files`` order,
    None where it has none; ``loaded_workers``: the worker its events name): what a reader must know, and
    an ``InputError`` for two files of one rank or ranks of different jobs.
    A file's ``distributedInfo`` may lie past the first bytes (PyTorch writes it after the events), so
    only now is it known which ranks came from file names."""
    workers: dict[str, list[str]] = {}
    for f, worker in zip(folder.files, loaded_workers):
        workers.setdefault(worker, []).append(f.path.name)
    twice = sorted((w, names) for w, names in workers.items() if len(names) > 1)
    if twice:
        worker, names = twice[0]
        raise InputError(folder.path, f"{worker} appears in {len(names)} files ({_names(names)})", "one file per rank")
    sizes = sorted({i["world_size"] for i in infos if isinstance(i, dict) and isinstance(i.get("world_size"), int)})
    if len(sizes) > 1:
        raise InputError(folder.path, f"the files come from jobs of different world sizes "
                                      f"({', '.join(map(str, sizes))})", "the rank files of one job")
    notes = []
    named = [f.path.name for f, info in zip(folder.files, infos) if not (isinstance(info, dict) and "rank" in info)]
    if named:
        notes.append(f"{shown(folder.path)}: {len(named)} file(s) have no distributedInfo; their rank is the number in "
                     f"their name: {_names(named)}")
    if sizes and len(folder.files) < sizes[0]:
        notes.append(f"{shown(folder.path)}: {len(folder.files)} of the job's {sizes[0]} ranks are given")
    return notes


def events(path: Path, folder: RankFolder) -> EventTable:
    """Every rank loaded here, one after another, and merged on their common clock; the folder's notes
    (``loaded_notes``) are in ``metadata.job_notes``."""
    tables = [load_rank(f) for f in folder.files]
    infos = [t.metadata.distributed[0] if t.metadata.distributed else None for t in tables]
    workers = [",".join(sorted({d.worker for d in t.devices})) for t in tables]
    notes = [*folder.notes, *loaded_notes(folder, infos, workers)]
    table = merge_tables(tables)
    table.metadata.job_notes = tuple(notes)
    return table


def folder_notes(job: RankFolder | None) -> list[str]:
    """The notes of a job's rank files (``job_of``'s: the files it skipped), before any is loaded; none for
    input that is no job (None)."""
    return list(job.notes) if job is not None else []


def job_notes(table: EventTable | None) -> list[str]:
    """The notes of a folder of rank files that ``events`` loaded (none for other input)."""
    return list(table.metadata.job_notes) if table is not None else []


def load_rank(rank_file: RankFile) -> EventTable:
    """One rank's table; a file without ``distributedInfo`` gets its worker name from its rank."""
    table = remembered(f"rank{rank_file.rank}", rank_file.path, lambda: leave_out(kineto.load_kept(rank_file.path)))
    worker = f"rank{rank_file.rank}"
    workers = {d.worker for d in table.devices}
    if workers == {""}:
        table = kineto.on_worker(table, worker)
    elif rank_file.rank_from == FROM_INFO and workers != {worker}:
        raise InputError(rank_file.path, f"its events name {', '.join(sorted(workers))} where its first bytes "
                                         f"said {worker}", "one rank per file")
    return table


def _rank_file(path: Path, prefix: bytes) -> RankFile:
    info = _info(prefix)
    if info is not None and isinstance(info.get("rank"), int) and not isinstance(info.get("rank"), bool):
        size = info.get("world_size")
        size = size if isinstance(size, int) and not isinstance(size, bool) else None
        return RankFile(path, info["rank"], size, FROM_INFO)
    numbers = _NUMBER.findall(path.name.split(".")[0])
    if not numbers:
        raise InputError(path, "has no distributedInfo and no number in its name to take its rank from",
                         "a rank file with distributedInfo, or named after its rank (rank3.json)")
    return RankFile(path, int(numbers[-1]), None, FROM_NAME)


def _info(prefix: bytes) -> dict | None:
    match = _INFO.search(prefix)
    if not match:
        return None
    try:
        info, _ = json.JSONDecoder().raw_decode(prefix[match.end():].decode("utf-8", errors="replace"))
    except ValueError:  # cut by the prefix's end, or not JSON
        return None
    return info if isinstance(info, dict) else None


def _check(path: Path, files: list[RankFile]) -> None:
    by_rank: dict[int, list[str]] = {}
    for f in files:
        by_rank.setdefault(f.rank, []).append(f.path.name)
    duplicates = {r: names for r, names in by_rank.items() if len(names) > 1}
    if duplicates:
        rank, names = min(duplicates.items())
        raise InputError(path, f"rank {rank} appears in {len(names)} files ({_names(names)})", "one file per rank")
    sizes = sorted({f.world_size for f in files if f.world_size is not None})
    if len(sizes) > 1:
        raise InputError(path, f"the files come from jobs of different world sizes ({', '.join(map(str, sizes))})",
                         "the rank files of one job")
    if sizes and any(f.rank >= sizes[0] or f.rank < 0 for f in files):
        bad = next(f for f in files if f.rank >= sizes[0] or f.rank < 0)
        raise InputError(bad.path, f"rank {bad.rank} is outside the job's world size {sizes[0]}",
                         "the rank files of one job")


def _names(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def job_of(paths: Sequence[str | os.PathLike]) -> RankFolder | None:
    """The rank files ``paths`` name, when they are a job's: one folder of rank files, or two or more
    Kineto files (each checked like a folder's). None for anything else (a run directory, a TF
    trace, one file), which the callers read as before."""
    paths = [Path(p) for p in paths]
    if len(paths) == 1:
        if paths[0].is_dir() and sniff(_DirProbe(paths[0])):
            return parse(paths[0])
        return None
    if any(p.is_dir() for p in paths):
        return None
    prefixes = [read_prefix(p, PREFIX_BYTES) if p.exists() else b"" for p in paths]
    if not all(kineto.looks_like(prefix) for prefix in prefixes):
        return None
    files = sorted((_rank_file(p, prefix) for p, prefix in zip(paths, prefixes)), key=lambda f: (f.rank, f.path.name))
    label = Path(", ".join(map(shown, paths)))  # as notes and pages show it
    _check(label, files)
    return RankFolder(label, tuple(files))


def run_dir_ranks(paths: Sequence[str | os.PathLike]) -> tuple[RankFolder, Manifest] | None:
    """The rank traces of one PyTorch run directory (``trace --framework torch``) as a job's rank files, with the
    run's manifest, where it holds two or more; None for anything else."""
    paths = [Path(p) for p in paths]
    if len(paths) != 1 or not paths[0].is_dir() or not rundir.is_run_dir(paths[0]):
        return None
    try:
        manifest = read_manifest(paths[0])
    except InputError:  # the loaders say what is wrong with it
        return None
    traces = [p for p in listed_torch_traces(paths[0], manifest) if p.is_file()] if manifest.is_torch else []
    folder = job_of(traces) if len(traces) > 1 else None
    return (folder, manifest) if folder is not None else None


@dataclass(frozen=True)
class _DirProbe:
    path: Path
    is_dir: bool = True
