"""Names that tie the runner to the analyses: graph scopes, and what counts as communication.

The runner builds its graph under these scopes; the run-directory writers, the loaders and the
analyzers read them back. Every one of those modules takes the names from here, so renaming a
scope in the runner cannot silently break an analysis.

Scopes the runner builds (``rnnprof.profiler.run.runner``):

* ``tower_k/...``: tower k's forward ops, and its gradients under ``tower_k/gradients/...``;
* ``shared/...``: the one copy of the variables in ``parameter_server`` mode;
* ``allreduce/...`` (``replicated``) or ``gradient_aggregation/...`` (``parameter_server``): the
  gradient exchange;
* ``update/...``: the optimizer's variable updates; ``init_sync/...``: replicas copying tower 0's
  initial values; ``metrics/...``: loss and word counts gathered on the host.

Readers also accept the names other trainers use (``replica_k``, ``all_reduce``, tf_cnn_benchmarks'
``hierarchical_copy`` and ``ring_reduce``), so traces from elsewhere are understood too.
"""

from __future__ import annotations

import re

# -- scopes the runner builds ----------------------------------------------------------------------

TOWER_SCOPE = "tower"
SHARED_SCOPE = "shared"
GRADIENTS_SCOPE = "gradients"
ALLREDUCE_SCOPE = "allreduce"
AGGREGATION_SCOPE = "gradient_aggregation"
UPDATE_SCOPE = "update"
INIT_SYNC_SCOPE = "init_sync"
METRICS_SCOPE = "metrics"


def tower_scope(k: int) -> str:
    """The name scope of tower ``k``: ``tower_k``."""
    return f"{TOWER_SCOPE}_{k}"


# -- scopes as readers match them ------------------------------------------------------------------

# ``tower_k`` or ``replica_k``, as a name component (``TOWER_PATTERN``: the innermost one gives a
# node's tower) or anywhere in a name (``REPLICA_PART``).
_REPLICA = rf"(?:{TOWER_SCOPE}|replica)_?"
TOWER_PATTERN = re.compile(rf"(?:^|/){_REPLICA}(\d+)(?=/|$)")
REPLICA_PART = re.compile(rf"{_REPLICA}\d+")
AGGREGATION_SCOPES = (ALLREDUCE_SCOPE, "all_reduce", AGGREGATION_SCOPE)
# Gradient exchange scopes of other trainers (tf_cnn_benchmarks) besides the runner's own.
EXCHANGE_SCOPES = (*AGGREGATION_SCOPES, "hierarchical_copy", "ring_reduce")
UPDATE_SCOPES = (UPDATE_SCOPE,)
GRADIENT_SCOPES = (GRADIENTS_SCOPE,)

# -- communication --------------------------------------------------------------------------------

SEND_OPS = ("_Send", "_HostSend")
RECV_OPS = ("_Recv", "_HostRecv")
TRANSFER_OPS = frozenset(SEND_OPS + RECV_OPS)
# A task of a gRPC cluster fetching a tensor (RecvTensor) or a collective's chunk (RecvBuf) from another
# task: the receiving task's step stats time each fetch. Only transfers between tasks have them.
CROSS_TASK_RECV_OPS = ("RecvTensor", "RecvBuf")
COLLECTIVE_PREFIX = "Collective"  # CollectiveReduce(V2), CollectiveGather(V2), CollectiveBcastSend/Recv, ...

# Op types that are communication by themselves: loaders give them ``Kind.COMMUNICATION``.
COMMUNICATION_OP = re.compile(
    rf"^(_?(Host)?(Send|Recv)|RecvTensor|RecvBuf|_?{COLLECTIVE_PREFIX}\w*|Nccl\w*|\w*AllReduce\w*|\w*AllGather\w*|\w*AllToAll\w*)$")

# Collectives of a PyTorch rank without a GPU (gloo): the ``c10d::*`` operators the program calls
# (``c10d::allreduce_``, ``c10d::broadcast_``, ...), the ``gloo:*`` ranges gloo's worker threads record
# (``gloo:all_reduce``) and ``record_param_comms``. The Kineto loader makes them the rank's
# communication when the rank has no GPU streams; on a GPU rank they are host-side launches.
CPU_COLLECTIVE = re.compile(r"^(?:c10d::\w+|gloo:\w+|record_param_comms)$")
# Of those, what a CPU rank's collective is when matched across ranks (``rnnprof comm``): the range gloo's
# worker thread records while it runs the collective, else the ``c10d::*`` call that issued it.
CPU_COLLECTIVE_RUN = re.compile(r"^gloo:\w+$")
CPU_COLLECTIVE_CALL = re.compile(r"^c10d::\w+$")
# Event names or op types that the analyses count as communication (``rnnprof comm``), searched anywhere:
COMM_PATTERNS: tuple[str, ...] = (
    r"^nccl(Dev)?Kernel",  # NCCL kernels
    rf"^{COLLECTIVE_PREFIX}(Reduce|Gather|Bcast|Permute|AllToAll)",  # TF collective ops
    r"^NcclAllReduce|^Nccl(Reduce|Broadcast|AllGather)",
    r"(?i)all[-_ ]?reduce|all[-_ ]?gather|reduce[-_ ]?scatter|all[-_ ]?to[-_ ]?all",
    r"^_?(Host)?(Send|Recv)$",  # point-to-point transfers
    r"^(RecvTensor|RecvBuf)$",  # transfers between tasks of a gRPC cluster
    CPU_COLLECTIVE.pattern,  # c10d/gloo collectives of a CPU rank
    # ops inside a gradient exchange scope: their op types are plain copies and adds
    rf"(^|/)({'|'.join(EXCHANGE_SCOPES)})(_\d+)?/",
)
# GPU kernels of NCCL (``ncclKernel_*``, ``ncclDevKernel_*``, ``void nccl...``): communication.
NCCL_KERNEL = re.compile(r"^(?:void )?nccl", re.IGNORECASE)
MEMCPY_PATTERN = r"^(Memcpy|MEMCPY|dma)"
MEMSET_PATTERN = r"^(Memset|MEMSET)"
