"""A PyTorch training profiled with profile_memory=True under a schedule: writes, for each optimizer named on
the command line, ``<name>.trace.json`` (Kineto) and torch's own memory timeline of the same window,
``<name>.timeline.json`` and ``<name>.timeline.raw.json.gz`` (``export_memory_timeline``), into OUT.

    python memory_oracle_job.py OUT [--device cuda:0] OPTIMIZER...

On the CPU by default; ``--device cuda:0``: the model and data on that GPU, CUDA activities recorded, the
timeline of that device."""

import sys
import warnings
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

OPTIMIZERS = {"sgd-momentum": lambda p: torch.optim.SGD(p, lr=1e-3, momentum=0.9),
              "adam": lambda p: torch.optim.Adam(p, lr=1e-3)}


def profile_one(out: Path, name: str, device: str = "cpu") -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)).to(device)
    optimizer = OPTIMIZERS[name](model.parameters())
    x, y = torch.randn(64, 256, device=device), torch.randn(64, 256, device=device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])

    def ready(prof):
        prof.export_chrome_trace(str(out / f"{name}.trace.json"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            prof.export_memory_timeline(str(out / f"{name}.timeline.json"), device=device)
            prof.export_memory_timeline(str(out / f"{name}.timeline.raw.json.gz"), device=device)

    with profile(activities=activities, profile_memory=True, record_shapes=True, with_stack=True,
                 schedule=schedule(wait=0, warmup=1, active=2, repeat=1), on_trace_ready=ready) as prof:
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            prof.step()


if __name__ == "__main__":
    names = sys.argv[2:]
    where = "cpu"
    if names[:1] == ["--device"]:
        where, names = names[1], names[2:]
    for optimizer_name in names:
        profile_one(Path(sys.argv[1]), optimizer_name, where)
