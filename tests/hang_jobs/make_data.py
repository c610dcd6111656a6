"""Remake tests/data/hang/<case>/: each planted hang of hang_job.py run under `rnnprof trace -- torchrun` (2 gloo
ranks), its RUN/hang/ dumps and stacks copied with the checkout's and the interpreter's folders shortened.

    PET_RDZV_BACKEND=c10d PET_RDZV_ENDPOINT=localhost:0 python tests/hang_jobs/make_data.py
"""

import pickle
import pickletools
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CASES = ("data", "lock", "gil", "mismatch", "skip")
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
SHORTER = {str(ROOT) + "/": "/home/user/rnnprof/", str(Path(sys.prefix)) + "/": "/home/user/venv/"}


def shorten(value):
    if isinstance(value, str):
        for long, short in SHORTER.items():
            value = value.replace(long, short)
        return value
    if isinstance(value, dict):
        return {shorten(k): shorten(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(shorten(v) for v in value)
    return value


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        runs = {case: Path(scratch) / case for case in CASES}
        jobs = [subprocess.Popen([sys.executable, "-m", "rnnprof", "trace", "--out", str(run), "--hang-after", "2s",
                                  "--steps", "1", "--", TORCHRUN, "--nproc-per-node", "2",
                                  "tests/hang_jobs/hang_job.py", case], cwd=ROOT) for case, run in runs.items()]
        for job in jobs:
            job.wait()
        for case, run in runs.items():
            out = ROOT / "tests" / "data" / "hang" / case
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            for dump in (run / "hang").glob("rank*.fr.pkl"):
                data = dump.read_bytes()
                protocol = next(pickletools.genops(data))[1]
                (out / dump.name).write_bytes(pickle.dumps(shorten(pickle.loads(data)), protocol=protocol))
            for stacks in (run / "hang").glob("rank*.stacks.txt"):
                (out / stacks.name).write_text(shorten(stacks.read_text()))


if __name__ == "__main__":
    main()
