"""PA008: parameter server tasks carrying unequal loads.

With several ``/job:ps`` tasks, each should hold a fair share of the variable bytes (spreading them by
size, as tf_cnn_benchmarks' greedy strategy does) and so serve a fair share of the traffic. Per ps task:

* variable bytes: the sizes (shape x dtype) of the variables assigned to the task in the runtime graphs;
* traffic: bytes the task fetched from other tasks in the trace (``RecvTensor``: the gradients pushed to
  it), judged only where every such transfer has its size (counts of transfers are no fair measure) and the
  trace holds every ps task's transfers: a task that holds variables (in the graphs) with no transfer to it
  in the trace had its capture cut short, and the shares of the others would follow what happened to be
  recorded.

A task holding ``IMBALANCE`` times its fair share (1 / tasks) or more of either is flagged; a variable
larger than the fair share cannot be split, so the finding names the largest one.
"""

from __future__ import annotations

import numpy as np

from rnnprof.events import parse_tf_device
from rnnprof.events.names import CROSS_TASK_RECV_OPS

from .finding import NotChecked, PlacementFinding, Severity
from .inputs import AuditInput

RULE_ID = "PA008-ps-task-imbalance"
TITLE = "Parameter server tasks with unequal loads"
PS_JOB = "/job:ps/"
IMBALANCE = 1.5  # times the fair share


def _variables_by_task(inp: AuditInput) -> dict[str, list[tuple[str, int]]]:
    found: dict[str, list[tuple[str, int]]] = {}
    if inp.graph is None:
        return found
    for _, data in inp.graph.nodes(data=True):
        size = data.get("variable_bytes")
        device = parse_tf_device(data.get("assigned_device") or data.get("requested_device") or "")
        if size is None or device is None or not device.worker.startswith(PS_JOB):
            continue
        entry = (data.get("name", ""), int(size))
        if entry not in found.setdefault(device.worker, []):
            found[device.worker].append(entry)
    return found


def _traffic_by_task(inp: AuditInput, holders: set[str] = frozenset()) -> tuple[dict[str, float], str]:
    """Bytes received per ps task; ``({}, "")`` where the trace cannot say (see the module's docstring):
    ``holders``, the tasks holding variables in the graphs."""
    events = inp.events
    if events is None or not len(events):
        return {}, ""
    is_recv = np.array([s in CROSS_TASK_RECV_OPS for s in events.strings] or [False], dtype=bool)
    rows = is_recv[events.op_type] | is_recv[events.name]
    on_ps = np.array([d.worker.startswith(PS_JOB) for d in events.devices] or [False], dtype=bool)[events.device]
    rows &= on_ps
    if not rows.any() or (events.nbytes[rows] < 0).any():
        # Bytes are the only fair measure (greedy placement balances bytes, not transfers); where some of the
        # ps tasks' transfers have no size, their shares would follow what happened to be recorded.
        return {}, ""
    totals: dict[str, float] = {}
    for code, device in enumerate(events.devices):
        if device.worker.startswith(PS_JOB):
            amount = float(events.nbytes[rows & (events.device == code)].sum())
            totals[device.worker] = totals.get(device.worker, 0.0) + amount
    received = {t for t, amount in totals.items() if amount > 0}
    if not holders <= received:
        return {}, ""
    return totals, "bytes"


def _ps_tasks(inp: AuditInput, seen: set[str]) -> int:
    configured = inp.config.get("ps_tasks")
    count = configured if isinstance(configured, int) and not isinstance(configured, bool) else 0
    return max(count, len(seen))


def check(inp: AuditInput, imbalance: float = IMBALANCE) -> list[PlacementFinding] | NotChecked:
    variables = _variables_by_task(inp)
    traffic, unit = _traffic_by_task(inp, {t for t, held in variables.items() if held})
    tasks = _ps_tasks(inp, set(variables) | set(traffic))
    if tasks < 2:
        return NotChecked(RULE_ID, f"needs a cluster with 2 or more ps tasks (found {tasks})")
    if not variables and not traffic:
        return NotChecked(RULE_ID, "no variable on a ps task in the graphs and no transfer to one in the trace")
    names = sorted({f"/job:ps/replica:0/task:{k}" for k in range(tasks)} | set(variables) | set(traffic))
    fair = 1.0 / len(names)
    findings = []
    held = {t: sum(size for _, size in variables.get(t, [])) for t in names}
    total = sum(held.values())
    if total > 0:
        heaviest = max(names, key=lambda t: held[t])
        share = held[heaviest] / total
        if share >= min(1.0, imbalance * fair):
            largest = max(variables[heaviest], key=lambda v: v[1])
            findings.append(PlacementFinding(
                rule_id=RULE_ID, severity=Severity.WARNING,
                title=(f"{heaviest} holds {share:.0%} of the variable bytes ({len(variables[heaviest])} of "
                       f"{sum(len(v) for v in variables.values())} variables) across {len(names)} ps tasks"),
                devices=(heaviest,),
                ops=tuple(sorted(name for name, _ in variables[heaviest]))[:20],
                evidence={"measure": "variable bytes", "share": round(share, 3), "fair_share": round(fair, 3),
                          "bytes_by_task": held, "largest_variable": largest[0], "largest_bytes": largest[1]},
                cost_basis="not estimated: the time lost depends on each task's bandwidth",
                fix=(f"Spread the variables over the ps tasks by size (greedy, as tf_cnn_benchmarks does: "
                     f"`tf.compat.v1.train.replica_device_setter(ps_strategy=GreedyLoadBalancingStrategy(...))`); "
                     f"the largest, {largest[0]} ({largest[1]:,} bytes), cannot be split: partition it "
                     f"if it alone exceeds a fair share."),
            ))
    moved = sum(traffic.values())
    if moved > 0:
        busiest = max(names, key=lambda t: traffic.get(t, 0.0))
        share = traffic.get(busiest, 0.0) / moved
        if share >= min(1.0, imbalance * fair):
            findings.append(PlacementFinding(
                rule_id=RULE_ID, severity=Severity.WARNING,
                title=f"{busiest} receives {share:.0%} of the ps tasks' traffic ({unit}) across {len(names)} ps tasks",
                devices=(busiest,),
                evidence={"measure": f"traffic received ({unit})", "share": round(share, 3),
                          "fair_share": round(fair, 3), "by_task": {t: traffic.get(t, 0.0) for t in names}},
                cost_basis="not estimated: the time lost depends on each task's bandwidth",
                fix="Spread the variables (and so the gradients pushed to them) over the ps tasks by size.",
            ))
    return findings
