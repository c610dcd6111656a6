"""PA002: a replica's work placed on another replica's device (usually device 0).

A node belongs to tower k when it is built under ``tower_k/`` or, with a graph, when
every tower-attributed input it consumes comes from tower k. Tower k's own device is
where most of its compute ran. The cost is the time tower k's device sat idle while
another device ran tower k's ops: it waits for them.

Ops that TF colocated with a shared variable (``colocate_with``, e.g. an embedding lookup and
its gradient next to the table in parameter-server mode) follow that variable by design; they
are reported apart, as information, not as a replica pinned to another device.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING

from rnnprof.events import Device

from . import scopes
from .finding import NotChecked, PlacementFinding, Severity
from .inputs import AuditInput, NodePlacement, is_tower_work, op_events_mask, steps_in, time_by_name
from .busy import busy_intervals, compute_mask, in_step, length, minus, step_keys, union_array

if TYPE_CHECKING:  # networkx is only needed when there is a graph
    import networkx as nx

RULE_ID = "PA002-replica-work-pinned"
TITLE = "Replica work pinned to another device"


def tower_attribution(inp: AuditInput) -> dict[str, tuple[int, str]]:
    """Node name -> (tower, "scope" | "consumes") for nodes doing a tower's work.

    With a graph, a node outside every tower scope is tower k's when the tower-attributed
    inputs it consumes (data edges; control dependencies carry no tensor) all come from
    tower k. Nodes are decided in the data flow's order, each after all of its inputs, so
    attribution follows a chain however deep; a cycle (a while loop's back edge) is decided
    as a whole, repeating the rule over its nodes until nothing changes.
    """
    nodes = inp.placements
    owner = {n.name: (t, "scope") for n in nodes.values()
             if is_tower_work(n) and (t := scopes.tower_of(n.name)) is not None}
    graph = inp.graph
    if graph is None:
        return owner
    import networkx as nx

    candidates = {n.name for n in nodes.values() if n.name not in owner and is_tower_work(n) and n.name in graph}
    flow = _data_flow(graph, owner.keys() | candidates)
    position = {name: k for k, name in enumerate(flow)}
    condensed = nx.condensation(flow)
    for component in nx.topological_sort(condensed):
        members = sorted(candidates.intersection(condensed.nodes[component]["members"]), key=position.get)
        _attribute_by_inputs(members, flow, owner)
    return owner


def _attribute_by_inputs(names: list[str], flow: nx.DiGraph, owner: dict[str, tuple[int, str]]) -> None:
    """Give each of ``names`` the one tower its attributed inputs come from, if there is one; repeated
    while that attributes more (the nodes of a cycle feed each other)."""
    pending = names
    while pending:
        for name in pending:
            towers = {owner[p][0] for p in flow.predecessors(name) if p in owner}
            if len(towers) == 1:
                owner[name] = (towers.pop(), "consumes")
        left = [n for n in pending if n not in owner]
        if len(left) == len(pending):
            return
        pending = left


def _data_flow(graph: nx.DiGraph, names: set[str]) -> nx.DiGraph:
    """The data edges among ``names``, in the graph's node order: the only path attribution travels."""
    import networkx as nx

    flow = nx.DiGraph()
    flow.add_nodes_from(n for n in graph if n in names)
    flow.add_edges_from((u, v) for u, v, control in graph.edges(data="control")
                        if not control and u in names and v in names)
    return flow


def shared_variable_of(inp: AuditInput, node: NodePlacement) -> str | None:
    """The shared variable (built outside every tower scope) that ``node`` is colocated with and
    that lives where the node ran, if any: TF placed the node with the variable on purpose."""
    if inp.graph is None or node.assigned is None:
        return None
    for name in inp.graph.nodes[node.name].get("colocation", ()) if node.name in inp.graph else ():
        variable = inp.placements.get(name)
        if (variable is not None and variable.op in scopes.VARIABLE_OPS and scopes.tower_of(name) is None
                and variable.assigned == node.assigned):
            return name
    return None


def misplaced(inp: AuditInput) -> dict[str, tuple[int, str | None]]:
    """Tower ops that ran off their tower's device: name -> (tower, shared variable they follow or None).
    Empty when towers cannot be told apart."""
    homes = inp.tower_homes
    if len(set(homes.values())) < 2:
        return {}
    out = {}
    for name, (tower, _) in tower_attribution(inp).items():
        node = inp.placements[name]
        if node.assigned is not None and node.assigned != homes[tower]:
            out[name] = (tower, shared_variable_of(inp, node))
    return out


def misplaced_names(inp: AuditInput) -> set[str]:
    """Names of tower ops pinned off their tower's device (those following a shared variable excluded)."""
    return {name for name, (_, variable) in misplaced(inp).items() if variable is None}


def check(inp: AuditInput) -> list[PlacementFinding] | NotChecked:
    if not inp.placements:
        return NotChecked(RULE_ID, "needs a graph or a trace that names the ops it ran")
    homes = inp.tower_homes
    if len(homes) < 2:
        return NotChecked(RULE_ID, f"found {len(homes)} tower scope(s) (tower_k/...) with placed ops; "
                                   "needs a data-parallel graph with at least 2 towers")
    if len(set(homes.values())) == 1:
        return [_all_on_one_device(inp, homes)]
    home_owner = {}
    for tower, device in sorted(homes.items(), reverse=True):
        home_owner[device] = tower  # lowest tower wins when towers share a device
    attribution = tower_attribution(inp)
    pinned: dict[tuple[int, Device], list[NodePlacement]] = collections.defaultdict(list)
    following: dict[tuple[int, Device], list[NodePlacement]] = collections.defaultdict(list)
    for name, (tower, variable) in misplaced(inp).items():
        node = inp.placements[name]
        (pinned if variable is None else following)[(tower, node.assigned)].append(node)
    findings = []
    for (tower, device), nodes in sorted(pinned.items()):
        other = home_owner.get(device)
        findings.append(_finding(inp, tower, homes[tower], device, other, nodes, attribution))
    for (tower, device), nodes in sorted(following.items()):
        findings.append(_follows_variables(inp, tower, homes[tower], device, nodes))
    return findings


def _moved_ops(inp, tower, home, device, nodes, **extra) -> dict:
    """What both kinds of finding report about tower ops that ran on ``device``: the ops (slowest
    first), the evidence and the wait they cost tower ``tower``'s device."""
    names = {n.name for n in nodes}
    cost = _wait_cost(inp, home, device, names)
    by_time = cost["us_by_name"]
    return dict(
        rule_id=RULE_ID,
        devices=(device.label, home.label),
        ops=tuple(sorted(names, key=lambda n: (-by_time.get(n, 0.0), n))),
        evidence={
            "tower": tower,
            "tower_device": home.label,
            "ran_on": device.label,
            "ops": len(nodes),
            **extra,
            "op_types": dict(collections.Counter(n.op for n in nodes).most_common()),
            "steps_traced": cost["steps"],
            "us_per_step_on_wrong_device": _round(cost["busy"]),
            "us_per_step_tower_device_idle_meanwhile": _round(cost["wait"]),
            **({"shared_cores": cost["shared_cores"],
                "us_per_step_cores_idle_meanwhile": _round(cost["cores_idle"])} if cost.get("shared_cores") else {}),
        },
        cost_us_per_step=cost["cores_idle"] if cost.get("shared_cores") else cost["wait"],
        cost_basis=(("" if not cost["steps"] else
                     f"time per step {home.label} sat idle while {device.label} ran these ops of tower {tower}"
                     + (f", counted only while fewer ops ran than the {cost['shared_cores']} cores the logical "
                        f"devices share (with every core busy the wait idles no hardware)"
                        if cost.get("shared_cores") else ""))
                    or "no trace given: cost not estimated"),
    )


def _finding(inp, tower, home, device, other, nodes, attribution) -> PlacementFinding:
    groups = collections.Counter((n.op, scopes.group_scope(n.name)) for n in nodes)
    consumed = sorted(n.name for n in nodes if attribution[n.name][1] == "consumes")
    where = f"tower {other}'s device {device.label}" if other is not None else f"{device.label}"
    return PlacementFinding(
        severity=Severity.ERROR if other is not None else Severity.WARNING,
        title=f"{len(nodes)} ops of tower {tower} ran on {where} instead of {home.label}",
        **_moved_ops(inp, tower, home, device, nodes, ops_attributed_by_consumption=len(consumed),
                     scopes=[{"op": op, "scope": scope, "count": count}
                             for (op, scope), count in groups.most_common(20)]),
        fix=(f"Build tower {tower}'s ops under its own device scope ({home.label}): these ops were created "
             f"under an explicit tf.device or colocate_with pointing at {device.label} inside tower {tower}. "
             f"Remove that pin (e.g. the projection/softmax device scope) and build the gradients with "
             f"colocate_gradients_with_ops=True so they follow."),
    )


def _follows_variables(inp, tower, home, device, nodes) -> PlacementFinding:
    variables = collections.Counter(shared_variable_of(inp, n) for n in nodes)
    return PlacementFinding(
        severity=Severity.INFO,
        title=(f"{len(nodes)} ops of tower {tower} ran on {device.label} next to the shared variable(s) "
               f"they read ({', '.join(sorted(variables))}), by TF's colocation, not a stray device scope"),
        **_moved_ops(inp, tower, home, device, nodes, colocated_with=dict(variables.most_common())),
        fix=(f"Expected with variables shared on one parameter device (lookups and their gradients run where "
             f"the table lives). If the cost matters, keep a per-tower copy of the variable (replicated mode) or "
             f"put the parameter device apart from tower {tower}'s."),
    )


def _all_on_one_device(inp: AuditInput, homes: dict[int, Device]) -> PlacementFinding:
    device = next(iter(homes.values()))
    steps = steps_in(inp.events)
    busy = None
    if steps:
        mask = compute_mask(inp.events)
        busy = length(busy_intervals(inp.events, device, mask)) / steps
    n = len(homes)
    return PlacementFinding(
        rule_id=RULE_ID,
        severity=Severity.ERROR,
        title=f"all {n} towers ran on {device.label}",
        devices=(device.label,),
        ops=(),
        evidence={"towers": n, "device": device.label, "steps_traced": steps,
                  "us_per_step_busy": _round(busy)},
        cost_us_per_step=busy * (1 - 1 / n) if busy is not None else None,
        cost_basis=(f"busy time of {device.label} that {n} devices would share" if steps
                    else "no trace given: cost not estimated"),
        fix="Give each tower its own device scope; check that the devices exist (see PA001) and that "
            "the device count of the session matches the number of towers.",
    )


def _wait_cost(inp: AuditInput, home: Device, device: Device, names: set[str]) -> dict:
    """The ops' busy time per step and the home device's wait for them; on logical CPU devices, which share the
    host's cores, only the part of the wait during which fewer ops ran than there are cores (``cores_idle``):
    while every core is busy the waiting device idles no hardware, and moving the ops back gains nothing."""
    events = inp.events
    steps = steps_in(events)
    if not steps:
        return {"steps": 0, "busy": None, "wait": None, "us_by_name": {}}
    mask = compute_mask(events)
    mine = op_events_mask(events, names, device)
    cores = inp.shared_cores
    busy = wait = cores_idle = 0.0
    for step in step_keys(events):
        step_sel = in_step(events, step)
        sel = mine & step_sel
        wrong = union_array(events.ts[sel], events.end[sel])
        busy += length(wrong)
        waiting = minus(wrong, busy_intervals(events.select(step_sel), home, mask[step_sel]))
        wait += length(waiting)
        if cores:
            cores_idle += length(minus(waiting, inp.saturated_steps[step]))
    return {"steps": steps, "busy": busy / steps, "wait": wait / steps, "shared_cores": cores,
            "cores_idle": cores_idle / steps if cores else None, "us_by_name": time_by_name(events, names, device)}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
