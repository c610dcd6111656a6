"""PA001: ops that asked for one device and ran on another (soft placement moved them)."""

from __future__ import annotations

import collections

from . import scopes
from .finding import NotChecked, PlacementFinding, Severity
from .inputs import AuditInput, NodePlacement, requested_differs, steps_in, time_by_name, wall_time

RULE_ID = "PA001-soft-placement-fallback"
TITLE = "Soft-placement fallback"


def fallen_back_compute(inp: AuditInput) -> set[str]:
    """Names of compute ops that ran somewhere other than the device they requested."""
    if inp.graph is None:
        return set()
    return {n.name for n in inp.placements.values()
            if n.requested_device is not None and n.assigned is not None and n.op not in scopes.PLUMBING_OPS
            and requested_differs(n.requested, n.assigned)}


def check(inp: AuditInput) -> list[PlacementFinding] | NotChecked:
    if inp.graph is None:
        return NotChecked(RULE_ID, "needs a graph with requested devices (GraphDef, RunMetadata or run "
                                   "directory); a trace records only where ops ran")
    requested = [n for n in inp.placements.values() if n.requested_device is not None]
    if not requested:
        return NotChecked(RULE_ID, "no op in the graph requests a device")
    if all(n.assigned is None for n in requested):
        return NotChecked(RULE_ID, "the graph has no assigned devices and no trace says where ops ran "
                                   "(give partition graphs, RunMetadata or a trace with it)")
    steps = steps_in(inp.events)
    return [_finding(inp, wanted, got, nodes, steps) for (wanted, got), nodes in sorted(_moved(requested).items())]


def _moved(requested: list[NodePlacement]) -> dict[tuple[str, str], list[NodePlacement]]:
    """The ops that ran elsewhere than they asked, by (requested device, assigned device) label."""
    moved = collections.defaultdict(list)
    for node in requested:
        if node.assigned is not None and requested_differs(node.requested, node.assigned):
            moved[(node.requested_device.label, node.assigned.label)].append(node)
    return moved


def _groups(nodes: list[NodePlacement], times: dict[str, float], steps: int) -> list[dict]:
    """The moved ops by op type and scope, with their count and time per step, the longest first."""
    groups = collections.defaultdict(lambda: [0, 0.0])
    for n in nodes:
        key = (n.op, scopes.group_scope(n.name))
        groups[key][0] += 1
        groups[key][1] += times.get(n.name, 0.0)
    return [{"op": op, "scope": scope, "count": count, "us_per_step": round(us / steps, 1) if steps else None}
            for (op, scope), (count, us) in sorted(groups.items(), key=lambda kv: (-kv[1][1], -kv[1][0]))]


def _finding(inp: AuditInput, wanted: str, got: str, nodes: list[NodePlacement], steps: int) -> PlacementFinding:
    """The ops that asked for ``wanted`` and ran on ``got``: an error when compute ops are among them."""
    names = {n.name for n in nodes}
    compute = [n for n in nodes if n.op not in scopes.PLUMBING_OPS]
    return PlacementFinding(
        rule_id=RULE_ID,
        severity=Severity.ERROR if compute else Severity.INFO,
        title=f"{len(nodes)} ops asked for {wanted} but ran on {got}"
              + ("" if compute else " (only constants, variables and plumbing)"),
        devices=(wanted, got),
        ops=tuple(sorted(n.name for n in nodes)),
        evidence={"requested": wanted, "assigned": got, "ops": len(nodes), "compute_ops": len(compute),
                  "steps_traced": steps, "groups": _groups(nodes, time_by_name(inp.events, names), steps)},
        cost_us_per_step=wall_time(inp.events, names) / steps if steps else None,
        cost_basis=(f"wall time per traced step during which these ops ran on {got} (overlaps counted once; "
                    f"the groups' times add up each op)" if steps
                    else "no trace given: cost not estimated"),
        fix=(f"Make {wanted} exist for this run (check CUDA_VISIBLE_DEVICES and the device count), or "
             f"place ops that cannot run there explicitly (see PA007 for ops without a kernel). "
             f"Set allow_soft_placement=False to make TensorFlow refuse instead of silently moving them."),
    )
