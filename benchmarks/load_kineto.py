"""Benchmark: load and count a ~1M-event Kineto trace built by tiling a real one.

    python benchmarks/load_kineto.py [--events 1000000] [--fixture PATH] [--gzip] [--no-hta]

The fixture's events are repeated with timestamps shifted past the previous copy and
correlation / External ids offset so every copy is distinct. Each measurement runs in its own
subprocess so that peak RSS (``ru_maxrss``) belongs to that loader alone. Targets on 2 cores:
1M events in <= 3 s and <= 400 MB; memory grows with the columns only (~50 B/event), not the JSON,
so 10M events stay well under 3 GB. When ``holistictraceanalysis`` is importable its parser is
timed on the same file and the speed ratio printed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_FIXTURE = Path("/work/shared/fixtures/kineto-2rank-nccl-rank0.json.gz")

RNNPROF_CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
from rnnprof.profiler.loaders import load_events
from rnnprof.analyzers.opcount import count_kernels
t1 = time.perf_counter()
table = load_events(sys.argv[1])
t2 = time.perf_counter()
counts = count_kernels(table)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "count_s": t3 - t2, "events": len(table),
                  "gpu_kernels": counts.gpu_kernels, "cpu_kernels": counts.cpu_kernels,
                  "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

HTA_CHILD = """
import json, logging, resource, sys, time
logging.disable(logging.WARNING)
t0 = time.perf_counter()
from hta.common.trace_parser import parse_trace_dataframe
from hta.configs.parser_config import ParserConfig
t1 = time.perf_counter()
meta, df, symbols = parse_trace_dataframe(sys.argv[1], ParserConfig())
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "events": len(df),
                  "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

BASELINE_CHILD = """
import json, resource
from rnnprof.profiler.loaders import load_events
from rnnprof.analyzers.opcount import count_kernels
print(json.dumps({"maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def tile(fixture: Path, target_events: int, out: Path, compress: bool) -> int:
    """Write a trace of about ``target_events`` events made of shifted copies of ``fixture``."""
    with gzip.open(fixture, "rt") if fixture.suffix == ".gz" else open(fixture) as f:
        doc = json.load(f)
    events = doc.pop("traceEvents")
    timed = [e for e in events if "ts" in e and e.get("ph") != "M"]
    meta = [e for e in events if e.get("ph") == "M"]
    start = min(float(e["ts"]) for e in timed)
    span = max(float(e["ts"]) + float(e.get("dur", 0)) for e in timed) - start + 1000.0
    id_step = 1 + max(max(int((e.get("args") or {}).get(k, 0) or 0) for k in ("correlation", "External id"))
                      for e in timed)
    copies = max(1, round((target_events - len(meta)) / len(timed)))
    opener = gzip.open(out, "wt", compresslevel=1) if compress else open(out, "w")
    written = len(meta)
    with opener as f:
        head = json.dumps(doc)[:-1]
        f.write(head + (', ' if doc else '') + '"traceEvents": [\n')
        f.write(",\n".join(json.dumps(e) for e in meta))
        for k in range(copies):
            shift, offset = k * span, k * id_step
            lines = []
            for e in timed:
                e2 = dict(e)
                e2["ts"] = float(e["ts"]) + shift
                args = e.get("args")
                if args:
                    args = dict(args)
                    for key in ("correlation", "External id"):
                        if isinstance(args.get(key), int):
                            args[key] += offset
                    e2["args"] = args
                if e.get("ph") in ("s", "f") and isinstance(e.get("id"), int):
                    e2["id"] = e["id"] + offset
                lines.append(json.dumps(e2))
            f.write(",\n" + ",\n".join(lines))
            written += len(lines)
        f.write("\n]}\n")
    return written


def child(code: str, path: Path) -> dict:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"benchmark child failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--fixture", type=Path, default=DEFAULT_FIXTURE)
    parser.add_argument("--gzip", action="store_true", help="write the tiled trace gzip-compressed")
    parser.add_argument("--no-hta", action="store_true", help="skip the holistictraceanalysis comparison")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="rnnprof-bench-") as tmp:
        path = Path(tmp) / ("trace.json.gz" if args.gzip else "trace.json")
        t0 = time.perf_counter()
        n = tile(args.fixture, args.events, path, args.gzip)
        size_mb = path.stat().st_size / 1e6
        print(f"built {n:,} events ({size_mb:,.0f} MB{' gzip' if args.gzip else ' JSON'}) "
              f"in {time.perf_counter() - t0:.1f} s: {path}")
        baseline = child(BASELINE_CHILD, path)["maxrss_mb"]
        ours = child(RNNPROF_CHILD, path)
        json_mb = ours.get("json_mb", size_mb)
        total = ours["load_s"] + ours["count_s"]
        extra = ours["maxrss_mb"] - baseline
        print(f"rnnprof: {ours['events']:,} events kept; load {ours['load_s']:.2f} s + count {ours['count_s']:.2f} s"
              f" = {total:.2f} s ({json_mb / ours['load_s']:,.0f} MB/s of file); peak RSS {ours['maxrss_mb']:,.0f} MB"
              f" ({extra:,.0f} MB above the {baseline:,.0f} MB of the imported modules)")
        print(f"  kernels: {ours['gpu_kernels']:,} GPU, {ours['cpu_kernels']:,} CPU")
        per_event = extra * 1e6 / max(1, n)
        print(f"  memory per event: {per_event:,.0f} B -> 10M events ~ {baseline + per_event * 1e7 / 1e6:,.0f} MB "
              f"(streaming: the JSON is never held whole; run --events 10000000 to measure)")
        target_ok = total <= 3.0 * n / 1e6 and ours["maxrss_mb"] <= 400 * max(1.0, n / 1e6)
        print(f"  target (1M events: <= 3 s, <= 400 MB): {'met' if target_ok else 'NOT met'}")
        if args.no_hta:
            return 0
        try:
            import hta  # noqa: F401
        except ImportError:
            print("holistictraceanalysis not installed: no comparison")
            return 0
        theirs = child(HTA_CHILD, path)
        print(f"HTA parse_trace_dataframe: {theirs['events']:,} rows in {theirs['load_s']:.2f} s; "
              f"peak RSS {theirs['maxrss_mb']:,.0f} MB")
        print(f"side by side: time {theirs['load_s']:.2f} s vs {total:.2f} s = {theirs['load_s'] / total:.1f}x faster; "
              f"peak RSS {theirs['maxrss_mb']:,.0f} MB vs {ours['maxrss_mb']:,.0f} MB = "
              f"{theirs['maxrss_mb'] / ours['maxrss_mb']:.1f}x less (target >= 10x faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
