"""Writing a run directory: manifest, atomic files, per-step artifacts.

Every file is written under a temporary name in its final folder and renamed into
place, so a reader never sees half a file; the manifest says ``running`` until the
capture ends and ``interrupted`` if it did not end normally. The layout is
``rnnprof.rundir``. TensorFlow protos are taken duck-typed (anything with
``SerializeToString``), so this module imports without TensorFlow.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Iterable

from rnnprof.errors import InputError, InterruptedRun, UsageError
from rnnprof import rundir
from rnnprof.files import atomic_write_bytes, atomic_write_json  # noqa: F401 (the run's writers)
from rnnprof.rundir.manifest import kept_in, new_manifest, now, parse_manifest
from rnnprof.rundir.chrome_trace import step_stats_to_chrome

PBTXT_LIMIT = 2 * 1024 * 1024  # text copies of graphs are for reading by eye; skip huge ones
# Where each kind of the manifest's "captured" lists lies in the run directory.
_ARTIFACTS = (
    ("timelines", f"{rundir.TIMELINES_DIR}/*.trace.json.gz"),
    ("run_metadata", f"{rundir.RUN_METADATA_DIR}/*.pb"),
    ("graphs", f"{rundir.GRAPHS_DIR}/**/*.pb"),
    ("graphs", f"{rundir.GRAPHS_DIR}/**/*.pbtxt"),
    ("xplane", f"{rundir.PROFILE_DIR.as_posix()}/*/*.xplane.pb"),
    ("kineto", f"{rundir.TORCH_TRACES_DIR}/*.json.gz"),
    ("flight_recorder", f"{rundir.TORCH_TRACES_DIR}/*{rundir.FLIGHT_RECORDER_SUFFIX}"),
)
_OWN_ENTRIES = (rundir.MANIFEST, "plugins", rundir.TIMELINES_DIR, rundir.RUN_METADATA_DIR, rundir.GRAPHS_DIR,
                rundir.CRITICAL_PATH_OVERLAY, rundir.TORCH_TRACES_DIR, rundir.HANG_DIR, rundir.SERIES_DIR,
                rundir.WINDOWS_DIR, rundir.ANOMALIES)
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str) -> str:
    """A file or run name that stays inside its folder: no separators, no dot-only names."""
    name = _SAFE_NAME.sub("_", str(text)).strip("._") or "run"
    return name[:120]


def default_run_dir(prefix: str, runs_dir: str | Path = "runs") -> Path:
    """A fresh ``runs/<prefix>-<timestamp>`` that does not exist yet."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(runs_dir) / f"{safe_name(prefix)}-{stamp}"
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = Path(f"{base}-{n}")
    return candidate


def check_out_dir(path: str | Path, force: bool = False) -> Path:
    """Refuse an ``--out`` that cannot be used, without touching anything."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise InputError(out, "exists and is not a directory", "a new or empty directory for the run")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UsageError(f"--out {out} exists and is not empty; pass --force to replace the run there "
                         "or choose another directory")
    return out


def prepare_out_dir(path: str | Path, force: bool = False) -> Path:
    """Create the run directory, refusing one that holds anything unless ``force``.

    With ``force`` only what rnnprof writes (manifest, plugins, timelines, run_metadata,
    graphs, torch, the critical-path overlay) is removed; anything else the user keeps there is left alone.
    """
    out = check_out_dir(path, force)
    if out.is_dir() and any(out.iterdir()):
        for entry in _OWN_ENTRIES:
            target = out / entry
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(out, f"cannot create the run directory: {exc.strerror or exc}",
                         "a writable location for the run") from None
    return out


def _device_kind(name: str) -> str:
    text = name.upper()
    if "GPU" in text:
        return "gpu"
    return "cpu"


def _partition_label(device: str) -> str:
    """``CPU_0`` for a device of this process; ``worker_1_CPU_0`` for one of a cluster's tasks."""
    label = device.rsplit("/", 1)[-1].replace("device:", "")
    job = re.search(r"/job:([^/]+)/replica:\d+/task:(\d+)", device)
    if job and job.group(1) != "localhost":
        label = f"{job.group(1)}_{job.group(2)}_{label}"
    return safe_name(label)


class RunWriter:
    """Owns one run directory while it is being captured."""

    def __init__(self, out_dir: str | Path, command: Iterable[str] | None = None, force: bool = False,
                 config: dict | None = None):
        self.path = prepare_out_dir(out_dir, force=force)
        self.manifest = new_manifest(command, config)
        self.clock_offsets: dict[str, float] = {}  # task prefix -> µs subtracted from its timeline events
        self._partitions_written = False
        self.save_manifest()

    # -- what the run has recorded so far (the manifest being written) ------------------------

    @property
    def host(self) -> str | None:
        """The host the run is captured on."""
        return self.manifest["host"]

    @property
    def captured(self) -> dict[str, list[str]]:
        """The files captured so far by kind (``timelines``, ``xplane``, ``graphs``, ``kineto``, ...)."""
        return self.manifest["captured"]

    @property
    def device_kind(self) -> str | None:
        """The kind of the run's devices, once set."""
        return self.manifest["device_kind"]

    @property
    def session_config(self) -> dict:
        """The TensorFlow session's configuration recorded so far (empty before the first traced step)."""
        return self.manifest["session_config"]

    def recorded(self, key: str):
        """The value the run recorded under ``key`` (a name shared with the readers, e.g. ``names.STEP_TIMES``)."""
        return self.manifest[key]

    # -- files ---------------------------------------------------------------------------------

    def rel(self, path: Path) -> str:
        return Path(path).relative_to(self.path).as_posix()

    def _add(self, kind: str, path: Path) -> str:
        rel = self.rel(path)
        listed = self.manifest["captured"].setdefault(kind, [])  # "kineto" only in PyTorch runs
        if rel not in listed:
            listed.append(rel)
        return rel

    def save_manifest(self) -> None:
        atomic_write_json(self.path / rundir.MANIFEST, self.manifest)

    def update(self, **fields) -> None:
        self.manifest.update(fields)
        self.save_manifest()

    def set_devices(self, names: Iterable[str], kind: str | None = None) -> None:
        self.manifest["devices"] = [{"name": n, "kind": kind or _device_kind(n)} for n in names]
        self.save_manifest()

    def finish(self, status: str = rundir.STATUS_COMPLETE) -> None:
        self._add_unlisted()
        self.manifest["status"] = status
        self.manifest["finished"] = now()
        self.save_manifest()

    @contextlib.contextmanager
    def recording(self):
        """Finish the run however its body ends: complete when it returns; on Ctrl-C (or SIGTERM under
        ``interrupt.terminate_as_interrupt``) interrupted, keeping what was captured, and ``InterruptedRun``
        is raised saying what the directory holds (``manifest.kept_in``); on any other failure interrupted with the failure in the manifest's ``error``, re-raised.
        Every artifact in place is listed either way."""
        status = rundir.STATUS_INTERRUPTED
        stopped = False
        try:
            yield self
            status = rundir.STATUS_COMPLETE
        except KeyboardInterrupt:
            stopped = True
        except Exception as exc:
            self.manifest["error"] = f"{type(exc).__name__}: {exc}"  # the run says why it stopped
            raise
        finally:
            self.finish(status)
        if stopped:  # said once what is in place, all of it listed
            raise InterruptedRun(f"interrupted; {kept_in(self.path, parse_manifest(self.manifest, self.path))}")

    def _add_unlisted(self) -> None:
        """List the artifacts that are in place but not yet in the manifest.

        An interrupt (Ctrl-C, SIGTERM) can land after a file was renamed into place and before it was
        recorded; every artifact is complete once in place (atomic writes), so the manifest lists it, and a
        step's timeline in place makes the step one of the traced steps.
        """
        for kind, pattern in _ARTIFACTS:
            for path in sorted(self.path.glob(pattern)):
                if path.is_file() and not path.name.startswith("."):
                    self._add(kind, path)
        traced = self.manifest["traced_steps"]  # a step whose timeline is in place was traced, listed or not
        found = {rundir.timeline_step(rel) for rel in self.manifest["captured"].get("timelines", [])}
        traced.extend(sorted(s for s in found - set(traced) if s is not None))

    # -- artifacts -------------------------------------------------------------------------------

    def write_graph(self, graph_def, rel_dir: str = rundir.GRAPHS_DIR, name: str = "graph") -> list[str]:
        """A GraphDef as ``<name>.pb`` plus ``<name>.pbtxt`` when small enough to read."""
        folder = self.path / rel_dir
        data = graph_def.SerializeToString()
        written = [self._add("graphs", atomic_write_bytes(folder / f"{name}.pb", data))]
        if len(data) < PBTXT_LIMIT:
            text = str(graph_def)
            if len(text) < 4 * PBTXT_LIMIT:
                written.append(self._add("graphs", atomic_write_bytes(folder / f"{name}.pbtxt", text.encode())))
        self.save_manifest()
        return written

    def write_partition_graphs(self, partition_graphs, rel_dir: str | None = None) -> list[str]:
        """One file per partition, named by its position and the device its nodes were assigned."""
        rel_dir = rel_dir or f"{rundir.GRAPHS_DIR}/{rundir.PARTITIONS_DIR}"
        written = []
        for k, graph in enumerate(partition_graphs):
            devices = sorted({n.device for n in graph.node if n.device})
            label = _partition_label(devices[0]) if devices else "unassigned"
            written += self.write_graph(graph, rel_dir, f"{k}_{label}")
        return written

    def write_run_metadata(self, file_name: str, data: bytes) -> str:
        """Serialized RunMetadata as ``run_metadata/<file_name>``, listed in the manifest (saved by the caller)."""
        return self._add("run_metadata", atomic_write_bytes(self.path / rundir.RUN_METADATA_DIR / file_name, data))

    def write_step(self, step: int, run_metadata) -> None:
        """Raw RunMetadata, its Chrome timeline and (once) its partition graphs."""

        self.write_run_metadata(rundir.run_metadata_name(step), run_metadata.SerializeToString())
        partitions = list(run_metadata.partition_graphs)
        trace = step_stats_to_chrome(run_metadata.step_stats, step, partitions, self.clock_offsets)
        self._add("timelines", atomic_write_json(
            self.path / rundir.TIMELINES_DIR / rundir.timeline_name(step), trace, gzipped=True))
        if partitions and not self._partitions_written:
            self.write_partition_graphs(partitions)
            self._partitions_written = True
        if step not in self.manifest["traced_steps"]:
            self.manifest["traced_steps"].append(step)
        untimed = trace["otherData"].get(rundir.UNTIMED_FETCHES)
        if untimed:
            self.manifest.setdefault(rundir.UNTIMED_FETCHES, {})[str(step)] = untimed
        self.save_manifest()

    def adopt_profile(self, logdir: Path, run_name: str | None = None) -> list[str]:
        """Move what tf.profiler wrote under ``logdir`` into ``plugins/profile/<run>/``.

        tf.profiler writes in place, so it writes into a scratch folder inside the run
        directory and each finished file is renamed into the layout here.
        """
        written = []
        source_root = Path(logdir) / rundir.PROFILE_DIR
        if not source_root.is_dir():
            return written
        for run in sorted(p for p in source_root.iterdir() if p.is_dir()):
            target = self.path / rundir.PROFILE_DIR / safe_name(run_name or run.name)
            for f in sorted(run.iterdir()):
                if f.is_file():
                    target.mkdir(parents=True, exist_ok=True)
                    os.replace(f, target / f.name)
                    if f.name.endswith(".xplane.pb"):
                        written.append(self._add("xplane", target / f.name))
        shutil.rmtree(logdir, ignore_errors=True)
        self.save_manifest()
        return written

    def write_xspace(self, xspace, run_name: str, host: str | None = None) -> str:
        host = safe_name(host or self.manifest["host"])
        path = self.path / rundir.PROFILE_DIR / safe_name(run_name) / f"{host}.xplane.pb"
        rel = self._add("xplane", atomic_write_bytes(path, xspace.SerializeToString()))
        self.save_manifest()
        return rel

    def scratch_dir(self, label: str) -> Path:
        """A hidden folder inside the run for tools that write in place."""
        return Path(tempfile.mkdtemp(prefix=f".{safe_name(label)}-", dir=self.path))


