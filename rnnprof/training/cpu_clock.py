"""CPU time around a timed call: the process's own, and the whole host's busy time.

A step's wall time says how long it took; its CPU time says how much of the host's cores it used. Together
they say what running more work side by side can gain on a CPU: a step that already kept every core busy
cannot get faster by more threads (PA006's CPU figure, ``rnnprof.analyzers.placement.inter_op_threads``). The host's busy
time (all processes, from ``/proc/stat``; ``None`` where it cannot be read) less the process's own is what
other work took from the same cores meanwhile.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

_PROC_STAT = "/proc/stat"
_IDLE_FIELDS = (3, 4)  # idle, iowait in the "cpu" line's fields after its name
_BUSY_FIELDS = 8  # user nice system idle iowait irq softirq steal (guest time is inside user)


@dataclass(frozen=True)
class CpuTimes:
    """Seconds of CPU time during one call."""

    process_s: float  # this process, every thread, user + system
    host_busy_s: float | None  # every core of the host, busy (not idle), every process; None: not readable

    def as_dict(self) -> dict:
        return {"process_s": round(self.process_s, 6),
                "host_busy_s": None if self.host_busy_s is None else round(self.host_busy_s, 6)}


def _host_busy_seconds() -> float | None:
    """Busy CPU seconds of the whole host since boot (``/proc/stat``'s ``cpu`` line), or None."""
    try:
        with open(_PROC_STAT, encoding="ascii") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) <= _BUSY_FIELDS:
        return None
    try:
        ticks = [int(v) for v in fields[1:_BUSY_FIELDS + 1]]
    except ValueError:
        return None
    busy = sum(ticks) - sum(ticks[i] for i in _IDLE_FIELDS)
    return busy / os.sysconf("SC_CLK_TCK")


class CpuClock:
    """``start()`` before a call, ``stop()`` after it: the CPU times in between."""

    def __init__(self) -> None:
        self._process = 0.0
        self._host: float | None = None

    def start(self) -> None:
        self._host = _host_busy_seconds()
        self._process = time.process_time()

    def stop(self) -> CpuTimes:
        process = time.process_time() - self._process
        host = _host_busy_seconds()
        busy = None if host is None or self._host is None else max(host - self._host, 0.0)
        return CpuTimes(process_s=process, host_busy_s=busy)
