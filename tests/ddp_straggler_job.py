"""A 2-rank CPU DDP (gloo) job in which rank 1 may sleep before each backward: a planted straggler.

    python -m torch.distributed.run --nproc-per-node 2 ... tests/ddp_straggler_job.py OUT_DIR SLEEP_S

Each rank trains a tiny LSTM LM for ``STEPS`` steps under ``torch.profiler`` (``schedule(wait=1, warmup=1,
active=10)``: ``ProfilerStep#2`` to ``#11`` are recorded) and writes ``rank{r}.json`` (its Kineto trace) and
``rank{r}-sleeps.json``: for each step number, how long ``time.sleep`` took by the script's own clock
(``time.perf_counter``), ``rank{r}-steps.json``: for each step number, its time by that clock (from its
start to the next step's), and ``rank{r}-runqueue.json``: from its start to its optimizer step's return, the time
the training thread waited for a core while ready to run (the kernel's count, ``/proc/thread-self/schedstat``;
absent where the kernel does not say), and ``rank{r}-threads-runqueue.json``: the same for all the process's
threads, summed (gloo runs a collective on a thread of its own). The sleep is outside every operator and every
``record_function`` range but the step's.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ACTIVE = 10
STEPS = 2 + ACTIVE + 1  # wait 1 + warmup 1 + active, and one more so the schedule completes
VOCAB, EMBED, HIDDEN, BATCH, LENGTH = 64, 16, 32, 4, 8
SCHEDSTAT = "/proc/thread-self/schedstat"  # Linux: ns on a core, ns waiting on a run queue, time slices
TASKS = "/proc/self/task"  # Linux: a folder per thread of the process, each with its schedstat


def _runqueue_us(path: str = SCHEDSTAT) -> float | None:
    try:
        with open(path, "rb") as f:
            return int(f.read().split()[1]) / 1e3
    except (OSError, ValueError, IndexError):
        return None


def _threads_runqueue_us() -> float | None:
    """The process's threads' waits for a core, summed (µs; threads that ended since are not counted)."""
    waits = [_runqueue_us(str(task / "schedstat")) for task in Path(TASKS).iterdir()] if Path(TASKS).is_dir() else []
    return sum(w for w in waits if w is not None) if waits else None


def main(out_dir: Path, sleep_s: float) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, EMBED)
            self.lstm = nn.LSTM(EMBED, HIDDEN, batch_first=True)
            self.out = nn.Linear(HIDDEN, VOCAB)

        def forward(self, tokens):
            hidden, _ = self.lstm(self.embed(tokens))
            return self.out(hidden)

    model = DistributedDataParallel(LM())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(1 + rank)
    sleeps: dict[int, float] = {}
    waited: dict[int, float] = {}
    threads_waited: dict[int, float] = {}
    starts: list[float] = []

    def on_trace_ready(prof):
        prof.export_chrome_trace(str(out_dir / f"rank{rank}.json"))

    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=ACTIVE),
                 on_trace_ready=on_trace_ready) as prof:
        for step in range(STEPS):
            starts.append(time.perf_counter())
            queued, all_queued = _runqueue_us(), _threads_runqueue_us()
            tokens = torch.randint(0, VOCAB, (BATCH, LENGTH + 1), generator=generator)
            with record_function("forward"):
                logits = model(tokens[:, :-1])
                loss = loss_fn(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
            if rank == 1 and sleep_s > 0:
                t0 = time.perf_counter()
                time.sleep(sleep_s)
                sleeps[step] = (time.perf_counter() - t0) * 1e6
            with record_function("backward"):
                optimizer.zero_grad()
                loss.backward()
            with record_function("optimizer"):
                optimizer.step()
            if queued is not None:
                waited[step] = _runqueue_us() - queued
            if all_queued is not None:
                threads_waited[step] = _threads_runqueue_us() - all_queued
            prof.step()
    starts.append(time.perf_counter())
    (out_dir / f"rank{rank}-sleeps.json").write_text(json.dumps(sleeps))
    if waited:
        (out_dir / f"rank{rank}-runqueue.json").write_text(json.dumps(waited))
    if threads_waited:
        (out_dir / f"rank{rank}-threads-runqueue.json").write_text(json.dumps(threads_waited))
    (out_dir / f"rank{rank}-steps.json").write_text(json.dumps({k: (b - a) * 1e6 for k, (a, b) in
                                                               enumerate(zip(starts, starts[1:]))}))
    dist.barrier()  # neither rank tears its group down while the other still talks to it
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), float(sys.argv[2]))
