"""PA005: cross-device copies per step that a better placement would avoid.

A copy is avoidable when it carries a tensor into or out of an op that runs off its
tower's device (PA002) or off its requested device (PA001), or when a computed tensor
goes device -> host -> device in the same step (an op in the middle ran on the host).
Feeds (placeholders, function arguments) and fetches are the input pipeline's, not placement's.
"""

from __future__ import annotations

import collections
import functools
import re
from dataclasses import dataclass

import numpy as np

from rnnprof.events.names import RECV_OPS
from rnnprof.events import EventTable, Kind

from .finding import NotChecked, PlacementFinding, Severity
from .inputs import AuditInput, steps_in
from .replica_pinning import misplaced_names
from .soft_placement import fallen_back_compute
from .busy import ALL_STEPS

RULE_ID = "PA005-avoidable-transfers"
TITLE = "Host round-trips and avoidable copies"
_EDGE = re.compile(r"^edge_\d+_")
_RECV_SUFFIX = re.compile(r"/_\d+$")
_FEED = re.compile(r"(^|/)(_recv_|_arg_|_Arg|Placeholder|IteratorGetNext)")


@dataclass(frozen=True)
class TensorCopy:
    """One copy or receive of a tensor seen in a trace or partition graph."""

    step: int
    direction: str  # "HtoD" | "DtoH" | "DtoD" | "recv"
    device: str  # where the copy or receive ran
    producer: str  # the node whose output moved
    name: str  # the copy's own node name
    nbytes: int  # -1 when unknown
    dur: float  # µs, nan when no trace

    @property
    def is_feed(self) -> bool:
        return _is_feed(self.producer)

    @property
    def names_producer(self) -> bool:
        """Whether the copy's name says whose tensor it carries (TF's ``edge_N_<node>``, receives);
        profilers such as Kineto name a copy only by its kind ("Memcpy HtoD (Pageable -> Device)")."""
        return self.producer != self.name or self.direction == "recv"


@functools.lru_cache(maxsize=65536)
def _is_feed(producer: str) -> bool:
    return bool(_FEED.search(producer))


def producer_of(name: str) -> str:
    """The producing node of a copied tensor: ``edge_7_a/b`` -> ``a/b``; receive ``a/b/_3`` -> ``a/b``."""
    return _RECV_SUFFIX.sub("", _EDGE.sub("", name))


def _direction(op_type: str, name: str) -> str:
    text = op_type + " " + name
    for direction in ("HtoD", "DtoH", "DtoD"):
        if direction in text:
            return direction
    return "copy"


def transfers_from_events(events: EventTable) -> list[TensorCopy]:
    recv_codes = [c for c in (events.code_of(op) for op in RECV_OPS) if c >= 0]
    is_memcpy = events.kind == int(Kind.MEMCPY)
    is_recv = np.isin(events.op_type, recv_codes)
    rows = np.flatnonzero(is_memcpy | is_recv)
    labels = [d.label for d in events.devices]
    described: dict[tuple[int, int, bool], tuple[str, str, str]] = {}  # once per distinct name and op
    out = []
    for name_code, op_code, memcpy, device, step, nbytes, dur in zip(
            events.name[rows].tolist(), events.op_type[rows].tolist(), is_memcpy[rows].tolist(),
            events.device[rows].tolist(), events.step[rows].tolist(), events.nbytes[rows].tolist(),
            events.dur[rows].tolist()):
        key = (name_code, op_code, memcpy)
        found = described.get(key)
        if found is None:
            name, op = events.strings[name_code], events.strings[op_code]
            found = described[key] = (_direction(op, name) if memcpy else "recv", producer_of(name), name)
        out.append(TensorCopy(step if step >= 0 else ALL_STEPS, found[0], labels[device], found[1], found[2],
                              nbytes, dur))
    return out


def transfers_from_graph(inp: AuditInput) -> list[TensorCopy]:
    """One receive per step for each receive node; bytes from the producer's recorded output size."""
    sizes = _output_bytes(inp.events)
    out = []
    for node in inp.placements.values():
        if node.op in RECV_OPS:
            producer = producer_of(inp.graph.nodes[node.name].get("tensor_name") or node.name)
            out.append(TensorCopy(ALL_STEPS, "recv", node.assigned.label if node.assigned else "?",
                                producer, node.name, sizes.get(producer, -1), float("nan")))
    return out


def _output_bytes(events: EventTable | None) -> dict[str, int]:
    if events is None or not len(events):
        return {}
    known = events.nbytes >= 0
    return {events.strings[n]: int(b) for n, b in zip(events.name[known].tolist(), events.nbytes[known].tolist())}


def check(inp: AuditInput) -> list[PlacementFinding] | NotChecked:
    transfers, steps, timed = [], 0, True
    if inp.events is not None and len(inp.events):
        transfers, steps = transfers_from_events(inp.events), steps_in(inp.events)
    if not transfers and inp.graph is not None:
        # The graph's receives happen once per step; without trace records their time is unknown.
        transfers, steps, timed = transfers_from_graph(inp), 0, False
    if not transfers:
        if inp.graph is None:
            return NotChecked(RULE_ID, "the trace records no copies or receives and no partition graph was given")
        return []
    bad = misplaced_names(inp) | fallen_back_compute(inp)
    consumers = _recv_consumers(inp)
    avoidable = [t for t in transfers if _avoidable(t, bad, consumers)]
    avoidable += _round_trips(transfers, already=set(map(id, avoidable)))
    findings = [_summary(transfers, steps)]
    if avoidable:
        findings.insert(0, _avoidable_finding(avoidable, steps, bool(bad), _untimed_reason(inp, timed)))
    return findings


def _untimed_reason(inp: AuditInput, timed: bool) -> str:
    if timed:
        return ""
    if inp.events is not None and len(inp.events):
        return ("not estimated: the trace records no time for these receives (found in the "
                "partition graphs); PA002/PA001 time the misplaced ops themselves")
    return "no trace given: cost not estimated"


def _recv_consumers(inp: AuditInput) -> dict[str, set[str]]:
    if inp.graph is None:
        return {}
    return {n: set(inp.graph.successors(n)) for n, d in inp.graph.nodes(data=True)
            if d.get("op") in RECV_OPS}


def _avoidable(t: TensorCopy, bad: set[str], consumers: dict[str, set[str]]) -> bool:
    if t.is_feed:
        return False
    return t.producer in bad or bool(consumers.get(t.name, set()) & bad)


def _round_trips(transfers: list[TensorCopy], already: set[int]) -> list[TensorCopy]:
    """Device->host copies of computed tensors in steps that also copy computed tensors back.

    Only copies that name their producer count: without it a host-to-device copy may as well be
    the next batch, and nothing says a computed tensor made the round trip."""
    by_step = collections.defaultdict(list)
    for t in transfers:
        if not t.is_feed and t.names_producer and t.direction in ("DtoH", "HtoD") and id(t) not in already:
            by_step[t.step].append(t)
    out = []
    for step_transfers in by_step.values():
        if {t.direction for t in step_transfers} == {"DtoH", "HtoD"}:
            out.extend(step_transfers)
    return out


def _stats(transfers: list[TensorCopy], steps: int) -> dict:
    per = max(steps, 1)
    known = [t.nbytes for t in transfers if t.nbytes >= 0]
    durs = [t.dur for t in transfers if not np.isnan(t.dur)]
    return {
        "per_step": round(len(transfers) / per, 1),
        "bytes_per_step": round(sum(known) / per) if known else None,
        "us_per_step": round(sum(durs) / per, 1) if durs else None,
    }


def _summary(transfers: list[TensorCopy], steps: int) -> PlacementFinding:
    groups = collections.defaultdict(list)
    for t in transfers:
        groups[(t.direction, t.device)].append(t)
    stats = _stats(transfers, steps)
    return PlacementFinding(
        rule_id=RULE_ID,
        severity=Severity.INFO,
        title=f"{stats['per_step']:g} copies/receives per step ({_kinds(transfers, steps)})",
        devices=tuple(sorted({t.device for t in transfers})),
        evidence={"steps_traced": steps, **stats,
                  "by_kind": [{"kind": k, "device": d, **_stats(ts, steps)} for (k, d), ts in sorted(groups.items())],
                  "feeds_per_step": round(sum(t.is_feed for t in transfers) / max(steps, 1), 1)},
        cost_us_per_step=None,
        cost_basis="inventory only; avoidable copies are reported separately",
        fix="",
    )


def _kinds(transfers: list[TensorCopy], steps: int) -> str:
    counts = collections.Counter(t.direction for t in transfers)
    return ", ".join(f"{kind} {n / max(steps, 1):g}" for kind, n in counts.most_common())


def _avoidable_finding(transfers: list[TensorCopy], steps: int, from_misplacement: bool,
                       untimed: str) -> PlacementFinding:
    stats = _stats(transfers, steps)
    producers = collections.Counter(t.producer for t in transfers)
    cause = ("they carry tensors of ops placed off their tower's or requested device"
             if from_misplacement else "computed tensors go device -> host -> device within a step")
    return PlacementFinding(
        rule_id=RULE_ID,
        severity=Severity.WARNING,
        title=f"{stats['per_step']:g} avoidable copies per step: {cause}",
        devices=tuple(sorted({t.device for t in transfers})),
        ops=tuple(p for p, _ in producers.most_common()),
        evidence={"steps_traced": steps, **stats,
                  "directions": dict(collections.Counter(t.direction for t in transfers))},
        cost_us_per_step=stats["us_per_step"],
        cost_basis=("time in these copies/receives per step (receives include waiting for the sender)"
                    if stats["us_per_step"] is not None else untimed or "the trace gives these copies no time"),
        fix=("Fix the placement findings (PA001/PA002) so producer and consumer share a device; for host "
             "round trips, place the host-side op (often shape arithmetic) on the device or precompute it."),
    )
