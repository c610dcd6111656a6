"""Rebuild the fuzz seeds from a real capture: ``python tests/fuzz_seeds/make_seeds.py RUN_DIR``.

Each seed is a real artifact of ``rnnprof trace`` (tiny NMT on two logical CPU devices) cut
down to a few dozen events or nodes, so that thousands of mutated copies load in seconds.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

HERE = Path(__file__).parent


def _keep(repeated, n):
    del repeated[n:]


def main(run: Path) -> None:
    from tensorboard.compat.proto import config_pb2, graph_pb2

    from rnnprof.traces.xplane import xplane_pb2

    timeline = next((run / "timelines").glob("*.trace.json.gz"))
    doc = json.loads(gzip.decompress(timeline.read_bytes()))
    meta = [e for e in doc["traceEvents"] if e.get("ph") == "M"]
    ops = [e for e in doc["traceEvents"] if e.get("ph") != "M"]
    # Events from both devices and both transfer flow ends.
    picked = ops[:25] + ops[len(ops) // 2:len(ops) // 2 + 25] + [e for e in ops if e.get("ph") in ("s", "f")][:4]
    doc["traceEvents"] = meta + picked
    (HERE / "rnnprof-timeline.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode(), mtime=0))

    for xplane in sorted((run / "plugins" / "profile").glob("*/*.xplane.pb")):
        space = xplane_pb2().XSpace.FromString(xplane.read_bytes())
        for plane in space.planes:
            for line in plane.lines:
                _keep(line.events, 12)
        name = "devices.xplane.pb" if xplane.parent.name.endswith("_devices") else "profiler.xplane.pb"
        (HERE / name).write_bytes(space.SerializeToString())

    rm = config_pb2.RunMetadata.FromString(next((run / "run_metadata").glob("*.pb")).read_bytes())
    for dev in rm.step_stats.dev_stats:
        _keep(dev.node_stats, 15)
    for graph in rm.partition_graphs:
        _keep(graph.node, 20)
    (HERE / "step-2.pb").write_bytes(rm.SerializeToString())

    graph = graph_pb2.GraphDef.FromString((run / "graphs" / "graph.pb").read_bytes())
    _keep(graph.node, 30)
    (HERE / "graph.pb").write_bytes(graph.SerializeToString())
    (HERE / "graph.pbtxt").write_text(str(graph))

    manifest = json.loads((run / "manifest.json").read_text())
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=2))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
