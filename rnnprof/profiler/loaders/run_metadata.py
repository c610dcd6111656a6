"""TensorFlow ``RunMetadata`` protos (``run_metadata/step-N.pb``): their step_stats as events.

The step stats go through the same conversion as rnnprof's timelines, so lanes, kinds and the
handling of GPU stream records are identical to reading ``timelines/step-N.trace.json.gz``.
"""

from __future__ import annotations

import re
from pathlib import Path

from rnnprof.errors import InputError
from rnnprof.events import EventTable, parse_tf_device

FORMAT = "tf-run-metadata"
_STEP = re.compile(r"step-(\d+)\.pb$")


def parse(path: Path):
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto import config_pb2

    from rnnprof.limits import read_bytes

    meta = config_pb2.RunMetadata()
    data = read_bytes(Path(path))
    try:
        meta.ParseFromString(data)
    except (DecodeError, ValueError, OSError) as exc:
        raise InputError(path, f"not a readable RunMetadata ({exc})", "a complete RunMetadata .pb") from None
    return meta


def looks_like(path: Path) -> bool:
    try:
        meta = parse(path)
    except InputError:
        return False
    devices = [d.device for d in meta.step_stats.dev_stats]
    return bool(devices) and all(parse_tf_device(d) for d in devices)


def load(path: Path) -> EventTable:
    from rnnprof.profiler.rundir.chrome_trace import step_stats_to_chrome
    from rnnprof.profiler.loaders import tf_chrome

    path = Path(path)
    meta = parse(path)
    match = _STEP.search(path.name)
    step = int(match.group(1)) if match else -1
    doc = step_stats_to_chrome(meta.step_stats, step, list(meta.partition_graphs))
    return tf_chrome.load_doc(path, doc, FORMAT, step=step)
