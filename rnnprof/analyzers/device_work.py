"""What makes a device busy, and which runtime call launched each piece of GPU work.

The definitions every device analysis shares, below all of them (comm, idle, launches, copies, collectives,
opcount import from here, never the other way):

* ``device_work_mask``: the events that make their device busy. On a GPU only stream records count
  (kernels, memcpy, memset, NCCL kernels); a GPU with no stream record (step stats captured without the
  GPU tracer) falls back to its executor ops. A CPU device counts its ops; the host nothing. A CPU rank
  of a gloo job counts its host operators (``host_operator_devices``).
* ``kernel_masks``: the events that are CPU kernels and GPU kernels (``opcount.DEFINITIONS``); ``launchers``:
  for each piece of GPU work, the runtime call with its correlation id, within one worker (ids restart per process).
* ``outermost_by_lane``: the events nested in no other of their lane (a PyTorch operator, not its children).
* ``work_split``: one device's op time less another's, split into unequal work and the same ops running slower
  (contention for shared cores, or a slower device); ``unequal_work_by_step``: the unequal work of each step;
  both from each device's ``Tally`` (``device_tallies``), which a job's ranks give apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from rnnprof.analyzers.classify import DEVICE_WORK
from rnnprof.events import Device, EventTable, Kind, match_correlation
from rnnprof.events.names import CROSS_TASK_RECV_OPS

STREAM_LANE_PREFIXES = ("stream", "memcpy")
BASIS_STREAMS = "streams"
BASIS_EXECUTOR = "executor ops"
BASIS_OPS = "ops"
BASIS_HOST_OPS = "host operators"
WORK_SHARE = 0.5  # on shared cores, unequal work must explain this much of a difference to be called imbalance
DIGITS = re.compile(r"\d+")
FEEDS_AND_FETCHES = ("_Arg", "_Retval")  # TF's client feeds and fetches, on the client's device only
CPU_KERNEL_KINDS = np.array([Kind.HOST_OP, Kind.COMMUNICATION], dtype=np.int8)
GPU_KERNEL_KINDS = np.array([Kind.KERNEL, Kind.COMMUNICATION], dtype=np.int8)


def device_work_mask(table: EventTable, classes: np.ndarray) -> tuple[np.ndarray, dict[int, str]]:
    """Events that make their device busy (see module docstring), and per device what they are.

    On a GPU only stream records count (kernels, memcpy, memset, NCCL kernels); a GPU with no
    stream record at all (step stats captured without the GPU tracer) falls back to its
    executor ops, with basis ``"executor ops"``. A CPU device counts its ops; the host nothing.
    """
    work = np.isin(classes, np.array([int(c) for c in DEVICE_WORK], dtype=np.int8))
    is_gpu = np.array([d.kind == "gpu" for d in table.devices] or [False], dtype=bool)
    is_host = np.array([d.kind == "host" for d in table.devices] or [False], dtype=bool)
    is_stream_lane = np.zeros(len(table.strings), dtype=bool)
    for code in np.unique(table.lane):
        is_stream_lane[code] = table.strings[code].startswith(STREAM_LANE_PREFIXES)
    on_stream = np.isin(table.kind, (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)) | (
        (table.kind == Kind.COMMUNICATION) & is_stream_lane[table.lane]
    )
    counts_stream = np.bincount(table.device[work & is_gpu[table.device] & on_stream], minlength=len(table.devices))
    mask = work & ~is_host[table.device]
    basis: dict[int, str] = {}
    host_operators = host_operator_devices(table)
    for code, device in enumerate(table.devices):
        if device.kind == "gpu":
            basis[code] = BASIS_STREAMS if counts_stream[code] else BASIS_EXECUTOR
        elif device in host_operators:
            basis[code] = BASIS_HOST_OPS
        elif device.kind != "host":
            basis[code] = BASIS_OPS
    stream_gpus = np.array([basis.get(c) == BASIS_STREAMS for c in range(len(table.devices))] or [False])
    # On a GPU with stream records, its executor ops are host-side launches.
    mask &= ~(stream_gpus[table.device] & ~on_stream)
    return mask, basis


def host_operator_devices(table: EventTable) -> set[Device]:
    """Devices whose activity is their host operators (CPU ranks), as the loaders listed them, merged tables included."""
    return set(table.metadata.host_operator_devices)


def thread_codes(table: EventTable) -> np.ndarray:
    """Per event, a number for its thread: its worker's (``EventTable.worker_codes``) and its lane together (two
    ranks' threads may have the same id; a CPU rank's operators and its annotations share a lane)."""
    return table.worker_codes()[table.device] * (int(table.lane.max(initial=0)) + 1) + table.lane


def kernel_masks(table: EventTable) -> tuple[np.ndarray, np.ndarray]:
    """``(cpu, gpu)``: the events that are CPU kernels and GPU kernels (see ``opcount.DEFINITIONS``), steps aside."""
    on_gpu = np.isin(table.device, [i for i, d in enumerate(table.devices) if d.kind == "gpu"])
    lanes = np.array([s.startswith("stream:") for s in table.strings], dtype=bool)[table.lane]
    fetches = np.array([s in CROSS_TASK_RECV_OPS for s in table.strings] or [False], dtype=bool)[table.op_type]
    cpu = ~on_gpu & np.isin(table.kind, CPU_KERNEL_KINDS) & ~fetches  # a task's fetch from another is no op run
    return cpu, on_gpu & lanes & np.isin(table.kind, GPU_KERNEL_KINDS)


def launchers(table: EventTable) -> np.ndarray:
    """For each event, the index of the runtime call that launched it (same worker, same correlation id), else -1.

    Only GPU work (events on a GPU device that are not runtime calls) gets a launcher.
    """
    out = np.full(len(table), -1, dtype=np.int64)
    is_gpu = np.array([d.kind == "gpu" for d in table.devices] or [False], dtype=bool)
    work = np.flatnonzero(is_gpu[table.device] & (table.kind != Kind.RUNTIME) & (table.correlation >= 0))
    calls = np.flatnonzero((table.kind == Kind.RUNTIME) & (table.correlation >= 0))
    if not len(work) or not len(calls):
        return out
    key = table.process_correlation()  # correlation ids match within one process
    found = match_correlation(key[calls], key[work])
    out[work[found >= 0]] = calls[found[found >= 0]]
    return out


@dataclass(frozen=True)
class WorkSplit:
    """The heaviest device's op time less the lightest's, µs per step, split in two: ``unequal_work``, the ops
    one device runs more often than the other (names with digits folded, so that tower_0/MatMul and tower_1/MatMul
    are one op), at the two devices' mean time per run of the op; ``slower``, the rest: the same ops taking
    longer. TF's feeds and fetches (``_Arg``, ``_Retval``), which only the client's device runs, are left out, and
    so are a CPU rank's operators inside another of their thread (``device_tallies``). Op time is a sum: ops
    overlapping on one device's threads count each."""

    unequal_work: float
    slower: float

    def is_contention(self, busy_difference_us: float | None) -> bool:
        """Whether the same ops running slower, not unequal work, explain the busy-time difference: unequal work
        under ``WORK_SHARE`` of the op-time difference, and the slower ops at least ``WORK_SHARE`` of
        ``busy_difference_us`` (a rank's busy time also holds its untraced time, a sleep say); None where busy
        time is the devices' ops alone (logical devices of one process: what unequal work leaves is the same ops
        taking longer or overlapping less on the shared threads)."""
        if busy_difference_us is None:
            return self.share < WORK_SHARE
        return self.share < WORK_SHARE and self.slower >= WORK_SHARE * busy_difference_us

    @property
    def share(self) -> float:
        """The share of the difference that unequal work explains: 0 where there is none, 1 where it is all of
        it or the heavier device's op time is no longer than the lighter's."""
        total = self.unequal_work + self.slower
        if self.unequal_work <= 0:
            return 0.0
        return min(self.unequal_work / total, 1.0) if total > 0 else 1.0

    def as_dict(self) -> dict:
        return {"unequal_work": round(self.unequal_work, 1), "same_ops_slower": round(self.slower, 1)}


@dataclass(frozen=True)
class Tally:
    """One device's outermost ``compute_mask`` events (``device_tallies``), by op name with digits folded: runs and
    summed µs, over the whole table (``whole``) and per step of it (``steps``)."""

    whole: tuple[dict[str, int], dict[str, float]]
    steps: dict[int, tuple[dict[str, int], dict[str, float]]]


def device_tallies(events: EventTable, mask: np.ndarray, devices) -> dict[Device, Tally]:
    """The ``Tally`` of each of ``devices`` over the ``mask`` events (their devices' work): TF's feeds and fetches
    left out, and a CPU rank's operators inside another of their thread (a TensorFlow device's ops share one lane
    across its threads and overlap without nesting). A device's tally needs only its own events: a job's ranks
    give theirs apart."""
    mask = mask & ~np.isin(events.op_type, [events.code_of(t) for t in FEEDS_AND_FETCHES])
    nesting = host_operator_devices(events)
    found = {}
    for device in devices:
        code = events.devices.index(device) if device in events.devices else -1
        rows = _outermost(events, mask & (events.device == code), device in nesting)
        found[device] = Tally(_tally(events, rows), {int(s): _tally(events, rows & (events.step == s))
                                                     for s in events.steps()})
    return found


_NO_WORK = Tally(({}, {}), {})


def work_split(heavy: Tally | None, light: Tally | None, steps: int) -> WorkSplit:
    """``WorkSplit`` of the ``heavy`` device against the ``light`` one from their tallies (``device_tallies``;
    None: no work), over a table of ``steps`` steps."""
    steps = max(steps, 1)  # a trace that numbers no steps is one
    (n_h, t_h), (n_l, t_l) = (heavy or _NO_WORK).whole, (light or _NO_WORK).whole
    unequal = _unequal(n_h, t_h, n_l, t_l)
    total = sum(t_h.values()) - sum(t_l.values())
    return WorkSplit(unequal / steps, (total - unequal) / steps)


def unequal_work_by_step(heavy: Tally | None, light: Tally | None, steps) -> list[float]:
    """``WorkSplit.unequal_work`` of the ``heavy`` device against the ``light`` one in each of ``steps`` (µs), from
    their tallies: the operators one device runs and the other does not, measured step by step."""
    empty = ({}, {})
    heavy, light = heavy or _NO_WORK, light or _NO_WORK
    return [_unequal(*heavy.steps.get(int(s), empty), *light.steps.get(int(s), empty)) for s in steps]


def _unequal(n_h: dict[str, int], t_h: dict[str, float], n_l: dict[str, int], t_l: dict[str, float]) -> float:
    """The time of the runs one side has more of than the other, op by op, at the two sides' mean time a run."""
    unequal = 0.0
    for name in n_h.keys() | n_l.keys():
        runs_h, runs_l = n_h.get(name, 0), n_l.get(name, 0)
        unequal += (runs_h - runs_l) * (t_h.get(name, 0.0) + t_l.get(name, 0.0)) / (runs_h + runs_l)
    return unequal


def _outermost(events: EventTable, sel: np.ndarray, nest: bool = True) -> np.ndarray:
    """``sel`` less the events inside another ``sel`` event of their lane (a PyTorch operator's children: counted
    in their parent's time, they would be counted twice); ``nest`` False: all of ``sel`` (``outermost_by_lane``)."""
    out = np.zeros_like(sel)
    for _, _, rows in outermost_by_lane(events.lane, events.ts, events.end, np.flatnonzero(sel), nest).values():
        out[rows] = True
    return out


def outermost_by_lane(lanes: np.ndarray, starts: np.ndarray, ends: np.ndarray, rows: np.ndarray, nest: bool = True):
    """Per lane, the ``rows`` not nested in an earlier one of ``rows`` on that lane: {lane: (starts, ends, rows)}
    sorted by start. A row is kept when it starts at or after the end of every row that started before it;
    ``nest`` False (operators that never contain one another, a TensorFlow run's kernels, which overlap on a
    device's lane when they run on different threads): every row is kept."""
    result = {}
    rows = np.asarray(rows, dtype=np.int64)
    rows = rows[lanes[rows] >= 0] if len(rows) else rows
    if not len(rows):
        return result
    order = np.lexsort((-ends[rows], starts[rows], lanes[rows]))
    rows = rows[order]
    lane_of = lanes[rows]
    cuts = np.flatnonzero(lane_of[1:] != lane_of[:-1]) + 1
    for part in np.split(rows, cuts):
        s, e = starts[part], ends[part]
        reach = np.maximum.accumulate(e)
        keep = np.ones(len(part), dtype=bool)
        if nest:
            keep[1:] = s[1:] >= reach[:-1]
        result[int(lanes[part[0]])] = (s[keep], e[keep], part[keep])
    return result


def _tally(events: EventTable, sel: np.ndarray) -> tuple[dict[str, int], dict[str, float]]:
    """Runs and summed µs per op name, digits folded, of the ``sel`` events."""
    codes, inverse = np.unique(events.name[sel], return_inverse=True)
    runs = np.bincount(inverse, minlength=len(codes))
    time = np.bincount(inverse, weights=events.dur[sel], minlength=len(codes))
    n: dict[str, int] = {}
    t: dict[str, float] = {}
    for code, k, us in zip(codes, runs, time):
        name = DIGITS.sub("#", events.text(int(code)))
        n[name] = n.get(name, 0) + int(k)
        t[name] = t.get(name, 0.0) + float(us)
    return n, t
