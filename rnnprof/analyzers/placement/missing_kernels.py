"""PA007: ops requested on a device type for which TensorFlow has no kernel.

Only the installed TensorFlow's kernel registry answers this, and only for device types it
was built with: a CPU-only build registers almost no GPU kernels, so it cannot say which ops
lack one and this rule declines rather than guess. The registry is an input
(``AuditInput.kernels``, a ``KernelList``) that whoever builds the input reads from TensorFlow.
"""

from __future__ import annotations

import collections

from rnnprof.events.names import user_op

from .finding import NotChecked, PlacementFinding, Severity
from .inputs import AuditInput

RULE_ID = "PA007-no-kernel-for-device"
TITLE = "No kernel for the requested device type"


def check(inp: AuditInput) -> list[PlacementFinding] | NotChecked:
    if inp.graph is None:
        return NotChecked(RULE_ID, "needs a graph with requested devices")
    wanted = collections.defaultdict(list)  # (device type, op) -> nodes
    for node in inp.placements.values():
        device = node.requested_device
        op = user_op(node.op)  # the loaders name oneDNN rewrites by the user's op already
        if device is not None and op and not op.startswith("_"):
            wanted[(device.kind.upper(), op)].append(node)
    if not wanted:
        return NotChecked(RULE_ID, "no op in the graph requests a device")
    kernels = inp.kernels
    if kernels is None:
        return NotChecked(RULE_ID, "needs the installed TensorFlow's kernel registry, which was not read "
                                   "(TensorFlow not installed?)")
    unknowable = sorted({t for t, _ in wanted if t not in kernels.device_types})
    checkable = {key: nodes for key, nodes in wanted.items() if key[0] not in unknowable}
    if not checkable:
        return NotChecked(RULE_ID, f"TensorFlow {kernels.version} here is built without "
                                   f"{'/'.join(unknowable)} support, so its kernel registry cannot say which "
                                   f"ops lack a {'/'.join(unknowable)} kernel")
    soft = inp.session_config.get("allow_soft_placement")
    findings = []
    for (device_type, op), nodes in sorted(checkable.items()):
        types = kernels.by_op.get(op)  # none: a function call or an op of a library not loaded there
        if not types or device_type in types or "DEFAULT" in types:  # DEFAULT kernels run anywhere
            continue
        findings.append(PlacementFinding(
            rule_id=RULE_ID,
            severity=Severity.ERROR if soft is False else Severity.WARNING,
            title=f"{op} has no {device_type} kernel; {len(nodes)} op(s) request {device_type}",
            devices=tuple(sorted({n.requested_device.label for n in nodes})),
            ops=tuple(sorted(n.name for n in nodes)),
            evidence={"op_type": op, "requested_type": device_type, "ops": len(nodes),
                      "kernels_for": sorted(types), "tensorflow": kernels.version,
                      "allow_soft_placement": soft},
            cost_us_per_step=None,
            cost_basis="see PA001 for where these ops ran and what they cost",
            fix=(f"Place {op} explicitly on a device type that has a kernel ({', '.join(sorted(types))}), "
                 f"or replace it with an op that has a {device_type} kernel"
                 + ("; without soft placement this graph fails to run." if soft is False else
                    "; soft placement moves it and the copies around it."))))
    if unknowable:
        findings.append(PlacementFinding(
            rule_id=RULE_ID, severity=Severity.INFO,
            title=f"{'/'.join(unknowable)} kernels not checked: TensorFlow {kernels.version} is built without them",
            evidence={"unchecked_device_types": unknowable}))
    return findings
