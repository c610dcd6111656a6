"""What capturing a PyTorch script costs, against plain torch.profiler doing the same recording.

A small PyTorch training script (an LSTM language model on random tokens, no DDP, written here) runs
as two processes: ``plain``, the script with torch.profiler around its loop (the same activities,
``record_shapes`` and ``profile_memory`` (``--plain-memory off``: without it), the same schedule: ``--skip`` steps before a ``--window``-step window, one warm-up,
its own ``export_chrome_trace`` as ``on_trace_ready``, ``prof.step()`` after each optimizer step), and
``rnnprof``, the script with no profiler under ``rnnprof trace --steps WINDOW --skip-steps SKIP --
python train.py``. Both processes are built first, then take turns step by step (the parent asks one for a
step, waits for its answer, asks the other; who goes first swaps every round), so only one computes at any
moment and both meet the same load on a shared machine. Each side times its own steps (wall clock of one
training step, the profiler's step or rnnprof's hooks included; ``--device cuda``: the model on the GPU, each
step ended by ``torch.cuda.synchronize()``). Both have one intra-op thread.

Per repeat (fresh processes), three ratios rnnprof / plain:

* the closing step (the window's last, where the trace is written): target <= 1.10;
* the window's other traced steps (median): target <= 1.10;
* the untraced steps after the window and ``--settle`` more (median), as speed plain / rnnprof:
  target >= 0.98 (rnnprof's hooks are gone after the window; plain still calls ``prof.step()``).

The result is the median of the repeats' ratios, with their lowest-highest as the spread.

    python benchmarks/torch_capture_overhead.py                    # 5 repeats
    python benchmarks/torch_capture_overhead.py --window 10 --repeat 9
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from _lockstep import _read, _start
from _measure import Targets, spread_of

ROOT = Path(__file__).resolve().parent.parent
SIDES = ("plain", "rnnprof")
SCRIPT = r'''
import json, os, sys, time
import torch

mode, skip, window, trace_dir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
memory = sys.argv[5] == "on"
device = torch.device(sys.argv[6])
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


model = LM().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=2e-4)
loss_fn = torch.nn.CrossEntropyLoss()
data = torch.randint(0, vocab, (64, batch, length + 1), device=device)

profiler = None
if mode == "plain":  # as TorchCapture sets it up: one warm-up step before the window where there is room
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    warmup = min(1, skip)
    profiler = profile(activities=activities, record_shapes=True, profile_memory=memory,
                       schedule=schedule(wait=skip - warmup, warmup=warmup, active=window, repeat=1),
                       on_trace_ready=lambda p: p.export_chrome_trace(os.path.join(trace_dir, "plain.json")))
    profiler.start()
print("ready", flush=True)
i = 0
for line in sys.stdin:
    if line.strip() != "step":
        break
    cpu, start = time.process_time(), time.perf_counter()
    optimizer.zero_grad()
    logits = model(data[i % len(data), :, :-1])
    loss_fn(logits.reshape(-1, vocab), data[i % len(data), :, 1:].reshape(-1)).backward()
    optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    if profiler is not None:
        profiler.step()
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "words": 0, "cpu": time.process_time() - cpu}), flush=True)
    i += 1
if profiler is not None:
    profiler.stop()
'''


def _argv(side: str, folder: Path, args, k: int) -> list[str]:
    train = [str(folder / "train.py"), "plain" if side == "plain" else "none", str(args.skip), str(args.window),
             str(folder), args.plain_memory, args.device]
    if side == "plain":
        return train
    return ["-m", "rnnprof", "trace", "--out", str(folder / f"run-{k}"), "--steps", str(args.window),
            "--skip-steps", str(args.skip), "--", sys.executable, *train]


def _repeat(folder: Path, args, k: int) -> dict[str, list[float]]:
    """One repeat: both sides' step times, taking turns step by step."""
    procs = {side: _start(_argv(side, folder, args, k)) for side in SIDES}
    times = {side: [] for side in SIDES}
    try:
        for side, proc in procs.items():
            while _read(proc, side) != "ready":
                pass
        for step in range(args.steps):
            for side in (SIDES if step % 2 == 0 else SIDES[::-1]):
                procs[side].stdin.write("step\n")
                procs[side].stdin.flush()
                times[side].append(json.loads(_read(procs[side], side))["seconds"])
        for proc in procs.values():
            proc.stdin.write("stop\n")
            proc.stdin.flush()
    finally:
        for proc in procs.values():
            try:
                proc.stdin.close()
            except OSError:
                pass
            try:
                proc.wait(timeout=120)
            except Exception:
                proc.kill()
                proc.wait()
    manifest = json.loads((folder / f"run-{k}" / "manifest.json").read_text())
    if not manifest.get("captured", {}).get("kineto"):
        raise SystemExit(f"the rnnprof side captured nothing: {manifest.get('error')}")
    return times


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60, help="training steps per run")
    parser.add_argument("--skip", type=int, default=2, help="--skip-steps of the capture")
    parser.add_argument("--window", type=int, default=5, help="--steps of the capture")
    parser.add_argument("--settle", type=int, default=3, help="steps after the window left out of the comparison")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--plain-memory", choices=("on", "off"), default="on",
                        help="whether plain torch.profiler records memory (profile_memory) as rnnprof does; off "
                             "measures what recording memory costs on top of rnnprof's overhead")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the model runs; cuda: the steps end with torch.cuda.synchronize(), and both sides "
                             "record CUDA activities")
    args = parser.parse_args()
    closing = args.skip + args.window - 1
    first = closing + 1 + args.settle
    if args.window < 2 or args.steps < first + 10:
        parser.error(f"--window must be at least 2 and --steps must leave at least 10 steps after step {first}")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    os.environ.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", TF_CPP_MIN_LOG_LEVEL="2")
    ratios = {"closing": [], "traced": [], "untraced": []}
    shown = {side: {"closing": [], "traced": [], "untraced": []} for side in SIDES}
    with tempfile.TemporaryDirectory(prefix="rnnprof-overhead-") as tmp:
        folder = Path(tmp)
        (folder / "train.py").write_text(SCRIPT)
        for k in range(args.repeat):
            times = _repeat(folder, args, k)
            parts = {side: {"closing": t[closing], "traced": statistics.median(t[args.skip:closing]),
                            "untraced": statistics.median(t[first:])} for side, t in times.items()}
            for side in SIDES:
                for part, value in parts[side].items():
                    shown[side][part].append(value)
            ratios["closing"].append(parts["rnnprof"]["closing"] / parts["plain"]["closing"])
            ratios["traced"].append(parts["rnnprof"]["traced"] / parts["plain"]["traced"])
            ratios["untraced"].append(parts["plain"]["untraced"] / parts["rnnprof"]["untraced"])
    print(f"LSTM LM on random tokens on {args.device}, 1 thread, {args.steps} steps per run; window steps "
          f"{args.skip}..{closing} "
          f"(step {closing} closes it and writes the trace), untraced steps compared from {first}; "
          f"{args.repeat} repeats, the two sides taking turns step by step")
    for side in SIDES:
        cells = "  ".join(f"{part} {statistics.median(values) * 1000:7.2f} ms" for part, values in shown[side].items())
        print(f"  {side:<8} median of repeats: {cells}")
    for part, values in ratios.items():
        what = "speed plain / rnnprof" if part == "untraced" else "time rnnprof / plain"
        print(f"  {part:<9} {what}: {statistics.median(values):.3f} (repeats: {', '.join(f'{r:.3f}' for r in values)})")
    targets = Targets()
    targets.at_most(f"closing step, rnnprof / plain torch.profiler ({spread_of(ratios['closing'], 3)})",
                    statistics.median(ratios["closing"]), 1.10, "x")
    targets.at_most(f"traced steps, rnnprof / plain torch.profiler ({spread_of(ratios['traced'], 3)})",
                    statistics.median(ratios["traced"]), 1.10, "x")
    targets.at_least(f"untraced steps' speed, rnnprof / plain torch.profiler ({spread_of(ratios['untraced'], 3)})",
                     statistics.median(ratios["untraced"]), 0.98, "")
    return targets.report()


if __name__ == "__main__":
    sys.exit(main())
