"""What capturing a PyTorch script costs the steps it does not trace.

A small PyTorch training script (an LSTM language model on random tokens, no DDP, written here) runs
side by side, at the same time, as ``python train.py`` and as ``rnnprof trace --steps N --skip-steps K --
python train.py``, ``--repeat`` times: both see the same load on the machine, which a shared machine
changes from one minute to the next; each waits for the other before its first step. The script itself
times every step (wall clock from one ``optimizer.step()`` to the next) and writes the times to a file;
the steps compared are those after the capture window and a few more (the window's last step writes the
trace) that both sides ran at the same time (the side that writes a trace falls behind; the other's last
steps, alone on the machine, are left out). Both sides have one intra-op thread (``torch.set_num_threads(1)``,
``OMP_NUM_THREADS=1``) and, unless ``--cpu none``, the same single CPU, which the scheduler shares
fairly between them whatever else runs there (on different CPUs, one side may share its CPU with other
work while the other has one to itself). Each repeat gives the ratio of the median step time without rnnprof to the one with
it; the result is the median of those ratios with their spread (lowest-highest), target >= 0.98: untraced
steps run at 98 % of their speed or better.

    python benchmarks/torch_capture_overhead.py                    # 5 repeats
    python benchmarks/torch_capture_overhead.py --steps 600 --repeat 9
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _measure import Targets, spread_of

ROOT = Path(__file__).resolve().parent.parent
TARGET = 0.98
SIDES = ("plain", "rnnprof")
SCRIPT = r'''
import json, os, sys, time
import torch

steps, out, start = int(sys.argv[1]), sys.argv[2], sys.argv[3]
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
with open(out + ".ready", "w") as f:  # both sides begin their steps together
    f.write("")
while not os.path.exists(start):
    time.sleep(0.01)
stamps = [time.perf_counter()]  # the system-wide monotonic clock: comparable between the two sides
for i in range(steps):
    optimizer.zero_grad()
    logits = model(data[i, :, :-1])
    loss_fn(logits.reshape(-1, vocab), data[i, :, 1:].reshape(-1)).backward()
    optimizer.step()
    stamps.append(time.perf_counter())
with open(out, "w") as f:
    json.dump(stamps, f)
'''


def _start(side: str, folder: Path, args, k: int) -> tuple[subprocess.Popen, Path]:
    script, times = folder / "train.py", folder / f"{side}-{k}.json"
    train = [sys.executable, str(script), str(args.steps), str(times), str(folder / f"start-{k}")]
    if side == "rnnprof":
        train = [sys.executable, "-m", "rnnprof", "trace", "--out", str(folder / f"run-{k}"), "--steps",
                 str(args.window), "--skip-steps", str(args.skip), "--", *train]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
               OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    pin = (lambda: os.sched_setaffinity(0, {args.cpu})) if args.cpu is not None else None
    return subprocess.Popen(train, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=pin), times


def _cpu(text: str) -> int | None:
    return None if text == "none" else int(text)


def _overlapping_steps(stamps: dict[str, list[float]], first: int) -> dict[str, list[float]]:
    """Each side's step times from step ``first`` on, only those run while the other side also ran its
    compared steps (``stamps[i]`` is when step i began; the side that writes a trace falls behind, and the
    other would otherwise finish its last steps alone on the machine)."""
    begin = max(side[first] for side in stamps.values())
    end = min(side[-1] for side in stamps.values())
    return {name: [b - a for a, b in zip(side[first:], side[first + 1:]) if a >= begin and b <= end]
            for name, side in stamps.items()}


def _side_by_side(folder: Path, args, k: int) -> dict[str, float]:
    """Both sides at once; each one's median time of the compared steps."""
    started = {side: _start(side, folder, args, k) for side in SIDES}
    while not all(Path(f"{times}.ready").exists() or process.poll() is not None
                  for process, times in started.values()):
        time.sleep(0.01)
    (folder / f"start-{k}").touch()
    stamps = {}
    for side, (process, times) in started.items():
        _, stderr = process.communicate()
        if process.returncode != 0:
            raise SystemExit(f"{side} run failed:\n{stderr[-3000:]}")
        stamps[side] = json.loads(times.read_text())
    compared = _overlapping_steps(stamps, args.first)
    if min(len(times) for times in compared.values()) < 10:
        raise SystemExit(f"fewer than 10 steps of each side ran at the same time after step {args.first}; "
                         f"give more --steps")
    return {side: statistics.median(times) for side, times in compared.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300, help="training steps per run")
    parser.add_argument("--skip", type=int, default=2, help="--skip-steps of the capture")
    parser.add_argument("--window", type=int, default=3, help="--steps of the capture")
    parser.add_argument("--settle", type=int, default=3, help="steps after the window left out of the comparison")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cpu", type=_cpu, default=min(os.sched_getaffinity(0)),
                        help="the one CPU both sides share, time-sliced alike, or none to let them move "
                             "(default: the first this process may use)")
    args = parser.parse_args()
    args.first = first = args.skip + args.window + args.settle
    if args.steps < first + 10:
        parser.error(f"--steps must leave at least 10 steps after step {first}")
    runs = []
    with tempfile.TemporaryDirectory(prefix="rnnprof-overhead-") as tmp:
        folder = Path(tmp)
        (folder / "train.py").write_text(SCRIPT)
        for k in range(args.repeat):
            runs.append(_side_by_side(folder, args, k))
    print(f"LSTM LM on random tokens, {args.steps} steps per run, 1 thread; steps from {first} that both sides "
          f"ran at the same time compared (the capture window is steps {args.skip}..{args.skip + args.window - 1});"
          f" {args.repeat} repeats, both sides at once"
          f"{f' on CPU {args.cpu}' if args.cpu is not None else ''}")
    for side in SIDES:
        shown = ", ".join(f"{run[side] * 1000:.2f}" for run in runs)
        print(f"  {side:<8} median step {statistics.median(run[side] for run in runs) * 1000:8.2f} ms  "
              f"(repeats: {shown})")
    ratios = [run["plain"] / run["rnnprof"] for run in runs]
    ratio = statistics.median(ratios)
    print(f"speed of the untraced steps with rnnprof / without: {ratio:.3f} "
          f"(repeats: {', '.join(f'{r:.3f}' for r in ratios)})")
    targets = Targets()
    targets.at_least(f"untraced steps' speed under rnnprof trace (median of repeats; {spread_of(ratios, 3)})",
                     ratio * 100, TARGET * 100, "%")
    return targets.report()


if __name__ == "__main__":
    sys.exit(main())
