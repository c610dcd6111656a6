"""Kineto's ``[memory]`` instant events (``profile_memory=True``) into an event table's ``MemoryRecords``.

Each event's args: ``Bytes`` (signed: a free is negative), ``Addr``, ``Total Allocated``, ``Total Reserved``,
``Device Type`` (c10's: 0 CPU, any other an accelerator: 1 CUDA, 6 HIP, ...) and ``Device Id``. CPU memory
goes on the host device (a CPU rank's ``cpu:0``, as its operators), an accelerator's on ``Device("gpu", id)``.
An event without a number for ``Bytes`` is counted in ``MemoryRecords.unusable``, not read.
"""

from __future__ import annotations

import numpy as np

from rnnprof.events import Device, EventTableBuilder
from rnnprof.events.memory import MemoryRecords, memory_records

MEMORY_EVENT = "[memory]"
CPU_DEVICE_TYPE = 0  # c10::DeviceType::CPU


def _number(value) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return int(value)
    except (OverflowError, ValueError):
        return None


class MemoryReader:
    """Collects the ``[memory]`` events of a stream of decoded chunks; ``records`` builds them once at the end."""

    def __init__(self):
        self.rows: dict[str, list] = {c: [] for c in ("ts", "lane", "nbytes", "addr", "total_allocated",
                                                      "total_reserved", "place")}
        self.unusable = 0

    def add(self, events: list) -> None:
        rows = self.rows
        for e in events:
            a = e.args
            nbytes = _number(a.mem_bytes) if a is not None else None
            if nbytes is None:
                self.unusable += 1
                continue
            rows["ts"].append(e.ts)
            rows["lane"].append(str(e.tid))
            rows["nbytes"].append(nbytes)
            for column, value in (("addr", a.addr), ("total_allocated", a.total_allocated),
                                  ("total_reserved", a.total_reserved)):
                number = _number(value)
                rows[column].append(-1 if number is None else number)
            kind = _number(a.device_type)
            rows["place"].append((CPU_DEVICE_TYPE if kind is None else kind, _number(a.device_id) or 0))

    def records(self, builder: EventTableBuilder, host: Device) -> MemoryRecords:
        """The records, their devices and threads coded in ``builder`` after its events', so that the events' codes
        are those of the trace without memory events."""
        places = self.rows.pop("place")
        self.rows["lane"] = builder.strings.codes(self.rows["lane"])
        codes = {p: builder.device_code(host if p[0] == CPU_DEVICE_TYPE else Device("gpu", max(p[1], 0)))
                 for p in dict.fromkeys(places)}
        device = np.fromiter((codes[p] for p in places), dtype=np.int16, count=len(places))
        return memory_records(unusable=self.unusable, device=device, **self.rows)
