"""A tiny gloo job with one planted hang, for `rnnprof trace -- torchrun --nproc-per-node 2 hang_job.py MODE`.

Each step: load a batch, backward, all_reduce the gradient (#2s+1), all_reduce a statistic (#2s+2), step.
At step 5 rank 1 does MODE's fault ("a+b": rank 2 does b): "data" sleeps in load_batch, "skip" leaves out
the statistic's all_reduce, "mismatch" calls all_gather for the gradient, "lock" blocks on a lock another of
its threads holds, "gil" locks a C mutex it already holds, holding the interpreter (no thread runs Python
again). "slow" and "healthy" plant nothing ("slow": each step sleeps SLOW_S). Lines marked `# plant:` are
what the verdict must name. Each faulty rank prints `planted at TIME` (time.time()) as step 5 begins."""

import ctypes
import sys
import threading
import time

import torch
import torch.distributed as dist

MODE = sys.argv[1]
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 8
SLOW_S = 3.0  # longer than the tests' --hang-after (2 s), ending inside its confirmation (2 s more), whatever the load
FAULT_STEP = 5

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
weight = torch.nn.Parameter(torch.ones(8))
optimizer = torch.optim.SGD([weight], lr=0.01)
lock = threading.Lock()
fault = dict(enumerate(MODE.split("+"), 1)).get(rank)  # "data+lock": rank 1 data, rank 2 lock


def load_batch(step):
    if fault == "data" and step == FAULT_STEP:
        time.sleep(3600)  # plant: data
    return torch.ones(8)


def hold_lock():
    lock.acquire()
    time.sleep(3600)  # plant: holder


for step in range(STEPS):
    if fault and step == FAULT_STEP:
        print(f"planted at {time.time()!r}", file=sys.stderr, flush=True)  # the script's own clock
    batch = load_batch(step)
    loss = (weight * batch).sum()
    loss.backward()
    if fault == "lock" and step == FAULT_STEP:
        threading.Thread(target=hold_lock, daemon=True).start()
        time.sleep(0.2)
        with lock:  # plant: lock
            pass
    if fault == "gil" and step == FAULT_STEP:
        mutex, libc = ctypes.create_string_buffer(64), ctypes.PyDLL(None)  # PyDLL: the call keeps the GIL
        libc.pthread_mutex_lock(mutex)
        libc.pthread_mutex_lock(mutex)  # plant: gil
    if fault == "mismatch" and step == FAULT_STEP:
        dist.all_gather([torch.zeros(8) for _ in range(world)], weight.grad)  # plant: mismatch
    else:
        dist.all_reduce(weight.grad)  # plant: gradient
    statistic = torch.ones(8) * loss.detach()
    if not (fault == "skip" and step == FAULT_STEP):
        dist.all_reduce(statistic)  # plant: statistic
    optimizer.step()
    optimizer.zero_grad()
    if MODE == "slow":
        time.sleep(SLOW_S)
dist.barrier()  # plant: barrier
dist.destroy_process_group()
