"""Which placement rules apply to a PyTorch run, and why the others cannot.

The rules were written for TensorFlow graphs: a graph with requested devices, soft placement,
towers built under ``tower_k/`` in one process, a session's inter-op pool, a kernel registry. A
PyTorch run (a ``trace --framework torch`` run directory, or Kineto traces) has none of these: each
rank is a process driving one device, with every op placed where its tensors are. What still applies
is what is measured across ranks: PA004, how evenly the ranks are busy per step.
"""

from __future__ import annotations

from . import (inter_op_threads, missing_kernels, ps_balance, replica_pinning, soft_placement, transfers,
               update_placement)
from .inputs import AuditInput

PYTORCH = "pytorch"
TENSORFLOW = "tensorflow"

NOT_FOR_PYTORCH = {
    soft_placement.RULE_ID: "PyTorch has no soft placement: an op runs where its input tensors are, never "
                            "on a device other than the one the code chose, so there is no requested device "
                            "to compare with",
    replica_pinning.RULE_ID: "a DDP rank is a process of its own driving one device; no rank can place "
                             "another rank's work on its device, and there are no tower scopes",
    update_placement.RULE_ID: "every DDP rank applies the update to its own replica (optimizer.step on each "
                              "rank); the gradient all-reduce is measured by rnnprof comm",
    transfers.RULE_ID: "Kineto's copies name no tensor and there is no partition graph, so a transfer "
                       "cannot be tied to a misplaced op; copies and collectives are in rnnprof comm",
    inter_op_threads.RULE_ID: "there is no TensorFlow inter-op pool shared by towers: each rank is a process "
                              "with its own threads (torch.set_num_threads)",
    missing_kernels.RULE_ID: "it reads TensorFlow's kernel registry for a graph's requested devices; "
                             "a PyTorch run has neither",
    ps_balance.RULE_ID: "there are no parameter-server tasks: DistributedDataParallel keeps a full replica on "
                        "every rank and all-reduces the gradients",
}


def framework(inp: AuditInput) -> str:
    """``PYTORCH`` for a ``--framework torch`` run directory or Kineto traces, else ``TENSORFLOW``."""
    if inp.manifest is not None and inp.manifest.is_torch:
        return PYTORCH
    read = inp.events is not None or inp.job is not None
    if inp.graph is None and read and "kineto" in inp.source_format.split("+"):
        return PYTORCH
    return TENSORFLOW


def not_applicable(inp: AuditInput) -> dict[str, str]:
    """Rule id -> why it does not apply to this input's framework (empty for TensorFlow)."""
    return dict(NOT_FOR_PYTORCH) if framework(inp) == PYTORCH else {}
