"""A rank's peak memory over its training, for ``scale`` to compare parallel modes (``--parallel ddp,fsdp``).

``PeakMemory(torch, device)`` is made just before the model is built; ``read(parameters, optimizer)`` after the
timed steps gives ``{"bytes", "source", "model_state_bytes"}``, the source one of ``PEAK_SOURCES``: on a GPU the
caching allocator's peak of the tensors it handed out (``torch.cuda.max_memory_allocated``, reset at the start);
on a CPU the growth of the process's resident memory, from the start to its peak (Linux's ``VmHWM``, reset at the
start through ``/proc/self/clear_refs``), which counts more than tensors: memory that glibc's allocator keeps
after the tensors in it are freed, the first step's thread pools and caches. (A CPU figure of tensors alone,
torch.profiler's memory records, would start the profiler, whose first start imports torch._dynamo: seconds in
every rank.) Where neither can be read, ``bytes`` is None.

``model_state_bytes`` is exact on both: the bytes of the parameters, gradients and optimizer states the rank holds
after its last timed step (a sharded tensor's local shard), what FSDP divides over the ranks.
"""

from __future__ import annotations

import os
from pathlib import Path

CUDA_PEAK = "cuda_max_allocated"
RSS_PEAK_GROWTH = "rss_peak_growth"
PEAK_SOURCES = {
    CUDA_PEAK: "torch.cuda.max_memory_allocated() on the rank's GPU: the peak of the tensors allocated from the "
               "time the model was built",
    RSS_PEAK_GROWTH: "the rank's peak resident memory (the process's VmHWM, reset as the model was built) less its "
                     "resident memory then: tensors and everything else the process grew by",
}
STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")


class PeakMemory:
    """The peak from now on (see the module)."""

    def __init__(self, torch, device):
        self.torch, self.device = torch, device
        self.on_cuda = device.type == "cuda"
        self.baseline: int | None = None
        if self.on_cuda:
            torch.cuda.reset_peak_memory_stats(device)
            return
        try:  # the kernel's peak resident memory (VmHWM) starts again from now: a command to the kernel, no file
            fd = os.open(CLEAR_REFS, os.O_WRONLY)
            try:
                os.write(fd, b"5")
            finally:
                os.close(fd)
        except OSError:
            return
        self.baseline = status_bytes("VmRSS")

    def read(self, parameters, optimizer) -> dict:
        state = model_state_bytes(self.torch, parameters, optimizer)
        if self.on_cuda:
            return {"bytes": int(self.torch.cuda.max_memory_allocated(self.device)), "source": CUDA_PEAK,
                    "model_state_bytes": state}
        peak = status_bytes("VmHWM")
        grown = peak - self.baseline if peak is not None and self.baseline is not None else None
        return {"bytes": grown, "source": RSS_PEAK_GROWTH, "model_state_bytes": state}


def model_state_bytes(torch, parameters, optimizer) -> int:
    """Bytes of ``parameters``, their gradients and ``optimizer``'s state tensors, as this rank holds them."""
    tensors = [t for p in parameters for t in (p, p.grad)]
    tensors += [value for state in optimizer.state.values() for value in state.values() if torch.is_tensor(value)]
    total = 0
    for tensor in tensors:
        if tensor is None:
            continue
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        total += local.numel() * local.element_size()
    return total


def status_bytes(field: str) -> int | None:
    """A ``kB`` field of /proc/self/status in bytes; None where it cannot be read."""
    try:
        for line in STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
