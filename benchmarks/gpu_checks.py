"""rnnprof on a real GPU, each figure against the GPU's own counters (CUDA events, the caching allocator).

A small DDP training script (written here; nccl on CUDA, gloo where there is none) runs under
``rnnprof trace -- python -m torch.distributed.run --nproc-per-node 1``. Each step it does, in order:

* five bf16 matrix products of 8192x8192 by 8192x8192, timed together by a pair of CUDA events;
* a host-to-device and a device-to-host copy of a pinned buffer, and a device-to-device copy;
* one replay of a CUDA graph (``torch.cuda.graphs``) of a few elementwise kernels;
* a DDP forward and backward of a two-layer bf16 MLP (DDP's gradient all-reduce);
* explicit collectives timed by one pair of events: an all-reduce (AVG) and an out-of-place all-gather;
* the optimizer step; the whole step inside an NVTX range ``train_step``.

The script writes what its own clock saw, per step: each event pair's milliseconds, the step's wall time and
``torch.cuda.max_memory_allocated()`` since the step began (``reset_peak_memory_stats`` at its start).
Then rnnprof's commands run on the run directory and the figures are set side by side:

1. count-ops: kernels, NCCL kernels, memcpy kinds, the graph launch and the NVTX range are there;
2. comm: communication busy time per step against the collectives' event time;
3. roofline: the matrix product's achieved TFLOP/s against the events' (2 N^3 per product), and the peak
   rnnprof looks up for the name torch reports;
4. memory: the device's peak per step against ``max_memory_allocated``;
5. hang: the same script made to stop in a collective-free sleep after a few steps, under ``--hang-after``,
   so the flight recorder's dump goes through the nccl backend;
6. whatif: the script run again, each under ``rnnprof trace``, with 2 matrix products instead of 5, without
   the copies, without the HtoD copy, and with a 3 ms host sleep before the products; the replay of the base
   run with the same change (``--scale aten::matmul=0.4``, ``--no-copies``, ``--no-copies HtoD``,
   ``--delay rank0=3@^aten::matmul$``) against the change really measured (the script's median step);
7. a launch-bound step (400 elementwise kernels of about 1 µs) run eager and replayed from one CUDA graph, each
   under ``rnnprof trace``: ``whatif --graph-launch`` and ``--fix PF007`` on the eager run against the graph
   run (``--launch-only``: this alone);

and the built-in torch RNNLM (``trace --framework torch --devices 1``, nccl where there is a GPU) is captured.

``--watch-only`` (section 8): ``rnnprof watch`` on a CUDA training loop (``_watch_job.py --cuda --loader``: one rank
on nccl, its batches from a DataLoader, each step 8 products of a 2048 x 2048 float32 matrix and a small MLP under
DDP, the step's end synchronized), its
cost against the loop run plain (pairs taking turns, each run's median step by the script's clock), and a watched run
whose steps gain 8 products from step 300: the window the regression opens against the baseline window, in GPU
kernels per step (the script's count: 8 more).

Everything lands under OUT (run directories, each command's ``--json``, the script's clock), and one table is
printed. ``--compare OUT`` re-reads an OUT made elsewhere (a GPU machine) and prints the table again.

    python benchmarks/gpu_checks.py [OUT]          # on a machine with a GPU; elsewhere it says so and exits 0
    python benchmarks/gpu_checks.py OUT --watch-only
    python benchmarks/gpu_checks.py --compare OUT
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

SCRIPT = r'''
import contextlib, json, os, sys, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

clock_path, steps, hang_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
variant = sys.argv[4] if len(sys.argv) > 4 else "base"  # base or one of VARIANTS
cuda = torch.cuda.is_available()
dist.init_process_group("nccl" if cuda else "gloo")
local = int(os.environ.get("LOCAL_RANK", "0"))
device = torch.device(f"cuda:{local}") if cuda else torch.device("cpu")
if cuda:
    torch.cuda.set_device(device)
n, width, batch, matmuls = (8192, 4096, 512, 5) if cuda else (256, 256, 32, 5)
matmuls = 2 if variant == "fewer-matmuls" else matmuls
dtype = torch.bfloat16 if cuda else torch.float32
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width))
model = model.to(device=device, dtype=dtype)
ddp = DistributedDataParallel(model, device_ids=[local] if cuda else None)
optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3)
a = torch.randn(n, n, device=device, dtype=dtype)
b = torch.randn(n, n, device=device, dtype=dtype)
host = torch.randn(16 << 20)
host = host.pin_memory() if cuda else host
on_device = torch.empty_like(host, device=device)
copy = torch.empty_like(on_device)
shard = torch.randn(4 << 20, device=device)
gathered = torch.empty(shard.numel() * dist.get_world_size(), device=device)
static = torch.randn(1 << 20, device=device)
graph = None
if cuda:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            out = (static * 2 + 1).relu_()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = (static * 2 + 1).relu_()


class Timer:
    """A pair of CUDA events around a block (wall clock on CPU)."""
    def __init__(self):
        self.pair = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if cuda else None
    def __enter__(self):
        if self.pair: self.pair[0].record()
        else: self.t = time.perf_counter()
        return self
    def __exit__(self, *exc):
        if self.pair: self.pair[1].record()
        else: self.t = time.perf_counter() - self.t
    def ms(self):
        return self.pair[0].elapsed_time(self.pair[1]) if self.pair else self.t * 1e3


records = []
for step in range(steps):
    if step == hang_at:
        print(f"rank {dist.get_rank()}: stopping in a sleep at step {step}", flush=True)
        time.sleep(3600)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    timers = {name: Timer() for name in ("step", "matmul", "copies", "graph", "collectives")}
    with timers["step"], (torch.cuda.nvtx.range("train_step") if cuda else contextlib.nullcontext()):
        if variant == "host-sleep":
            time.sleep(0.003)
        with timers["matmul"]:
            for _ in range(matmuls):
                c = a @ b
        with timers["copies"]:
            if variant not in ("no-copies", "no-htod"):
                on_device.copy_(host, non_blocking=True)
            if variant != "no-copies":
                host.copy_(on_device, non_blocking=True)
                copy.copy_(on_device)
        with timers["graph"]:
            if graph is not None:
                graph.replay()
        x = torch.randn(batch, width, device=device, dtype=dtype)
        loss = ddp(x).float().pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        with timers["collectives"]:
            dist.all_reduce(shard, op=dist.ReduceOp.AVG)
            dist.all_gather_into_tensor(gathered, shard)
        optimizer.step()
    if cuda:
        torch.cuda.synchronize()
    records.append({"step": step, "wall_ms": (time.perf_counter() - start) * 1e3,
                    **{f"{name}_ms": timer.ms() for name, timer in timers.items()},
                    "matmul_flop": 2 * n ** 3 * matmuls,
                    "max_allocated": int(torch.cuda.max_memory_allocated()) if cuda else None})
if dist.get_rank() == 0:
    Path = __import__("pathlib").Path
    Path(clock_path).write_text(json.dumps({"device": torch.cuda.get_device_name() if cuda else "cpu",
                                            "torch": torch.__version__, "steps": records}, indent=1))
dist.destroy_process_group()
'''

# A launch-bound step: OPS elementwise kernels on a small tensor, each launched by the host (eager) or all of
# them replayed from one CUDA graph (graph); an optimizer step of one parameter marks the step.
LAUNCH_SCRIPT = r'''
import json, sys, time
import torch

clock_path, steps, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
OPS = 200
device = torch.device("cuda")
weight = torch.nn.Parameter(torch.zeros(1, device=device))
optimizer = torch.optim.SGD([weight], lr=0.1)
weight.grad = torch.ones_like(weight)
x = torch.randn(4096, device=device)


def work():
    for _ in range(OPS):
        x.mul_(0.999).add_(0.001)


graph = None
if mode == "graph":
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        work()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        work()
records = []
for step in range(steps):
    torch.cuda.synchronize()
    start = time.perf_counter()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    if graph is not None:
        graph.replay()
    else:
        work()
    optimizer.step()
    end.record()
    torch.cuda.synchronize()
    records.append({"step": step, "wall_ms": (time.perf_counter() - start) * 1e3, "step_ms": begin.elapsed_time(end)})
with open(clock_path, "w") as f:
    json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "mode": mode,
               "kernels_per_step": 2 * OPS, "steps": records}, f, indent=1)
'''
LAUNCH_MODES = ("eager", "graph")
LAUNCH_CHANGES = (("graph-launch", ("--graph-launch",)), ("fix-PF007", ("--fix", "PF007")))

STEPS, SKIP, WINDOW = 10, 3, 4
# runs really changed, each with the replay that predicts it from the base run
VARIANTS = (("fewer-matmuls", ("--scale", "aten::matmul=0.4")), ("no-copies", ("--no-copies",)),
            ("no-htod", ("--no-copies", "HtoD")), ("host-sleep", ("--delay", "rank0=3@^aten::matmul$")))
COMMANDS = ("count-ops", "comm", "roofline", "memory", "critical-path", "audit")


def _rnnprof(*args: str, log) -> subprocess.CompletedProcess:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "rnnprof", *args], capture_output=True, text=True)
    log.write(f"$ rnnprof {' '.join(args)}  # exit {done.returncode}, {time.perf_counter() - started:.1f} s\n"
              f"{done.stdout[-4000:]}{done.stderr[-4000:]}\n")
    log.flush()
    return done


def run(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "train.py").write_text(SCRIPT)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1"]
    with open(out / "log.txt", "a") as log:
        _rnnprof("trace", "--out", str(out / "run"), "--force", "--steps", str(WINDOW), "--skip-steps", str(SKIP),
                 "--", *torchrun, str(out / "train.py"), str(out / "clock.json"), str(STEPS), "-1", log=log)
        for command in COMMANDS:
            done = _rnnprof(command, str(out / "run"), "--json", log=log)
            (out / f"{command}.json").write_text(done.stdout)
        done = _rnnprof("whatif", str(out / "run"), "--scale", "family:gemm=0.5", "--json", log=log)
        (out / "whatif.json").write_text(done.stdout)
        _rnnprof("trace", "--out", str(out / "hung"), "--force", "--steps", "2", "--skip-steps", "1",
                 "--hang-after", "20s", "--", *torchrun, str(out / "train.py"), str(out / "clock-hung.json"),
                 str(STEPS), "5", log=log)
        done = _rnnprof("hang", str(out / "hung"), "--json", log=log)
        (out / "hang.json").write_text(done.stdout)
        for variant, _ in VARIANTS:
            _rnnprof("trace", "--out", str(out / variant), "--force", "--steps", str(WINDOW), "--skip-steps",
                     str(SKIP), "--", *torchrun, str(out / "train.py"), str(out / f"clock-{variant}.json"),
                     str(STEPS), "-1", variant, log=log)
        for variant, change in VARIANTS:
            done = _rnnprof("whatif", str(out / "run"), *change, "--json", log=log)
            (out / f"whatif-{variant}.json").write_text(done.stdout)
        _rnnprof("trace", "--out", str(out / "builtin"), "--force", "--framework", "torch", "--model", "rnnlm",
                 "--devices", "1", "--warmup", "5", "--batches", "10", log=log)
        done = _rnnprof("comm", str(out / "builtin"), "--json", log=log)
        (out / "builtin-comm.json").write_text(done.stdout)


def run_launch(out: Path) -> None:
    """The launch-bound step, eager and from a CUDA graph, each under rnnprof trace; the eager run replayed with
    its launches replaced by a graph launch."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "launch.py").write_text(LAUNCH_SCRIPT)
    with open(out / "log.txt", "a") as log:
        for mode in LAUNCH_MODES:
            _rnnprof("trace", "--out", str(out / f"launch-{mode}"), "--force", "--steps", str(WINDOW),
                     "--skip-steps", str(SKIP), "--", sys.executable, str(out / "launch.py"),
                     str(out / f"clock-launch-{mode}.json"), str(STEPS), mode, log=log)
        for name, change in LAUNCH_CHANGES:
            done = _rnnprof("whatif", str(out / "launch-eager"), *change, "--json", log=log)
            (out / f"whatif-launch-{name}.json").write_text(done.stdout)


WATCH_JOB = Path(__file__).resolve().parent / "_watch_job.py"
WATCH_STEPS, WATCH_SKIP, WATCH_PAIRS, WATCH_SLOW_AT, WATCH_MATMULS = 600, 50, 3, 300, 8


def run_watch(out: Path, cuda: bool) -> None:
    """The loop plain and under ``rnnprof watch`` in turns, then watched with the planted regression."""
    out.mkdir(parents=True, exist_ok=True)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1"]
    job = [str(WATCH_JOB), "--steps", str(WATCH_STEPS), "--matmuls", str(WATCH_MATMULS), "--loader",
           *(["--cuda"] if cuda else [])]
    with open(out / "log.txt", "a") as log:
        for k in range(WATCH_PAIRS):
            for mode in ("plain", "watched"):
                clock = out / f"watch-{mode}-{k}"
                clock.mkdir(exist_ok=True)
                command = [*torchrun, *job[:1], str(clock), *job[1:]]
                if mode == "plain":
                    done = subprocess.run(command, capture_output=True, text=True)
                    log.write(f"$ {' '.join(command)}  # exit {done.returncode}\n{done.stderr[-2000:]}\n")
                else:
                    _rnnprof("watch", "--out", str(out / f"watch-run-{k}"), "--", *command, log=log)
        clock = out / "watch-slow"
        clock.mkdir(exist_ok=True)
        _rnnprof("watch", "--out", str(out / "watch-slow-run"), "--", *torchrun, job[0], str(clock), *job[1:],
                 "--slow-at", str(WATCH_SLOW_AT), "--slow-matmuls", str(WATCH_MATMULS), log=log)
        for window in sorted(p for p in (out / "watch-slow-run" / "windows").glob("*") if p.is_dir()):
            done = _rnnprof("count-ops", str(window), "--json", log=log)
            (out / f"watch-count-ops-{window.name}.json").write_text(done.stdout)


def compare_watch(out: Path) -> None:
    steps = {}
    for mode in ("plain", "watched"):
        for k in range(WATCH_PAIRS):
            clock = _json(out / f"watch-{mode}-{k}" / "rank0-clock.json")
            if clock:
                steps.setdefault(mode, []).append(1e3 * statistics.median(clock["step_s"][WATCH_SKIP:WATCH_SLOW_AT]))
    if len(steps.get("plain", [])) != WATCH_PAIRS or len(steps.get("watched", [])) != WATCH_PAIRS:
        print("8. watch: no figures (see log.txt)")
        return
    ratios = [w / p for p, w in zip(steps["plain"], steps["watched"])]
    print(f"8. watch: median step plain {', '.join(f'{x:.3f}' for x in steps['plain'])} ms, watched "
          f"{', '.join(f'{x:.3f}' for x in steps['watched'])} ms: watched / plain {', '.join(f'{r:.4f}' for r in ratios)}"
          f" (median {statistics.median(ratios):.4f})")
    for path in sorted(out.glob("watch-count-ops-*.json")):
        kernels = (_json(path) or {}).get("kernels") or {}
        per_step = {s: v["gpu_kernels"] for d in kernels.get("devices") or [] if "gpu" in d["device"]
                    for s, v in d.get("per_step", {}).items()}
        gemms = sum(v["gpu_kernels"] for name, v in (kernels.get("by_type") or {}).items() if "gemm" in name.lower())
        print(f"  window {path.stem.removeprefix('watch-count-ops-')}: GPU kernels per step {per_step}, GEMM kernels "
              f"{gemms / max(len(per_step), 1):.1f} a step")


def compare_launch(out: Path) -> None:
    eager, graph = (_step_ms(out / f"clock-launch-{mode}.json") for mode in LAUNCH_MODES)
    if eager is None or graph is None:
        print("7. launches: no figures (see log.txt)")
        return
    print(f"7. a launch-bound step (the script's clock, median): eager {eager:.3f} ms, from a CUDA graph "
          f"{graph:.3f} ms ({graph - eager:+.3f})")
    for name, change in LAUNCH_CHANGES:
        median = (_json(out / f"whatif-launch-{name}.json") or {}).get("median") or {}
        if not median.get("replayed_us"):
            print(f"  {' '.join(change)}: no figures (see log.txt)")
            continue
        change_ms = (median["predicted_us"] - median["replayed_us"]) / 1e3
        predicted = eager + change_ms
        print(f"  {' '.join(change)} on the eager run: replay {median['replayed_us'] / 1e3:.3f} -> "
              f"{median['predicted_us'] / 1e3:.3f} ms ({change_ms:+.3f}), so {predicted:.3f} ms, error "
              f"{100 * (predicted - graph) / graph:+.1f} % against the graph run")


def _json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _step_ms(path: Path) -> float | None:
    """The median step_ms of a clock's steps after the warm-up, the window's closing step left out."""
    clock = _json(path)
    if clock is None:
        return None
    steps = [r["step_ms"] for r in clock["steps"][SKIP:] if r["step"] != SKIP + WINDOW - 1]
    return statistics.median(steps) if steps else None


def _gpu(devices: list, key: str = "device") -> list:
    """The entries of GPU devices (a CPU-only run: all of them)."""
    gpu = [d for d in devices or [] if "cpu" not in str(d.get(key, ""))]
    return gpu or list(devices or [])


def _row(label: str, values, form: str = "9.3f") -> None:
    print(f"  {label:<30} " + " ".join(format(v, form) if isinstance(v, (int, float)) else f"{v!s:>9}"
                                       for v in values))


def compare(out: Path) -> None:
    clock = _json(out / "clock.json")
    if clock is None:
        raise SystemExit(f"{out / 'clock.json'}: missing or unreadable; the traced script did not finish")
    traced = clock["steps"][SKIP:SKIP + WINDOW]
    print(f"device: {clock['device']}, torch {clock['torch']}; traced steps {SKIP}-{SKIP + WINDOW - 1}, "
          f"the script's own clock (CUDA events; wall clock on a CPU):")
    for key in ("step_ms", "wall_ms", "matmul_ms", "copies_ms", "graph_ms", "collectives_ms"):
        _row(key, [r[key] for r in traced])
    script_tflops = [r["matmul_flop"] / r["matmul_ms"] / 1e9 for r in traced]
    _row("matmul TFLOP/s", script_tflops, "9.1f")
    if traced and traced[0].get("max_allocated") is not None:
        _row("max_memory_allocated (MB)", [r["max_allocated"] / 1e6 for r in traced], "9.2f")

    counts = _json(out / "count-ops.json") or {}
    kernels = counts.get("kernels") or {}
    print("1. count-ops:")
    for device in _gpu(kernels.get("devices")):
        per_step = device.get("per_step", {}).values()
        _row(f"{device['device']} GPU kernels/step", [v.get("gpu_kernels") for v in per_step], "9d")
    by_type = kernels.get("by_type") or {}
    nccl = {name: c for name, c in by_type.items() if "nccl" in name.lower()}
    print(f"  types named nccl: {nccl or 'none'}")
    comm = _json(out / "comm.json") or {}
    copies = comm.get("copies") or {}
    print(f"  copies by kind: {(copies.get('total') or {}).get('copies') or 'none'}")
    print(f"  graphs: {(copies.get('total') or {}).get('graphs')}; launch names {copies.get('graph_launch_names')}")
    trace = next((out / "run").rglob("rank0*.json*"), None)
    if trace is not None:
        import gzip
        opener = gzip.open if trace.suffix == ".gz" else open
        with opener(trace, "rt") as f:
            events = json.load(f).get("traceEvents", [])
        ranges = [e for e in events if e.get("name") == "train_step"]
        print(f"  NVTX train_step in {trace.name}: {len(ranges)} events, categories "
              f"{sorted({e.get('cat', '') for e in ranges})}")

    print("2. comm (whole window of traced steps):")
    for device in _gpu(comm.get("devices")):
        total = device.get("total") or {}
        print(f"  {device['device']}: communication {total.get('communication_us', 0) / 1e3:.3f} ms against the "
              f"collectives' events {sum(r['collectives_ms'] for r in traced):.3f} ms; memcpy "
              f"{total.get('memcpy_us', 0) / 1e3:.3f} ms against the copies' events "
              f"{sum(r['copies_ms'] for r in traced):.3f} ms; busy {total.get('busy_us', 0) / 1e3:.3f} ms, "
              f"span {total.get('span_us', 0) / 1e3:.3f} ms, steps' events {sum(r['step_ms'] for r in traced):.3f} ms")
    ops = [(o["name"], o["events"], round(o["total_us"], 1)) for o in comm.get("communication_ops", [])]
    print(f"  communication ops: {ops}")

    roofline = _json(out / "roofline.json") or {}
    print("3. roofline:")
    for rank in roofline.get("ranks", []):
        print(f"  {rank['worker']} peaks: {rank.get('peaks')}")
        for op in rank.get("ops", []):
            if op["name"] in ("aten::mm", "aten::matmul") or op.get("family") == "GEMM":
                print(f"  {op['name']} {op.get('dtype')} [{op.get('shapes')}] x{op['count']}: "
                      f"{op['tflops_per_s']:.1f} TFLOP/s over {op['kernel_us'] / 1e3:.3f} ms "
                      f"(script: {statistics.median(script_tflops):.1f} TFLOP/s)")

    memory = _json(out / "memory.json") or {}
    print("4. memory:")
    for device in _gpu(memory.get("devices")):
        peaks = {step: peak for step, peak in device.get("step_peaks", [])}
        _row(f"{device['device']} step peak (MB)", [peaks.get(r["step"], float("nan")) / 1e6 for r in traced], "9.2f")
        print(f"  baseline {device.get('baseline')} ({device.get('baseline_source')}), allocator_max "
              f"{device.get('allocator_max')}, whole-window peak {(device.get('peak') or {}).get('allocated')}")

    whatif = _json(out / "whatif.json") or {}
    print(f"whatif --scale family:gemm=0.5: median {whatif.get('median')}")
    hang = _json(out / "hang.json") or {}
    print(f"5. hang: {hang.get('kind')}: {hang.get('summary')}; notes {hang.get('notes')}")
    print("6. whatif against runs really changed (the script's step_ms, median of the steps after the warm-up "
          "but the closing one; each run under rnnprof trace; predicted: the base's step plus the replay's change):")
    base = _step_ms(out / "clock.json")
    for variant, change in VARIANTS:
        real, doc = _step_ms(out / f"clock-{variant}.json"), _json(out / f"whatif-{variant}.json") or {}
        median = doc.get("median") or {}
        if base is None or real is None or not median.get("measured_us"):
            print(f"  {variant}: no figures (see log.txt)")
            continue
        change_ms = (median["predicted_us"] - median["replayed_us"]) / 1e3
        predicted = base + change_ms  # the base run's clock plus the replay's change, as diagnosis_replay.py
        print(f"  {variant} ({' '.join(change)}): base {base:.3f} ms; changed run {real:.3f} ms "
              f"({real - base:+.3f}); replay's change {change_ms:+.3f} ms, so {predicted:.3f} ms, "
              f"error {100 * (predicted - real) / real:+.1f} %")
    builtin = _json(out / "builtin-comm.json") or {}
    print(f"built-in RNNLM: comm devices {[(d['device'], d.get('basis')) for d in builtin.get('devices', [])]}")
    audit = _json(out / "audit.json") or {}
    print(f"audit: {[(f.get('rule'), f.get('subject')) for f in audit.get('findings', [])]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?", help="folder for the runs, the JSON and the log (default: a "
                                                             "new temporary folder, kept)")
    parser.add_argument("--compare", action="store_true", help="only print the table of an OUT made before")
    parser.add_argument("--launch-only", action="store_true", help="only the launch-bound step (section 7)")
    parser.add_argument("--watch-only", action="store_true", help="only rnnprof watch on a CUDA loop (section 8)")
    parser.add_argument("--cpu", action="store_true", help="run the same flow where there is no GPU (gloo, fp32, "
                                                           "wall clocks): a check of the script, not of rnnprof")
    args = parser.parse_args(argv)
    if args.compare and args.out is None:
        parser.error("--compare needs the OUT of an earlier run")
    if not args.compare:
        import torch

        if not torch.cuda.is_available() and not args.cpu:
            print("gpu_checks: no CUDA device here; its figures are checked against a GPU's own counters "
                  "(--cpu runs the same flow on the CPU)")
            return 0
        args.out = args.out or Path(tempfile.mkdtemp(prefix="rnnprof-gpu-checks-"))
        print(f"runs, JSON and log in {args.out}")
        if args.watch_only:
            run_watch(args.out, torch.cuda.is_available())
        else:
            if not args.launch_only:
                run(args.out)
            if torch.cuda.is_available():
                run_launch(args.out)
    if args.watch_only:
        compare_watch(args.out)
        return 0
    if not args.launch_only:
        compare(args.out)
    compare_launch(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
