"""TF ``StepStats`` -> Chrome trace (Perfetto, chrome://tracing), one process per device.

The schema is in ``rnnprof.rundir``. Cross-device transfers become flow arrows:
the partition graphs pair each ``_Send`` with its ``_Recv`` by rendezvous tensor name. TF's
executor does not always report ``_Send``/``_Recv`` in step_stats, so when they are absent the
arrow runs from the op producing the sent tensor to the first op consuming the received one.
Collectives (ring all-reduce) exchange data without Send/Recv: their ops on the member devices
are matched by group and instance key, and each member gets an arrow to the next one.
Between tasks of a gRPC cluster, the receiving task times each tensor it fetches (``RecvTensor``,
``RecvBuf`` for a collective's chunks, with bytes, key and both devices in the label): these are events
of the receiving device, and a transfer's arrow ends on its ``RecvTensor``. ``offsets`` (task prefix ->
µs its clock is ahead of the chief's) put every task's events on the chief's clock before they are merged.
Protos are read duck-typed; TensorFlow is not imported here.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from rnnprof.events import parse_tf_device
from rnnprof.events.names import COLLECTIVE_PREFIX, CROSS_TASK_RECV_OPS, RECV_OPS, SEND_OPS
from rnnprof.rundir import MANIFEST_VERSION, UNTIMED_FETCHES

EXECUTOR_LANE = "ops"
_DEVICE_LANE = re.compile(r"^(?P<device>.*?/device:[A-Za-z_]+:\d+)(?:[/ ](?P<lane>.+))?$")
_LABEL = re.compile(r"^\s*(?P<name>[^=]+?)\s*=\s*(?P<op>[A-Za-z0-9_.>-]+)\((?P<inputs>.*)\)\s*$")
# The label of a cross-task receive: "[4000B] [30.0Mb/s] edge_39_foo from /job:.../device:CPU:1 to /job:..."
_REMOTE_RECV = re.compile(r"^\[(?P<bytes>\d+)B\]\s+\[[^\]]*\]\s+(?P<key>\S+)\s+from\s+(?P<src>\S+)\s+to\s+(?P<dst>\S+)")


@dataclass
class OpEvent:
    device: str
    lane: str
    node: str
    op: str
    start_us: float
    dur_us: float
    bytes: int = 0
    inputs: tuple[str, ...] = ()
    thread: str = ""  # filled by lane packing
    remote: dict | None = None  # a cross-task receive: {"tensor", "from", "to"}

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us


@dataclass
class GraphCollective:
    """One collective instance: the same (group_key, instance_key) op on each member device."""

    group_key: int
    instance_key: int
    op: str
    members: list[tuple[str, str]]  # (device, node name), in device-name order


@dataclass
class Transfer:
    tensor: str
    key: str
    src_device: str
    dst_device: str
    producer: str  # node whose output is sent (or the _Send node itself)
    consumers: list[str] = field(default_factory=list)  # nodes reading the _Recv (or the _Recv itself)


def split_device(stat_device: str) -> tuple[str, str]:
    """``/job:.../device:GPU:0/stream:7`` -> (``/job:.../device:GPU:0``, ``stream:7``)."""
    match = _DEVICE_LANE.match(stat_device)
    if not match:
        return stat_device, EXECUTOR_LANE
    lane = (match.group("lane") or EXECUTOR_LANE).strip()
    if lane.lower() == "compute":
        lane = EXECUTOR_LANE
    return match.group("device"), lane


def parse_label(label: str, node_name: str) -> tuple[str, tuple[str, ...]]:
    """Op type and input names from a timeline label ``name = Op(a, ^b)``."""
    match = _LABEL.match(label or "")
    if match:
        inputs = tuple(i.strip() for i in match.group("inputs").split(",") if i.strip())
        return match.group("op"), inputs
    if label and " " not in label.strip():
        return label.strip(), ()
    tail = node_name.rsplit(":", 1)
    return (tail[1] if len(tail) == 2 and tail[1] else node_name), ()


def _times_us(node) -> tuple[float, float]:
    start_ns = getattr(node, "all_start_nanos", 0)
    if start_ns:
        return start_ns / 1000.0, getattr(node, "all_end_rel_nanos", 0) / 1000.0
    return float(node.all_start_micros), float(node.all_end_rel_micros)


def _output_bytes(node) -> int:
    total = 0
    for out in getattr(node, "output", ()):
        total += int(out.tensor_description.allocation_description.requested_bytes)
    return total


def offset_of(device: str, offsets: dict[str, float] | None) -> float:
    """The clock offset (µs) of the task ``device`` belongs to; 0 when unknown."""
    for task, offset in (offsets or {}).items():
        if device.startswith(task + "/"):
            return offset
    return 0.0


def op_events(step_stats, offsets: dict[str, float] | None = None) -> list[OpEvent]:
    events = []
    for dev in step_stats.dev_stats:
        device, lane = split_device(dev.device)
        shift = offset_of(device, offsets)
        for node in dev.node_stats:
            if node.node_name == "_SOURCE":
                continue
            op, inputs = parse_label(node.timeline_label, node.node_name)
            start, dur = _times_us(node)
            size, remote = _output_bytes(node), None
            if op in CROSS_TASK_RECV_OPS:
                match = _REMOTE_RECV.match(node.timeline_label or "")
                if match:
                    size = int(match.group("bytes"))
                    remote = {"tensor": match.group("key"), "from": match.group("src"), "to": match.group("dst")}
            events.append(OpEvent(device, lane, node.node_name, op, start - shift, dur, size, inputs,
                                  remote=remote))
    events.sort(key=lambda e: (e.device, e.lane, e.start_us, -e.dur_us))
    return events


def pack_threads(events: Sequence[OpEvent]) -> None:
    """Give every event a thread of its lane so that no two events in one thread overlap.

    A thread holds only events that follow one another (one may start when the previous ends);
    an event that starts before the last one in a thread has ended, nested in it or not, goes to
    the first thread of its lane that is free (``ops``, ``ops/2``, ...). Nothing nests in a thread,
    so a viewer draws no call stack that never happened and binds each flow arrow to its own op.
    """
    by_lane: dict[tuple[str, str], list[OpEvent]] = {}
    for e in events:
        by_lane.setdefault((e.device, e.lane), []).append(e)
    for (_, lane), group in by_lane.items():
        ends: list[float] = []  # per thread, when its last event ends
        for e in sorted(group, key=lambda e: (e.start_us, -e.dur_us)):
            k = next((k for k, end in enumerate(ends) if end <= e.start_us), len(ends))
            if k == len(ends):
                ends.append(e.end_us)
            ends[k] = e.end_us
            e.thread = lane if k == 0 else f"{lane}/{k + 1}"


def _strip_input(name: str) -> str:
    name = name.lstrip("^")
    base, _, port = name.rpartition(":")
    return base if base and port.isdigit() else name


def _attr_str(node, key: str) -> str:
    if key in node.attr:
        value = node.attr[key].s
        return value.decode() if isinstance(value, bytes) else str(value)
    return ""


def transfers_from_partitions(partition_graphs: Iterable, executed: set[str]) -> list[Transfer]:
    """Send/Recv pairs matched by rendezvous tensor name across partition graphs."""
    sends: dict[str, tuple] = {}
    recvs: dict[str, tuple] = {}
    consumers: dict[str, list[str]] = {}
    for graph in partition_graphs:
        for node in graph.node:
            for raw in node.input:
                consumers.setdefault(_strip_input(raw), []).append(node.name)
            if node.op in SEND_OPS:
                sends[_attr_str(node, "tensor_name")] = (node, graph)
            elif node.op in RECV_OPS:
                recvs[_attr_str(node, "tensor_name")] = (node, graph)
    transfers = []
    for tensor, (send, _) in sends.items():
        if tensor not in recvs:
            continue
        recv, _ = recvs[tensor]
        src = _attr_str(send, "send_device") or send.device
        dst = _attr_str(send, "recv_device") or recv.device
        incarnation = send.attr["send_device_incarnation"].i if "send_device_incarnation" in send.attr else 0
        key = f"{src};{incarnation & 0xFFFFFFFFFFFFFFFF:016x};{dst};{tensor};0:0"
        if send.name in executed:
            producer = send.name
        else:
            producer = _strip_input(send.input[0]) if send.input else send.name
        if recv.name in executed:
            reading = [recv.name]
        else:
            reading = consumers.get(recv.name, [])
        transfers.append(Transfer(tensor, key, src, dst, producer, list(reading)))
    return transfers


def _attr_int(node, key: str) -> int | None:
    return int(node.attr[key].i) if key in node.attr else None


def _const_int(nodes: dict, raw_input: str) -> int | None:
    node = nodes.get(_strip_input(raw_input))
    if node is None or node.op != "Const" or "value" not in node.attr:
        return None
    values = list(node.attr["value"].tensor.int_val) or list(node.attr["value"].tensor.int64_val)
    return int(values[0]) if len(values) == 1 else None


def collectives_from_partitions(partition_graphs: Iterable) -> list[GraphCollective]:
    """GraphCollective ops of one instance on several devices, matched by (group_key, instance_key).

    V1 collectives (``CollectiveReduce``, ...) carry the keys as attrs; V2 ones take them as
    inputs 2 and 3, resolved here when they are constants in the same partition.
    """
    members: dict[tuple[int, int], dict[str, str]] = {}
    ops: dict[tuple[int, int], str] = {}
    for graph in partition_graphs:
        nodes = None
        for node in graph.node:
            if not node.op.startswith(COLLECTIVE_PREFIX):
                continue
            group, instance = _attr_int(node, "group_key"), _attr_int(node, "instance_key")
            if group is None or instance is None:
                if nodes is None:
                    nodes = {n.name: n for n in graph.node}
                inputs = list(node.input)
                if len(inputs) < 4:
                    continue
                group, instance = _const_int(nodes, inputs[2]), _const_int(nodes, inputs[3])
                if group is None or instance is None:
                    continue
            members.setdefault((group, instance), {})[node.device] = node.name
            ops[(group, instance)] = node.op
    return [GraphCollective(group, instance, ops[(group, instance)], sorted(by_device.items()))
            for (group, instance), by_device in sorted(members.items()) if len(by_device) > 1]


def step_stats_to_chrome(step_stats, step: int, partition_graphs: Iterable = (),
                         offsets: dict[str, float] | None = None) -> dict:
    """A Chrome trace dict for one step, per the run directory schema; ``offsets`` align the tasks' clocks."""
    events = op_events(step_stats, offsets)
    pack_threads(events)
    devices = sorted({e.device for e in events} | {split_device(d.device)[0] for d in step_stats.dev_stats})
    pids = {d: k + 1 for k, d in enumerate(devices)}
    threads: dict[tuple[str, str], int] = {}
    for e in sorted(events, key=lambda e: (e.device, _thread_order(e.thread))):
        threads.setdefault((e.device, e.thread), len([t for t in threads if t[0] == e.device]) + 1)
    trace = _names(pids, threads)
    runs: dict[tuple[str, str], list[OpEvent]] = {}
    for e in events:
        args = {"name": e.node, "op": e.op, "step": step}
        if e.bytes:
            args["bytes"] = e.bytes
        if e.remote:
            args.update(e.remote)
        trace.append({"ph": "X", "cat": "op", "name": e.op, "pid": pids[e.device], "tid": threads[(e.device, e.thread)],
                      "ts": e.start_us, "dur": e.dur_us, "args": args})
        runs.setdefault((e.device, e.node), []).append(e)
    trace += memory_events(step_stats, pids, threads, offsets, step)
    arrows = _Arrows(trace, pids, threads)
    partition_graphs = list(partition_graphs)
    transfers = transfers_from_partitions(partition_graphs, {e.node for e in events})
    _transfer_arrows(arrows, events, runs, transfers, step)
    _collective_arrows(arrows, runs, partition_graphs, step)
    other = {"producer": "rnnprof", "version": MANIFEST_VERSION, "step": step}
    untimed = untimed_fetches(events, transfers)
    if untimed:
        other[UNTIMED_FETCHES] = untimed
    if offsets:
        other["clock_offsets_us"] = dict(offsets)  # subtracted from each task's timestamps
    return {"traceEvents": trace, "displayTimeUnit": "ms", "otherData": other}


def memory_events(step_stats, pids: dict[str, int], threads: dict[tuple[str, str], int],
                  offsets: dict[str, float] | None, step: int) -> list[dict]:
    """The allocator's records of each node (``memory[].allocation_records``: an allocation, or a free with
    negative bytes) as ``[memory]`` instant events on its device's executor thread; ``Addr`` numbers each
    allocation, and a free takes the number of the oldest allocation of the node's allocator it matches."""
    found, number = [], itertools.count(1)
    for dev in step_stats.dev_stats:
        device, lane = split_device(dev.device)
        if device not in pids:
            continue
        tid, shift = threads.get((device, lane), threads.get((device, EXECUTOR_LANE), 0)), offset_of(device, offsets)
        for node in dev.node_stats:
            for used in getattr(node, "memory", ()):  # absent from step stats built by hand
                held: list[tuple[int, int]] = []
                for record in used.allocation_records:
                    size = int(record.alloc_bytes)
                    if size > 0:
                        addr = (max(step, 0) << 32) + next(number)  # unique across the run's steps
                        held.append((size, addr))
                    else:
                        addr = next((a for b, a in held if b == -size), -1)
                        held = [h for h in held if h[1] != addr]
                    found.append({"ph": "i", "s": "t", "cat": "memory", "name": "[memory]", "pid": pids[device],
                                  "tid": tid, "ts": float(record.alloc_micros) - shift,
                                  "args": {"Bytes": size, "Addr": addr, "node": node.node_name,
                                           "allocator": used.allocator_name, "step": step}})
    return found


def _names(pids: dict[str, int], threads: dict[tuple[str, str], int]) -> list[dict]:
    """The metadata events naming and ordering each device (process) and thread."""
    trace: list[dict] = []
    for device, pid in pids.items():
        trace.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": device}})
        trace.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
    for (device, thread), tid in threads.items():
        pid = pids[device]
        trace.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": thread}})
        trace.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    return trace


class _Arrows:
    """Appends flow arrows (an ``s`` and an ``f`` event sharing an id) to a trace."""

    def __init__(self, trace: list[dict], pids: dict[str, int], threads: dict[tuple[str, str], int]):
        self.trace, self.pids, self.threads = trace, pids, threads
        self.ids = itertools.count(1)

    def add(self, cat: str, source: OpEvent, source_ts: float, target: OpEvent, target_ts: float, args: dict) -> None:
        flow_id = next(self.ids)
        self.trace.append({"ph": "s", "cat": cat, "name": cat, "id": flow_id, "pid": self.pids[source.device],
                           "tid": self.threads[(source.device, source.thread)], "ts": source_ts, "args": args})
        self.trace.append({"ph": "f", "bp": "e", "cat": cat, "name": cat, "id": flow_id,
                           "pid": self.pids[target.device], "tid": self.threads[(target.device, target.thread)],
                           "ts": target_ts, "args": args})


def _transfer_arrows(arrows: _Arrows, events, runs, transfers: list[Transfer], step: int) -> None:
    """An arrow from each run of a transferred tensor's producer to the run of its reader that it fed."""
    fetched: dict[tuple[str, str], list[OpEvent]] = {}  # (receiving device, tensor) -> its timed receives
    for e in events:
        if e.remote and e.op == "RecvTensor":
            fetched.setdefault((e.device, e.remote["tensor"]), []).append(e)
    for t in transfers:
        produced = runs.get((t.src_device, t.producer), [])
        received = fetched.get((t.dst_device, t.tensor))
        # between tasks, the arrow ends on the timed fetch; within one, on the first op reading the tensor
        readers = [received] if received else [runs.get((t.dst_device, c), []) for c in t.consumers]
        for k, source in enumerate(produced):
            # k-th run of the producer feeds the k-th run of the earliest reader (loops run nodes many times)
            candidates = [r[k] for r in readers if len(r) > k]
            if not candidates:
                break
            target = min(candidates, key=lambda r: r.start_us)
            args = {"tensor": t.tensor, "key": t.key, "from": t.src_device, "to": t.dst_device, "step": step}
            arrows.add("transfer", source, _near_end(source), target, _near_start(target), args)


def _task(device: str) -> str:
    """The gRPC task of a device name (``parse_tf_device``'s worker); "" outside a cluster."""
    parsed = parse_tf_device(device)
    return parsed.worker if parsed is not None else ""


def untimed_fetches(events: Sequence[OpEvent], transfers: list[Transfer]) -> dict[str, int]:
    """Tasks that receive tensors from another task (``transfers``, the count) but whose step stats hold no
    timed fetch (``RecvTensor``): TensorFlow's master gathers each task's RPC log after the step, and now and then
    one does not come back (seen on a loaded machine: a parameter server's 13 fetches absent)."""
    timed = {_task(e.device) for e in events if e.remote and e.op in CROSS_TASK_RECV_OPS}
    expected: dict[str, int] = {}
    for t in transfers:
        dst = _task(t.dst_device)
        if dst and dst != _task(t.src_device):
            expected[dst] = expected.get(dst, 0) + 1
    return {task: n for task, n in sorted(expected.items()) if task not in timed}


def _collective_arrows(arrows: _Arrows, runs, partition_graphs: list, step: int) -> None:
    for c in collectives_from_partitions(partition_graphs):
        member_runs = [runs.get(member, []) for member in c.members]
        for k in range(min(len(r) for r in member_runs)):
            # Each member passes data to the next in the group's device order, as a ring does:
            # from the start of its op (when it can first send) to the end of the next one's.
            for i, source_runs in enumerate(member_runs):
                source, target = source_runs[k], member_runs[(i + 1) % len(member_runs)][k]
                args = {"op": c.op, "group_key": c.group_key, "instance_key": c.instance_key,
                        "from": source.device, "to": target.device, "group_size": len(member_runs), "step": step}
                arrows.add("collective", source, _near_start(source), target, _near_end(target), args)


# How far inside its slice a flow end sits. Viewers bind a flow end to the slice enclosing its
# timestamp on that thread; wall-clock microseconds near 1.8e15 keep only about 0.25 µs in a double,
# so an end placed exactly on a slice's edge could bind to a neighbour that touches it.
_INSIDE_US = 1.0


def _near_start(event: OpEvent) -> float:
    """A timestamp just after the event starts, inside it (half-way for events shorter than 2 µs)."""
    return event.start_us + min(event.dur_us / 2, _INSIDE_US)


def _near_end(event: OpEvent) -> float:
    """A timestamp just before the event ends, inside it (half-way for events shorter than 2 µs)."""
    return event.end_us - min(event.dur_us / 2, _INSIDE_US)


def _thread_order(thread: str) -> tuple:
    lane, _, k = thread.partition("/")
    return (lane != EXECUTOR_LANE, lane, int(k) if k.isdigit() else 1)
