"""Reading a TF node name: which tower built it, and which role it plays in a training step.

The scopes are those of ``rnnprof.events.names``: tower k under ``tower_k/`` (possibly nested, e.g.
``model/tower_1/...``; gradients become ``gradients/.../tower_1/...``), gradient
aggregation under ``allreduce``/``gradient_aggregation`` and updates under ``update``.
"""

from __future__ import annotations

from rnnprof.events.names import AGGREGATION_SCOPES, GRADIENT_SCOPES, TOWER_PATTERN, TRANSFER_OPS, UPDATE_SCOPES

# Ops whose placement follows a variable or the executor's plumbing; their device says
# nothing about where a tower's work ran.
PLUMBING_OPS = frozenset({
    "Const", "HostConst", "NoOp", "_Arg", "_Retval", "_DeviceArg", "_DeviceRetval",
    *TRANSFER_OPS, "Placeholder", "PlaceholderWithDefault",
    "VarHandleOp", "VariableV2", "Variable", "VarIsInitializedOp", "ReadVariableOp",
    "Identity", "IdentityN", "ControlTrigger", "_SOURCE", "_SINK",
})

VARIABLE_OPS = frozenset({"VarHandleOp", "VariableV2", "Variable", "_VarHandlesOp"})

_APPLY_PREFIXES = ("Apply", "ResourceApply", "SparseApply", "ResourceSparseApply")
_ASSIGN_OPS = frozenset({"AssignSub", "AssignAdd", "AssignSubVariableOp", "AssignAddVariableOp",
                         "Assign", "AssignVariableOp"})
_AGGREGATION_OPS = frozenset({"AddN", "NcclAllReduce", "CollectiveReduce", "CollectiveReduceV2",
                              "CollectiveReduceV3", "CollectiveGather", "CollectiveGatherV2"})


def tower_of(name: str) -> int | None:
    """The tower index a node name belongs to, from its innermost ``tower_k`` scope."""
    matches = TOWER_PATTERN.findall(name)
    return int(matches[-1]) if matches else None


def scope_components(name: str) -> list[str]:
    return name.split("/")[:-1]


def in_scope(name: str, scopes: tuple[str, ...]) -> bool:
    return any(part in scopes for part in scope_components(name))


def is_aggregation_scope(name: str) -> bool:
    return in_scope(name, AGGREGATION_SCOPES)


def is_update_scope(name: str) -> bool:
    return in_scope(name, UPDATE_SCOPES)


def is_gradient(name: str) -> bool:
    return in_scope(name, GRADIENT_SCOPES) or "_grad/" in name


def is_apply_op(op: str) -> bool:
    return op.startswith(_APPLY_PREFIXES)


def is_update_op(name: str, op: str) -> bool:
    """An op that writes a variable at the end of a step: Apply* anywhere, Assign* under an update scope."""
    return is_apply_op(op) or (op in _ASSIGN_OPS and is_update_scope(name))


def is_aggregation_op(name: str, op: str) -> bool:
    """An op that combines gradients of several replicas."""
    if op in PLUMBING_OPS:
        return False
    if is_aggregation_scope(name):
        return True
    return op in _AGGREGATION_OPS and is_gradient(name) and tower_of(name) is None


def group_scope(name: str, depth: int = 3) -> str:
    """The first ``depth`` name scopes of a node, for grouping many ops into a few lines."""
    parts = scope_components(name)
    return "/".join(parts[:depth]) or "(root)"
