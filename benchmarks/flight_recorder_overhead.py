"""What the flight recorder that `rnnprof trace` turns on for a job's ranks costs per collective.

A 2-rank gloo job (torchrun, one intra-op thread per rank) times ``--ops`` all_reduces of a tensor of
``--numel`` floats, with ``TORCH_FR_BUFFER_SIZE`` at 0 (off, torch's default) and at rnnprof's 2000 entries
(each entry records the collective's Python frames), the two settings in turns, ``--repeat`` jobs each.
Each job's rank 0 reports its median microseconds per all_reduce; the result is the ratio on / off of the
medians over repeats, with the lowest-highest ratio of one repeat's pair as the spread.

    python benchmarks/flight_recorder_overhead.py                  # 5 repeats, 2000 small all_reduces
    python benchmarks/flight_recorder_overhead.py --numel 262144 --ops 300
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

JOB = r'''
import json, statistics, sys, time
import torch, torch.distributed as dist
torch.set_num_threads(1)
dist.init_process_group("gloo")
ops, numel = int(sys.argv[1]), int(sys.argv[2])
tensor = torch.ones(numel)
for _ in range(20):
    dist.all_reduce(tensor)
times = []
for _ in range(ops):
    start = time.perf_counter()
    dist.all_reduce(tensor)
    times.append(time.perf_counter() - start)
if dist.get_rank() == 0:
    print(json.dumps({"us": statistics.median(times) * 1e6}))
dist.destroy_process_group()
'''
SETTINGS = {"off": "0", "on": "2000"}


def run_job(script: Path, buffer: str, ops: int, numel: int) -> float:
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": buffer, "PET_RDZV_BACKEND": "c10d",
           "PET_RDZV_ENDPOINT": "localhost:0", "OMP_NUM_THREADS": "1"}
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    done = subprocess.run([torchrun, "--nproc-per-node", "2", str(script), str(ops), str(numel)], env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])["us"]


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--numel", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        script = Path(scratch) / "job.py"
        script.write_text(JOB)
        runs = {name: [] for name in SETTINGS}
        for repeat in range(args.repeat):
            order = list(SETTINGS) if repeat % 2 == 0 else list(reversed(SETTINGS))
            for name in order:
                runs[name].append(run_job(script, SETTINGS[name], args.ops, args.numel))
    ratios = [on / off for on, off in zip(runs["on"], runs["off"])]
    on, off = statistics.median(runs["on"]), statistics.median(runs["off"])
    print(f"all_reduce of {args.numel} floats, 2 gloo ranks, {args.ops} ops x {args.repeat} repeats: "
          f"recorder on {on:.1f} us, off {off:.1f} us per all_reduce (median); on/off {on / off:.3f} "
          f"(spread {min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
