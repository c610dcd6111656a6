"""Communication per process group, collective and phase: calls, bytes, time, bandwidth, exposed time, stragglers.

The collectives are the table's collective records (``events.collectives``). Per rank and (group, collective,
phase) a ``GroupTraffic``: calls; nccl-tests' message size S summed (``roofline.message_bytes``) over the calls
whose message is known; their summed durations; of that, the time hidden behind compute on the rank (the compute
``analyzers.comm`` measures). Across ranks, a ``GroupRow`` per (group, collective, phase) with nccl-tests'
algorithmic (S / t) and bus bandwidth (``roofline.bus_factor`` for the group's members). ``group_stragglers``:
per group, the member that arrived last at its collectives most often. The figures as reported:
docs/commands/comm.md, "Process groups".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rnnprof.analyzers.classify import collective_types
from rnnprof.analyzers.collectives import CollectivesReport
from rnnprof.analyzers.intervals import covered, merge
from rnnprof.analyzers.roofline import bus_factor, message_bytes
from rnnprof.events import EventTable, ProcessGroup
from rnnprof.events.collectives import INFERRED
from rnnprof.events.names import COLLECTIVE_TYPES, UNKNOWN_COLLECTIVE

GBPS = 1e3  # bytes per µs in a GB/s (10^9 bytes a second, as nccl-tests counts)


@dataclass(frozen=True)
class GroupTraffic:
    """One rank's calls of one collective in one process group and phase."""

    worker: str
    group: str  # the group's name ("": not known)
    collective: str  # the operation the calls implement (names.COLLECTIVE_TYPES)
    phase: str  # names.PHASES, "" not known
    calls: int
    members: int  # the group's member count (0: not known)
    bytes: int  # nccl-tests' S summed over the sized calls
    sized_calls: int  # calls whose message the trace records
    sized_time_us: float  # their summed durations
    time_us: float  # every call's summed duration
    hidden_us: float  # of time_us, while compute ran on the rank

    @property
    def exposed_us(self) -> float:
        return self.time_us - self.hidden_us

    def as_dict(self) -> dict:
        return {"calls": self.calls, "bytes": self.bytes, "sized_calls": self.sized_calls, "time_us": self.time_us,
                "exposed_us": self.exposed_us, "hidden_us": self.hidden_us}


@dataclass(frozen=True)
class GroupRow:
    """One (group, collective, phase) over the ranks that ran it."""

    group: str
    collective: str
    phase: str
    members: int
    ranks: tuple[GroupTraffic, ...]  # one per rank, by rank

    def total(self, name: str) -> float:
        return sum(getattr(r, name) for r in self.ranks)

    @property
    def calls(self) -> int:
        return int(self.total("calls"))

    @property
    def bytes(self) -> int:
        return int(self.total("bytes"))

    @property
    def time_us(self) -> float:
        return self.total("time_us")

    @property
    def exposed_us(self) -> float:
        return self.total("exposed_us")

    def per_rank(self, value: float) -> float:
        return value / len(self.ranks) if self.ranks else 0.0

    @property
    def algbw_gbps(self) -> float | None:
        """Bytes over time of the sized calls, in GB/s (None: no sized call, or no time)."""
        t = self.total("sized_time_us")
        return self.bytes / t / GBPS if t > 0 and self.total("sized_calls") else None

    @property
    def busbw_gbps(self) -> float | None:
        """nccl-tests' bus bandwidth (``roofline.bus_factor``); None without the group's member count."""
        if self.algbw_gbps is None or self.members < 1 or self.collective == UNKNOWN_COLLECTIVE:
            return None
        return self.algbw_gbps * bus_factor(self.collective, self.members)

    def as_dict(self) -> dict:
        return {"group": self.group, "collective": self.collective, "phase": self.phase or None,
                "members": self.members or None, "ranks": len(self.ranks), "calls": self.calls,
                "calls_per_rank": self.per_rank(self.calls), "bytes": self.bytes,
                "sized_calls": int(self.total("sized_calls")), "time_us": self.time_us,
                "exposed_us": self.exposed_us, "hidden_us": self.total("hidden_us"),
                "algbw_gbps": self.algbw_gbps, "busbw_gbps": self.busbw_gbps,
                "per_rank": {r.worker: r.as_dict() for r in self.ranks}}


@dataclass(frozen=True)
class GroupStraggler:
    """The member of a group that arrived last at its collectives most often (ties: the waiting it caused)."""

    group: str
    collectives: int  # the group's collectives matched across its members
    last_rank: str
    arrived_last: int
    caused_wait_us: float  # the other members' waits at the collectives it arrived last at
    ranks: int  # members seen

    def as_dict(self) -> dict:
        return {"group": self.group, "collectives": self.collectives, "last_rank": self.last_rank,
                "arrived_last": self.arrived_last, "caused_wait_us": self.caused_wait_us, "ranks": self.ranks}


@dataclass(frozen=True)
class GroupsReport:
    """A table's (or a job's) traffic per rank, group, collective and phase; its groups; what was inferred."""

    traffic: tuple[GroupTraffic, ...]
    groups: tuple[ProcessGroup, ...]
    inferred: dict[str, int] = field(default_factory=dict)  # records by what was inferred of them (INFERRED texts)
    unknown: dict[str, int] = field(default_factory=dict)  # records whose group, message or phase is not known
    records: int = 0
    # the ranks' flight-recorder entries joined to their calls (metadata.flight_recorder); empty: no rank had them
    flight_recorder: dict[str, int] = field(default_factory=dict)

    def rows(self) -> tuple[GroupRow, ...]:
        return group_rows(self.traffic)

    def as_dict(self, stragglers: tuple[GroupStraggler, ...] = ()) -> dict:
        return {"groups": [g.as_dict() for g in self.groups], "collectives": self.records,
                "traffic": [r.as_dict() for r in self.rows()], "stragglers": [s.as_dict() for s in stragglers],
                "inferred": dict(self.inferred), "unknown": dict(self.unknown),
                **({"flight_recorder": dict(self.flight_recorder)} if self.flight_recorder else {})}


def call_bytes(in_nelems: np.ndarray, out_nelems: np.ndarray, collectives: list[str], dtypes: list[str]) -> np.ndarray:
    """nccl-tests' S of each call (``roofline.message_bytes``), -1 where its message or element size is unknown."""
    sizes = [message_bytes(kind, int(n_in), int(n_out), dtype) if min(n_in, n_out) >= 0 else 0.0
             for kind, n_in, n_out, dtype in zip(collectives, in_nelems.tolist(), out_nelems.tolist(), dtypes)]
    return np.array([int(s) if s > 0 else -1 for s in sizes], dtype=np.int64)


def analyze_groups(table: EventTable, compute: tuple[np.ndarray, np.ndarray, np.ndarray]) -> GroupsReport:
    """The table's traffic per rank, group, collective and phase; ``compute``: ``(starts, ends, device)`` of the
    compute intervals each collective's time is hidden behind (on its own device)."""
    records = table.collectives
    if not len(records):
        return GroupsReport((), table.metadata.process_groups, flight_recorder=dict(table.metadata.flight_recorder))
    rows = records.row
    strings = np.asarray(table.strings, dtype=object)
    device = table.device[rows]
    hidden = np.zeros(len(rows))
    for d in np.unique(device).tolist():
        union = merge(compute[0][compute[2] == d], compute[1][compute[2] == d])
        mine = device == d
        hidden[mine] = covered(*union, table.ts[rows[mine]], table.ts[rows[mine]] + table.dur[rows[mine]])
    kinds = np.asarray(COLLECTIVE_TYPES, dtype=object)[collective_types(table, rows)]
    sizes = call_bytes(records.in_nelems, records.out_nelems, list(kinds), list(strings[records.dtype]))
    members = _members(table, records)
    keys = list(zip([table.devices[d].worker for d in device.tolist()], strings[records.group], kinds,
                    strings[records.phase]))
    traffic = _traffic(keys, np.maximum(table.dur[rows], 0.0), hidden, sizes, members)
    return GroupsReport(traffic, table.metadata.process_groups, _inferred(records.inferred),
                        _unknown(strings, records, sizes), len(records), dict(table.metadata.flight_recorder))


def _members(table: EventTable, records) -> np.ndarray:
    """Each record's group member count: recorded, else its group's listed ranks (0: not known)."""
    listed = {g.name: g.size for g in table.metadata.process_groups}
    by_group = np.array([listed.get(table.strings[c], 0) for c in records.group.tolist()], dtype=np.int64)
    return np.where(records.group_size > 0, records.group_size, by_group)


def _traffic(keys: list[tuple], dur: np.ndarray, hidden: np.ndarray, sizes: np.ndarray,
             members: np.ndarray) -> tuple[GroupTraffic, ...]:
    found: dict[tuple, list] = {}
    for k, key in enumerate(keys):
        entry = found.setdefault(key, [0, 0, 0, 0, 0.0, 0.0, 0.0])
        entry[0] += 1
        entry[1] = max(entry[1], int(members[k]))
        if sizes[k] >= 0:
            entry[2] += int(sizes[k])
            entry[3] += 1
            entry[4] += float(dur[k])
        entry[5] += float(dur[k])
        entry[6] += float(hidden[k])
    return tuple(GroupTraffic(*key, *values) for key, values in sorted(found.items()))


def _inferred(bits: np.ndarray) -> dict[str, int]:
    return {text: int(((bits & bit) != 0).sum()) for bit, text in INFERRED.items() if ((bits & bit) != 0).any()}


def _unknown(strings: np.ndarray, records, sizes: np.ndarray) -> dict[str, int]:
    counts = {"group": int((strings[records.group] == "").sum()), "message": int((sizes < 0).sum()),
              "phase": int((strings[records.phase] == "").sum())}
    return {what: n for what, n in counts.items() if n}


def group_rows(traffic: tuple[GroupTraffic, ...]) -> tuple[GroupRow, ...]:
    """The ranks' traffic as one row per (group, collective, phase), the most time first."""
    rows: dict[tuple, list[GroupTraffic]] = {}
    for t in traffic:
        rows.setdefault((t.group, t.collective, t.phase), []).append(t)
    made = [GroupRow(*key, max(t.members for t in ranks), tuple(sorted(ranks, key=lambda t: _rank_order(t.worker))))
            for key, ranks in rows.items()]
    return tuple(sorted(made, key=lambda r: (-r.time_us, r.group, r.collective, r.phase)))


def _rank_order(worker: str) -> tuple:
    digits = "".join(ch for ch in worker if ch.isdigit())
    return (int(digits) if digits else -1, worker)


def combine_groups(parts: list[GroupsReport]) -> GroupsReport:
    """One report of several ranks' (analysed apart)."""
    inferred: dict[str, int] = {}
    unknown: dict[str, int] = {}
    recorder: dict[str, int] = {}
    groups: dict[str, ProcessGroup] = {}
    for part in parts:
        for counts, total in ((part.inferred, inferred), (part.unknown, unknown), (part.flight_recorder, recorder)):
            for key, n in counts.items():
                total[key] = total.get(key, 0) + n
        for g in part.groups:
            groups.setdefault(g.name, g)
    return GroupsReport(tuple(t for p in parts for t in p.traffic), tuple(groups.values()), inferred, unknown,
                        sum(p.records for p in parts), recorder)


def group_stragglers(collectives: CollectivesReport | None) -> tuple[GroupStraggler, ...]:
    """Per process group with collectives matched across two or more members, the member that arrived last most
    often (collectives of no known group, matched by their order alone, are left out)."""
    if collectives is None:
        return ()
    per: dict[str, dict[str, list]] = {}
    counts: dict[str, int] = {}
    members: dict[str, set] = {}
    for c in collectives.collectives:
        group = c.group
        if not group or group.startswith("stream:"):  # no group known: matched by order across whatever groups
            continue
        counts[group] = counts.get(group, 0) + 1
        members.setdefault(group, set()).update(a.worker for a in c.arrivals)
        entry = per.setdefault(group, {}).setdefault(c.last.worker, [0, 0.0])
        entry[0] += 1
        entry[1] += c.caused_wait_us
    found = []
    for group, ranks in sorted(per.items()):
        worker, (n, caused) = max(ranks.items(), key=lambda item: (item[1][0], item[1][1]))
        found.append(GroupStraggler(group, counts[group], worker, n, caused, len(members[group])))
    return tuple(found)
