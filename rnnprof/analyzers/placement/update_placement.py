"""PA003: variable updates or gradient aggregation of every replica on one device.

In replicated and independent modes each replica updates its own copy of the
variables, so the updates should spread over the replicas' devices; in
parameter-server mode one parameter device applying them is the design (reported as
information, with its time), unless the run has several ps tasks, which are meant to share
the updates: all of them on one ps task is then a warning. The mode
comes from the manifest, else from the graph: per-replica copies of a variable show
up as several update ops whose names differ only in their tower scope.
"""

from __future__ import annotations

import collections
import re

from rnnprof.events.names import REPLICA_PART

from . import scopes
from .finding import NotChecked, PlacementFinding, Severity
from .inputs import AuditInput, steps_in, time_by_name

RULE_ID = "PA003-update-on-one-device"
PS_JOB = "/job:ps/"
TITLE = "Updates or aggregation on a single device"
SPREAD_MODES = ("replicated", "independent")
# All-reduce algorithms that aggregate on one device by design.
CENTRAL_ALL_REDUCES = ("pscpu",)
# Hierarchical sums within pairs of devices: with one pair it aggregates on the pair's leader.
PAIR_ALL_REDUCES = ("hierarchical",)
_TOWER_PART = re.compile(rf"{REPLICA_PART.pattern}|v\d+")


def infer_mode(inp: AuditInput, update_names: list[str]) -> tuple[str | None, str]:
    """(variable update mode, how it was found)."""
    mode = inp.config.get("variable_update")
    if mode:
        return mode, "manifest"
    keys = collections.Counter(_TOWER_PART.sub("", name) for name in update_names)
    if any(count > 1 for count in keys.values()):
        return "replicated", "graph: each variable is updated once per replica"
    if keys:
        return "parameter_server", "graph: each variable is updated once"
    return None, ""


def check(inp: AuditInput) -> list[PlacementFinding] | NotChecked:
    if not inp.placements:
        return NotChecked(RULE_ID, "needs a graph or a trace that names the ops it ran")
    updates = [n for n in inp.placements.values() if scopes.is_update_op(n.name, n.op) and n.assigned]
    aggregations = [n for n in inp.placements.values() if scopes.is_aggregation_op(n.name, n.op) and n.assigned]
    if not updates and not aggregations:
        return NotChecked(RULE_ID, "no variable update (Apply*/Assign* under update) or gradient aggregation "
                                   "ops found; this input holds no training step")
    homes = inp.tower_homes
    tower_devices = sorted(set(homes.values()))
    if not homes:
        return NotChecked(RULE_ID, f"found {len(updates)} update and {len(aggregations)} aggregation op(s) but no "
                                   "tower scopes (tower_k/...) to tell the replicas' devices apart")
    if len(tower_devices) < 2:
        return NotChecked(RULE_ID, f"the towers use {len(tower_devices)} device(s); spreading needs at least 2")
    mode, mode_source = infer_mode(inp, [n.name for n in updates])
    update_devices = collections.Counter(n.assigned for n in updates)
    if mode not in SPREAD_MODES:
        if len(update_devices) == 1 and len(updates) > 1:
            ps_tasks = inp.config.get("ps_tasks")
            device = next(iter(update_devices))
            if isinstance(ps_tasks, int) and ps_tasks > 1 and device.worker.startswith(PS_JOB):
                # several ps tasks are meant to share the updates: one applying them all is a bottleneck
                return [_finding(inp, "variable update", updates, tower_devices, mode, mode_source,
                                 Severity.WARNING, ps_tasks=ps_tasks)]
            return [_finding(inp, "variable update", updates, tower_devices, mode, mode_source, Severity.INFO)]
        return []
    findings = []
    if len(update_devices) == 1 and len(updates) > 1:
        findings.append(_finding(inp, "variable update", updates, tower_devices, mode, mode_source,
                                 Severity.ERROR))
    aggregation_devices = collections.Counter(n.assigned for n in aggregations)
    if (mode == "replicated" and not aggregates_centrally(inp.config.get("all_reduce"), len(tower_devices))
            and len(aggregation_devices) == 1 and len(aggregations) > 1):
        findings.append(_finding(inp, "gradient aggregation", aggregations, tower_devices, mode, mode_source,
                                 Severity.WARNING))
    return findings


def aggregates_centrally(all_reduce: str | None, devices: int) -> bool:
    """Whether this all-reduce algorithm sums on one device by design for this many devices."""
    return all_reduce in CENTRAL_ALL_REDUCES or (all_reduce in PAIR_ALL_REDUCES and devices <= 2)


def _finding(inp, what, nodes, tower_devices, mode, mode_source, severity, ps_tasks: int = 0) -> PlacementFinding:
    device = nodes[0].assigned
    steps = steps_in(inp.events)
    times = time_by_name(inp.events, {n.name for n in nodes}, device)
    per_step = sum(times.values()) / steps if steps else None
    n = len(tower_devices)
    return PlacementFinding(
        rule_id=RULE_ID,
        severity=severity,
        title=(f"all {len(nodes)} {what} ops run on {device.label} in {mode} mode ({n} tower devices"
               + (f", {ps_tasks} ps tasks" if ps_tasks else "") + ")"
               + (", as this mode intends" if severity == Severity.INFO else "")),
        devices=(device.label,),
        ops=tuple(sorted(n_.name for n_ in nodes)),
        evidence={
            "mode": mode,
            "mode_from": mode_source,
            "ops": len(nodes),
            "op_types": dict(collections.Counter(n_.op for n_ in nodes).most_common()),
            "device": device.label,
            "tower_devices": [d.label for d in tower_devices],
            "steps_traced": steps,
            "us_per_step": None if per_step is None else round(per_step, 1),
        },
        cost_us_per_step=None if per_step is None else per_step * (1 - 1 / n),
        cost_basis=(f"the share of {device.label}'s {what} time the other {n - 1} device(s) would take over"
                    if steps else "no trace given: cost not estimated"),
        fix=(_fix(what, mode, device, n, severity) if not ps_tasks else
             f"Spread the variables over the {ps_tasks} ps tasks (by size, greedily, as tf_cnn_benchmarks does); "
             f"each task then applies the updates of its own variables, in parallel (see PA008)."),
    )


def _fix(what: str, mode: str, device, n: int, severity: Severity) -> str:
    if severity == Severity.INFO:
        return (f"Expected in {mode} mode: the shared variables live on {device.label}, which applies every "
                f"replica's update. If {device.label} is also a tower's device it works for two; replicated "
                f"mode spreads the updates over all {n} devices.")
    return (f"In {mode} mode build each replica's {what} ops under that replica's device scope "
            f"(or colocate each update with its variable copy) so all {n} devices apply their own in parallel.")
