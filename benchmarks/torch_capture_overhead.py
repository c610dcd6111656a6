"""What capturing a PyTorch script costs the steps it does not trace.

A small PyTorch training script (an LSTM language model on random tokens, no DDP, written here) runs
side by side as ``python train.py`` and as ``rnnprof trace --steps N --skip-steps K -- python train.py``,
alternately, ``--repeat`` times. The script itself times every step (wall clock from one
``optimizer.step()`` to the next) and writes the times to a file; the steps compared are those after
the capture window and a few more (the window's last step writes the trace), the same step numbers on
both sides. The ratio is the median step time without rnnprof ÷ with it (medians over the repeats of
each run's median), target >= 0.98: untraced steps run at 98 % of their speed or better.

    python benchmarks/torch_capture_overhead.py                    # 5 runs each side
    python benchmarks/torch_capture_overhead.py --steps 200 --repeat 9
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

from _measure import Targets

ROOT = Path(__file__).resolve().parent.parent
TARGET = 0.98
SCRIPT = r'''
import json, sys, time
import torch

steps, out = int(sys.argv[1]), sys.argv[2]
torch.set_num_threads(1)
torch.manual_seed(0)
vocab, embed, hidden, batch, length = 2000, 64, 128, 16, 20


class LM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(vocab, embed)
        self.lstm = torch.nn.LSTM(embed, hidden, batch_first=True)
        self.output = torch.nn.Linear(hidden, vocab)

    def forward(self, tokens):
        hidden_states, _ = self.lstm(self.embedding(tokens))
        return self.output(hidden_states)


model = LM()
optimizer = torch.optim.Adam(model.parameters(), lr=2e-4)
loss_fn = torch.nn.CrossEntropyLoss()
data = torch.randint(0, vocab, (steps, batch, length + 1))
times, last = [], time.perf_counter()
for i in range(steps):
    optimizer.zero_grad()
    logits = model(data[i, :, :-1])
    loss_fn(logits.reshape(-1, vocab), data[i, :, 1:].reshape(-1)).backward()
    optimizer.step()
    now = time.perf_counter()
    times.append(now - last)
    last = now
with open(out, "w") as f:
    json.dump(times, f)
'''


def _run(side: str, folder: Path, args, k: int) -> list[float]:
    script, times = folder / "train.py", folder / f"{side}-{k}.json"
    train = [sys.executable, str(script), str(args.steps), str(times)]
    if side == "rnnprof":
        train = [sys.executable, "-m", "rnnprof", "trace", "--out", str(folder / f"run-{k}"), "--steps",
                 str(args.window), "--skip-steps", str(args.skip), "--", *train]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
               OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    done = subprocess.run(train, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{side} run failed:\n{done.stderr[-3000:]}")
    return json.loads(times.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=120, help="training steps per run")
    parser.add_argument("--skip", type=int, default=2, help="--skip-steps of the capture")
    parser.add_argument("--window", type=int, default=3, help="--steps of the capture")
    parser.add_argument("--settle", type=int, default=3, help="steps after the window left out of the comparison")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    first = args.skip + args.window + args.settle
    if args.steps < first + 10:
        parser.error(f"--steps must leave at least 10 steps after step {first}")
    medians: dict[str, list[float]] = {"plain": [], "rnnprof": []}
    with tempfile.TemporaryDirectory(prefix="rnnprof-overhead-") as tmp:
        folder = Path(tmp)
        (folder / "train.py").write_text(SCRIPT)
        for k in range(args.repeat):
            for side in (("plain", "rnnprof") if k % 2 == 0 else ("rnnprof", "plain")):
                medians[side].append(statistics.median(_run(side, folder, args, k)[first:]))
    plain, captured = statistics.median(medians["plain"]), statistics.median(medians["rnnprof"])
    print(f"LSTM LM on random tokens, {args.steps} steps per run, 1 thread; steps {first}..{args.steps - 1} "
          f"compared (the capture window is steps {args.skip}..{args.skip + args.window - 1}); {args.repeat} runs "
          f"each side, alternating")
    for side, values in medians.items():
        shown = ", ".join(f"{v * 1000:.2f}" for v in values)
        print(f"  {side:<8} median step {statistics.median(values) * 1000:8.2f} ms  (runs: {shown})")
    ratio = plain / captured
    print(f"speed of the untraced steps with rnnprof / without: {ratio:.3f}")
    targets = Targets()
    targets.at_least("untraced steps' speed under rnnprof trace", ratio * 100, TARGET * 100, "%")
    return targets.report()


if __name__ == "__main__":
    sys.exit(main())
