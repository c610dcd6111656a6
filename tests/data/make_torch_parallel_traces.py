"""Record three small 2-rank CPU (gloo) run directories of the Transformer LM under ``--parallel``:
``torch-gloo-fsdp/``, ``torch-gloo-tp/`` and ``torch-gloo-pp/`` (1F1B, 4 micro-batches).

Each is ``rnnprof trace --framework torch --model transformer`` (3 blocks of 16 units, 2 heads, a vocabulary of
60, windows of 6 tokens, batch 4, SGD) on 2 ranks: 1 warm-up and 2 timed steps, then 3 traced steps, one Kineto
trace per rank. What is kept of each run: its ``manifest.json`` and ``torch/rank{0,1}.json.gz``, the scratch folder
in the manifest's command shortened to ``runs/<mode>``, each trace's ``traceName`` (its scratch file) to its file's
name, the traces gzipped again at level 9 (their JSON otherwise as written, byte for byte).

    python tests/data/make_torch_parallel_traces.py [OUT_DIR]      # default: this folder; about a minute
"""

from __future__ import annotations

import gzip
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TINY = ["--framework", "torch", "--model", "transformer", "--layers", "3", "--units", "16", "--heads", "2",
        "--vocab-size", "60", "--src-max-len", "6", "--batch-size", "4", "--optimizer", "sgd",
        "--learning-rate", "0.5", "--devices", "2", "--warmup", "1", "--batches", "2", "--trace-steps", "3"]
MODES = {"fsdp": ["--parallel", "fsdp"], "tp": ["--parallel", "tp"],
         "pp": ["--parallel", "pp", "--schedule", "1f1b", "--micro-batches", "4"]}


def record(mode: str, scratch: Path, out_dir: Path, timeout_s: float = 600) -> Path:
    """Trace ``mode`` into ``scratch`` and keep what the module says in ``out_dir/torch-gloo-<mode>``."""
    run = scratch / mode
    subprocess.run([sys.executable, "-m", "rnnprof", "trace", *TINY, *MODES[mode], "--out", str(run)],
                   check=True, timeout=timeout_s)
    target = out_dir / f"torch-gloo-{mode}"
    if target.exists():
        shutil.rmtree(target)
    (target / "torch").mkdir(parents=True)
    manifest = (run / "manifest.json").read_text().replace(str(scratch), "runs")
    (target / "manifest.json").write_text(manifest)
    for trace in sorted((run / "torch").glob("rank*.json.gz")):
        name = trace.name[:-len(".gz")]
        text = re.sub(rb'"traceName": "[^"]*"', f'"traceName": "{name}"'.encode(), gzip.decompress(trace.read_bytes()))
        with gzip.open(target / "torch" / trace.name, "wb", compresslevel=9) as out:
            out.write(text)
    return target


if __name__ == "__main__":
    destination = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
    with tempfile.TemporaryDirectory(prefix="rnnprof-parallel-") as folder:
        for name in MODES:
            print(record(name, Path(folder), destination))
