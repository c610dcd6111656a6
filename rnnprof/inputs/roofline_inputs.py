"""What ``rnnprof roofline`` reads: per process, its event table, its operators' shapes and the machine that
recorded it.

Kineto traces (one, several, a folder of rank files, a PyTorch run directory's ranks) give the shapes
``record_shapes=True`` recorded (``shapes.load_shapes``); a TensorFlow run directory gives its executed kernels'
shapes from its RunMetadata step stats (``tf_shapes.load_tf_shapes``). Other input (a TF1 timeline, an xplane)
records no shapes: ``NotAvailable`` says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rnnprof.events import EventTable
from rnnprof.rundir.manifest import listed_torch_traces, read_manifest
from rnnprof.traces import detect_format, load_events
from rnnprof.traces.memo import remembered
from rnnprof.traces.rank_folder import job_of
from rnnprof.traces.shapes import OpShapes, load_shapes, recorded_without_shapes
from rnnprof.traces.tf_shapes import load_tf_shapes


class NotAvailable(Exception):
    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class RooflineSource:
    worker: str
    path: Path
    kind: str  # "kineto" or "tf-run"
    host: str = ""  # the machine the run directory says it ran on ("" for a bare trace: its own header says)


@dataclass
class RooflineInput:
    worker: str
    path: Path
    table: EventTable
    shapes: OpShapes
    host: str  # the machine that recorded it, "" when unknown
    devices: list[str]  # device names the trace gives (Kineto deviceProperties)
    cpu_only: bool  # no GPU among the trace's devices


def sources(paths, loaded: bool = False) -> list[RooflineSource]:
    """The processes ``paths`` hold; input that is not a trace at all is an ``InputError`` (``loaded``: the
    caller has loaded ``paths`` already, so they are traces, and are not loaded again to find out)."""
    job = job_of(paths)
    if job is not None:
        return [RooflineSource(f"rank{f.rank}", f.path, "kineto") for f in job.files]
    found = []
    for path in paths:
        kind = detect_format(path)
        if kind == "kineto":
            found.append(RooflineSource("" if len(paths) == 1 else Path(path).name, Path(path), "kineto"))
        elif kind == "rundir":
            found += _run_dir(Path(path), len(paths) > 1)
        else:
            if not loaded:
                load_events(path)  # input that is not a trace at all is a one-line error, not "not available"
            if kind in ("chrome-json", "xplane", "xplane-dir", "run-metadata", "tf-chrome"):
                raise NotAvailable(f"{path}: no roofline for a TensorFlow trace ({kind}) outside a run directory: "
                                   f"it records no input shapes per op (a run directory's RunMetadata does)")
            raise NotAvailable(f"{path}: no roofline for {kind} input: it reads Kineto traces' recorded shapes "
                               f"and TensorFlow run directories")
    return found


def _run_dir(path: Path, several: bool) -> list[RooflineSource]:
    manifest = read_manifest(path)
    host = manifest.host or ""
    prefix = f"{path.name}/" if several else ""
    if manifest.is_torch:
        return [RooflineSource(f"{prefix}{p.name.split('.')[0]}", p, "kineto", host)
                for p in listed_torch_traces(path, manifest) if p.is_file()]
    return [RooflineSource(prefix.rstrip("/"), path, "tf-run", host)]


def without_shapes(source: RooflineSource) -> bool:
    """A Kineto trace that visibly records no shapes (``shapes.recorded_without_shapes``)."""
    return source.kind == "kineto" and recorded_without_shapes(source.path)


def load_source(source: RooflineSource, table: EventTable | None = None) -> RooflineInput:
    """``source`` read; ``table``: its event table when already loaded (before any step selection)."""
    if table is None:
        table = load_events(str(source.path))
    host = source.host
    if source.kind == "tf-run":
        shapes = remembered("tf-shapes", source.path, lambda: load_tf_shapes(source.path, table))
        names = []
    else:
        shapes = remembered("shapes", source.path, lambda: load_shapes(source.path, table))
        names = [str(p.get("name", "")) for p in table.metadata.devices_properties]
        host = host or next(iter(table.metadata.hostnames), "")  # the Kineto trace's own host_name
    cpu_only = not any(d.kind == "gpu" for d in table.devices)
    return RooflineInput(source.worker, source.path, table, shapes, host, names, cpu_only)


__all__ = ["NotAvailable", "RooflineSource", "RooflineInput", "sources", "load", "without_shapes"]
