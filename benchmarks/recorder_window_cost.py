"""What the flight recorder's window file costs a traced job: its traced steps with the recorder on and off, and the
dump that writes the window's entries beside each rank's trace.

1. ``rnnprof trace`` of the built-in Transformer with HSDP on 4 gloo ranks (a 2 x 2 mesh), ``--repeat`` times with
   the recorder on (rnnprof's default, ``TORCH_FR_BUFFER_SIZE`` 2000: each rank writes ``rank<r>.flight-recorder``)
   and off (0: no file), in turns. Per run, the median over ranks and traced steps of each step's seconds (the
   manifest's ``step_seconds`` of the window's steps); the result is on / off of the medians over repeats, with the
   lowest-highest ratio of one repeat's pair as the spread.
2. ``recorder_window.write_window`` timed in one gloo process whose recorder holds a full buffer (``--entries``
   all_reduces): the dump, its decoding, the filter and the file, as the window's last step pays them once.

    python benchmarks/recorder_window_cost.py                  # 3 repeats
    python benchmarks/recorder_window_cost.py --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TRACE = ["trace", "--framework", "torch", "--model", "transformer", "--layers", "3", "--units", "32", "--heads", "2",
         "--batch-size", "8", "--vocab-size", "60", "--src-max-len", "16", "--devices", "4", "--parallel", "hsdp",
         "--mesh", "2x2", "--warmup", "1", "--batches", "2", "--trace-steps", "3"]
SETTINGS = {"off": "0", "on": "2000"}
DUMP = r'''
import json, os, statistics, sys, time
from pathlib import Path
import torch, torch.distributed as dist
from rnnprof.recording.recorder_window import write_window
dist.init_process_group("gloo", rank=0, world_size=1, init_method="file://" + sys.argv[2] + "/store")
tensor, first = torch.ones(8), time.time_ns()
for _ in range(int(sys.argv[1])):
    dist.all_reduce(tensor)
times = []
for _ in range(20):
    start = time.perf_counter()
    path = write_window(torch, Path(sys.argv[2]) / "rank0.json.gz", 0, first, time.time_ns())
    times.append(time.perf_counter() - start)
print(json.dumps({"ms": statistics.median(times) * 1e3, "entries": len(json.loads(path.read_text())["entries"]),
                  "bytes": path.stat().st_size}))
dist.destroy_process_group()
'''


def traced_step_s(out: Path, recorder: bool) -> float:
    """The run's median traced step (over ranks and the window's steps), after checking its files are as expected."""
    manifest = json.loads((out / "manifest.json").read_text())
    seconds = []
    for rank in manifest["ranks"]:
        assert bool(rank["flight_recorder"]) == recorder, rank["flight_recorder"]
        seconds += [rank["step_seconds"][step - rank["first_step"]] for step in rank["steps"]]
    return statistics.median(seconds)


def run_trace(out: Path, buffer: str) -> float:
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": buffer, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "rnnprof", *TRACE, "--force", "--out", str(out)], env=env, check=True,
                   capture_output=True)
    return traced_step_s(out, buffer != "0")


def dump_cost(scratch: Path, entries: int) -> dict:
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": str(entries)}
    done = subprocess.run([sys.executable, "-c", DUMP, str(entries), str(scratch)], env=env, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--entries", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        runs = {name: [] for name in SETTINGS}
        for repeat in range(args.repeat):
            for name in (SETTINGS if repeat % 2 == 0 else reversed(list(SETTINGS))):
                runs[name].append(run_trace(Path(scratch) / name, SETTINGS[name]))
        dump = dump_cost(Path(scratch), args.entries)
    ratios = [on / off for on, off in zip(runs["on"], runs["off"])]
    on, off = statistics.median(runs["on"]), statistics.median(runs["off"])
    print(f"HSDP on 4 gloo ranks, traced step (median over ranks and steps), {args.repeat} repeats: recorder on "
          f"{on * 1e3:.1f} ms, off {off * 1e3:.1f} ms; on/off {on / off:.3f} (spread {min(ratios):.3f}-{max(ratios):.3f})")
    print(f"write_window with {dump['entries']} entries in the buffer: {dump['ms']:.1f} ms (median of 20), "
          f"{dump['bytes'] / 1e6:.2f} MB written")


if __name__ == "__main__":
    main()
