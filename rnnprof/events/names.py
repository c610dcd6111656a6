"""Names that tie the runner to the analyses: graph scopes, and what counts as communication.

The runner (``rnnprof.training.runner``) builds its graph under these scopes and the writers, loaders and
analyzers read them back from here, so renaming a scope cannot silently break an analysis: ``tower_k/...``
(a tower's forward ops and gradients), ``shared/...`` (``parameter_server`` variables), ``allreduce/...`` or
``gradient_aggregation/...`` (the gradient exchange), ``update/...``, ``init_sync/...`` and ``metrics/...``.
Readers also accept other trainers' names (``replica_k``, ``all_reduce``, tf_cnn_benchmarks'
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


# -- manifest fields the runner writes and the analyses read ---------------------------------------

STEP_TIMES = "step_times"  # {"warmup": [seconds, ...], "timed": [...]}: each step's wall time
STEP_CPU = "step_cpu"  # {"warmup": [{"process_s", "host_busy_s"}, ...], "timed": [...]}: each step's CPU times
# A PyTorch rank's record (``TorchCapture.facts``): each step's wall seconds from the capture's start to its close,
# step 0 first, numbered as the trace's ``ProfilerStep#N``; the steps the profiler warmed up in (recording, the
# events discarded); the steps during which the window's trace was exported and compressed.
RANK_STEP_SECONDS = "step_seconds"
RANK_STEP_CPU_SECONDS = "step_cpu_seconds"  # each step's CPU seconds of the rank's process (all its threads)
RANK_STEP_THREAD_CPU_SECONDS = "step_thread_cpu_seconds"  # each step's CPU seconds of the thread that ends the steps
# each step's seconds that thread was ready to run but waited for a core (Linux schedstat; absent elsewhere)
RANK_STEP_RUNQUEUE_SECONDS = "step_runqueue_seconds"
# each step's seconds gloo's threads that run collectives (``pt_gloo_runloop``) waited for a core, summed (Linux)
RANK_STEP_COMM_RUNQUEUE_SECONDS = "step_comm_runqueue_seconds"
RANK_PROFILER_WARMUP_STEPS = "profiler_warmup_steps"
RANK_EXPORT_STEPS = "export_steps"


# The host step markers PyTorch's profiler records: ``ProfilerStep#N``.
STEP_MARKER = re.compile(r"^ProfilerStep#(\d{1,9})$")


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

_SEP = r"[-_ ]?"  # between the words of a collective's name: all_reduce, all-reduce, allreduce, AllReduce

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
# GPU kernels that communicate: NCCL's and RCCL's (``ncclKernel_*``, ``ncclDevKernel_*`` including RCCL's
# ``ncclDevKernel_Generic``, ``void nccl...``, ``rccl...``) and the symmetric-memory collectives of PyTorch and vLLM
# (``void (anonymous namespace)::multimem_all_reduce_kernel<...>``, ``one_shot_all_reduce_kernel``,
# ``vllm::cross_device_reduce_1stage``). Tested with ``match``: loaders mark them ``Kind.COMMUNICATION``.
SYMMETRIC_MEMORY_KERNEL = (r"(?:multimem|one_shot|two_shot)_\w*(?:all_reduce|all_gather|reduce_scatter)\w*_kernel\b"
                           r"|cross_device_reduce_[12]stage")
NCCL_KERNEL = re.compile(rf"^(?:void )?(?:nccl|rccl)|^(?:void )?(?:[\w<>]+::|\(anonymous namespace\)::)*"
                         rf"(?:{SYMMETRIC_MEMORY_KERNEL})", re.IGNORECASE)
# Event names or op types that the analyses count as communication (``rnnprof comm``), searched anywhere:
COMM_PATTERNS: tuple[str, ...] = (
    r"(?i)^(?:void )?(?:nccl|rccl)",  # NCCL/RCCL kernels
    SYMMETRIC_MEMORY_KERNEL,  # symmetric-memory collectives
    rf"^{COLLECTIVE_PREFIX}(Reduce|Gather|Bcast|Permute|AllToAll)",  # TF collective ops
    r"^NcclAllReduce|^Nccl(Reduce|Broadcast|AllGather)",
    # collectives by name: "all" starting a word (all_reduce, AllGather, c10d::allreduce_, not small_gather)
    rf"(?:(?<![A-Za-z])(?i:all)|All){_SEP}(?i:reduce|gather|to{_SEP}all)|(?i:reduce){_SEP}(?i:scatter)",
    r"^_?(Host)?(Send|Recv)$",  # point-to-point transfers
    r"^(RecvTensor|RecvBuf)$",  # transfers between tasks of a gRPC cluster
    CPU_COLLECTIVE.pattern,  # c10d/gloo collectives of a CPU rank
    # ops inside a gradient exchange scope: their op types are plain copies and adds
    rf"(^|/)({'|'.join(EXCHANGE_SCOPES)})(_\d+)?/",
)

# -- collective types -----------------------------------------------------------------------------
#
# What a communication event does, in one vocabulary for every library: told from (first that answers) the
# collective a Kineto kernel's args name (``Collective name``: ``allreduce``, ``_allgather_base``), the
# ``nccl:*`` range the GPU records around it (RCCL's ``ncclDevKernel_Generic`` names nothing itself), its op
# type (``CollectiveReduceV2``, ``_Send``) and its name (``ncclKernel_AllReduce_RING_LL_Sum_float``,
# ``gloo:all_reduce``, ``c10d::broadcast_``, ``allreduce/...`` scopes). ``UNKNOWN``: communication none of
# those names (``record_param_comms``, an RCCL kernel launched before the profiler started).

ALL_REDUCE = "all-reduce"
ALL_GATHER = "all-gather"
REDUCE_SCATTER = "reduce-scatter"
ALL_TO_ALL = "all-to-all"
BROADCAST = "broadcast"
REDUCE = "reduce"
GATHER = "gather"
SCATTER = "scatter"
SEND_RECV = "send/recv"
BARRIER = "barrier"
UNKNOWN_COLLECTIVE = "unknown"
COLLECTIVE_TYPES = (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, BROADCAST, REDUCE, GATHER, SCATTER,
                    SEND_RECV, BARRIER, UNKNOWN_COLLECTIVE)
# The ranges a collective library records around a collective (PyTorch's ``nccl:all_reduce`` on the GPU stream
# and the launching thread, gloo's ``gloo:all_reduce``): their names say the collective.
COLLECTIVE_RANGE = re.compile(r"^(?:nccl|rccl|gloo|ucc|mpi):\w+$")
# In order: the first rule whose pattern a name contains (case ignored) gives its type.
_COLLECTIVE_RULES: tuple[tuple[str, str], ...] = (
    (REDUCE_SCATTER, rf"reduce{_SEP}scatter"),
    (ALL_REDUCE, rf"all{_SEP}reduce|{COLLECTIVE_PREFIX}Reduce|ring{_SEP}reduce|hierarchical{_SEP}copy"),
    (ALL_GATHER, rf"all{_SEP}gather|{COLLECTIVE_PREFIX}Gather"),
    (ALL_TO_ALL, rf"all{_SEP}to{_SEP}all"),
    (BROADCAST, r"broadcast|bcast"),
    (BARRIER, r"barrier"),
    (SEND_RECV, rf"send|recv|{COLLECTIVE_PREFIX}Permute"),
    (REDUCE, rf"reduce|{AGGREGATION_SCOPE}"),
    (GATHER, r"gather"),
    (SCATTER, r"scatter"),
)
_COLLECTIVE_RULE_PATTERNS = tuple((kind, re.compile(p, re.IGNORECASE)) for kind, p in _COLLECTIVE_RULES)


def collective_type(*texts: str) -> str:
    """The collective type (``COLLECTIVE_TYPES``) the first of ``texts`` that names one names; ``UNKNOWN_COLLECTIVE``
    when none does. Only meaningful for events already known to be communication: ``reduce_kernel`` is compute."""
    for text in texts:
        for kind, pattern in _COLLECTIVE_RULE_PATTERNS:
            if text and pattern.search(text):
                return kind
    return UNKNOWN_COLLECTIVE


# The collective a c10d call or a library's run is, when it carries out another: gloo runs a reduce-scatter as an
# all-reduce on its worker thread (``gloo:all_reduce`` for ``c10d::_reduce_scatter_base_``). By the call's type,
# the types of the runs that may carry it out (a type always carries out itself).
CARRIED_OUT_AS = {REDUCE_SCATTER: (ALL_REDUCE,), BARRIER: (ALL_REDUCE,)}


def p2p_direction(name: str) -> str:
    """``send`` or ``recv`` for a point-to-point operation's name (``c10d::recv_``, ``gloo:send``), else ""."""
    name = name.lower()
    return "send" if "send" in name and "recv" not in name else "recv" if "recv" in name and "send" not in name else ""


# Operators that pack or unpack a collective's buffer: copies, not communication, whatever their names say
# (FSDP2's ``fsdp::all_gather_copy_in``, ``fsdp::split_with_sizes_copy``, ``fsdp::chunk_cat``; FSDP1's
# ``FSDP::all_gather_copy_out`` ranges and ``aten::split_with_sizes_copy``).
COLLECTIVE_COPY = re.compile(r"^(?:fsdp|FSDP)::\w*(?:copy|chunk_cat)\w*|^aten::split_with_sizes_copy$")
# Kineto's collective ``Collective name``s that are no collective: waiting on one, or rnnprof-irrelevant markers.
NOT_COLLECTIVES = ("wait", "barrier_wait", "coalesced")


# -- pipeline schedules ---------------------------------------------------------------------------------
#
# The schedules a pipeline runs its micro-batches by (``trace --schedule``, ``pipeline --schedule``), and the ranges
# torch.distributed.pipelining records around a micro-batch's work: ScheduleGPipe's ``Forward i``/``Backward i``
# (the wait for the micro-batch's input inside), and its runtime's ``PP:<stage><action><micro-batch>``
# (``PP:2F0``: stage 2's forward of micro-batch 0; ``B`` a full backward, ``I`` and ``W`` a backward's input and
# weight halves), which the interleaved schedules run by.
ONE_F_ONE_B, GPIPE, INTERLEAVED_1F1B = "1f1b", "gpipe", "interleaved-1f1b"
PIPELINE_SCHEDULES = (ONE_F_ONE_B, GPIPE, INTERLEAVED_1F1B)
GPIPE_RANGE = re.compile(r"^(Forward|Backward) (\d{1,6})$")
PP_ACTION_RANGE = re.compile(r"^PP:(\d{1,6})(F|B|I|W)(\d{1,6})$")
# PyTorch operators that make a new view of a tensor (shape, strides, offset) and move no data: their time is what
# calling and recording an operator costs, whatever the tensor's size (whatif's micro-batches).
VIEW_OPERATORS = frozenset(f"aten::{name}" for name in (
    "view", "_unsafe_view", "as_strided", "transpose", "t", "permute", "expand", "expand_as", "view_as", "unsqueeze",
    "squeeze", "slice", "select", "narrow", "detach", "alias", "unflatten"))
# autograd's accumulation of a parameter's gradient (its ``.grad`` added to, or set on the first): work of the
# parameter's size, whatever the micro-batch's (whatif's micro-batches).
ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"


# -- training phases ------------------------------------------------------------------------------------
#
# The phase a collective belongs to: the capture's own ranges (``rnnprof.recording.torch_profiler``'s
# ``forward``/``backward``/``optimizer``, which rnnprof's workloads record; a user's, ``PHASE_RANGE``), else what the libraries mark: torch.optim's
# ``Optimizer.step#...`` and ``Optimizer.zero_grad#...`` ranges, autograd's ``autograd::engine::evaluate_function:
# ...`` operators (a backward function), FSDP2's ``FSDP::pre_backward``/``FSDP::post_backward_*``/
# ``FSDP::root_post_backward_callback`` (backward) and ``FSDP::pre_forward``/``FSDP::post_forward`` (forward).
FORWARD, BACKWARD, OPTIMIZER = "forward", "backward", "optimizer"
PHASES = (FORWARD, BACKWARD, OPTIMIZER)
# A range a capture or a user records around a phase: its name is the phase's, case and surrounding punctuation
# aside (``forward``, ``## backward ##`` as HTA's test traces have them, ``[Optimizer]``).
PHASE_RANGE = re.compile(rf"^[\W_]*({'|'.join(PHASES)})[\W_]*$", re.IGNORECASE)
BACKWARD_FUNCTION = "autograd::engine::evaluate_function"
OPTIMIZER_STEP = "Optimizer.step#"  # torch.optim's record_function around step()
OPTIMIZER_ZERO_GRAD = "Optimizer.zero_grad#"
LIBRARY_PHASE_RANGES = ((BACKWARD, re.compile(r"^FSDP::(?:pre_backward|post_backward|root_post_backward|"
                                              r"backward_prefetch)")),
                        (FORWARD, re.compile(r"^FSDP::(?:pre_forward|post_forward|root_pre_forward)")),
                        (OPTIMIZER, re.compile(rf"^(?:{re.escape(OPTIMIZER_STEP)}|{re.escape(OPTIMIZER_ZERO_GRAD)})")))

# FSDP2's forward prefetch: the range a block's pre-forward opens around the all-gather it issues for a later
# block (``set_modules_to_forward_prefetch``); the forward's first all-gathers, the root's and the first block's,
# no block prefetches (``FSDP_UNPREFETCHED``: how many)
FSDP_FORWARD_PREFETCH = re.compile(r"^FSDP::forward_prefetch\b")
FSDP_UNPREFETCHED = 2

# FSDP2's ranges around gathering a module's parameters (``fully_shard``'s ``FSDP::all_gather (<module>)``: the flat
# all-gather's input and output buffers; ``FSDP::all_gather_copy_out (<module>)``: each parameter's unsharded
# storage), the module's name in brackets, none for the root module.
FSDP_GATHER_RANGE = re.compile(r"^FSDP::(all_gather_copy_out|all_gather)(?: \((.+)\))?$")
FSDP_ROOT = "(root)"

MEMCPY_PATTERN = r"^(Memcpy|MEMCPY|dma)"
MEMSET_PATTERN = r"^(Memset|MEMSET)"

# -- ops as TensorFlow's oneDNN build runs them -----------------------------------------------------
#
# On x86-64, TensorFlow's oneDNN optimizations (on by default; ``TF_ENABLE_ONEDNN_OPTS=0`` turns them off)
# rewrite graph nodes to oneDNN kernels: a ``Conv2D`` node runs as ``_MklNativeConv2D`` (native tensor
# format) or ``_MklConv2D`` (oneDNN's own layout, older builds). The runtime graph, step stats, XSpaces and
# timelines then name the rewritten op. The loaders give every event and runtime-graph node the op the
# user's graph holds (``user_op``) and keep the rewritten name as a detail (a table's ``metadata.ran_as``; a node's
# ``kernel`` attribute), so counts, placement audits and diffs of runs with and without oneDNN agree.
#
# The table is explicit (TensorFlow 2.21's registry of ``_Mkl*`` ops): a name not in it is left as it is,
# so a user's own op that happens to be called ``_MklFoo`` keeps its name. Fusions only oneDNN makes, with
# no one op of the user's graph behind them (``_MklLayerNorm``, ``_MklFusedInstanceNorm``,
# ``_MklFusedMish``, ``_MklSwish``, ``_MklFusedBatchMatMulV2``, ``_Mkl(Native)Conv2DWithBias``,
# ``_Mkl(Native)PadWith(Fused)Conv2D``, ``_Mkl(Native)Conv2DBackpropFilterWithBias``), keep their names too.

ONEDNN_PREFIXES = ("_MklNative", "_Mkl")
# Ops oneDNN runs under ``_Mkl<op>`` / ``_MklNative<op>``.
_ONEDNN_KERNELS_OF = (
    "AvgPool", "AvgPool3D", "AvgPool3DGrad", "AvgPoolGrad", "BatchMatMul", "BatchMatMulV2", "Concat", "ConcatV2",
    "ConjugateTranspose", "Conv2D", "Conv2DBackpropFilter", "Conv2DBackpropInput", "Conv3D",
    "Conv3DBackpropFilterV2", "Conv3DBackpropInputV2", "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropFilter",
    "DepthwiseConv2dNativeBackpropInput", "Dequantize", "Einsum", "Elu", "EluGrad", "FusedBatchNorm",
    "FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3", "FusedBatchNormV2", "FusedBatchNormV3",
    "LeakyRelu", "LeakyReluGrad", "MatMul", "MaxPool", "MaxPool3D", "MaxPool3DGrad", "MaxPoolGrad", "QuantizeV2",
    "QuantizedAvgPool", "QuantizedConcatV2", "QuantizedConv2D", "QuantizedConv2DAndRelu",
    "QuantizedConv2DAndReluAndRequantize", "QuantizedConv2DAndRequantize", "QuantizedConv2DPerChannel",
    "QuantizedConv2DWithBias", "QuantizedConv2DWithBiasAndRelu", "QuantizedConv2DWithBiasAndReluAndRequantize",
    "QuantizedConv2DWithBiasAndRequantize", "QuantizedConv2DWithBiasSignedSumAndReluAndRequantize",
    "QuantizedConv2DWithBiasSumAndRelu", "QuantizedConv2DWithBiasSumAndReluAndRequantize",
    "QuantizedDepthwiseConv2D", "QuantizedDepthwiseConv2DWithBias", "QuantizedDepthwiseConv2DWithBiasAndRelu",
    "QuantizedDepthwiseConv2DWithBiasAndReluAndRequantize", "QuantizedMatMulWithBias",
    "QuantizedMatMulWithBiasAndDequantize", "QuantizedMatMulWithBiasAndRelu",
    "QuantizedMatMulWithBiasAndReluAndRequantize", "QuantizedMatMulWithBiasAndRequantize", "QuantizedMaxPool",
    "Relu", "Relu6", "Relu6Grad", "ReluGrad", "Softmax", "SparseMatrixMatMul", "Tanh", "TanhGrad", "Transpose",
)
# Grappler's fused ops (``_FusedConv2D``...), which oneDNN runs as ``_Mkl(Native)FusedConv2D``...: the graph
# TF optimizes holds them whether or not oneDNN runs them, so that is the name they are counted under.
_ONEDNN_KERNELS_OF_FUSED = ("_FusedBatchNormEx", "_FusedConv2D", "_FusedConv3D", "_FusedDepthwiseConv2dNative",
                            "_FusedMatMul")
ONEDNN_OPS: dict[str, str] = {
    f"{prefix}{op.lstrip('_')}": op
    for op in (*_ONEDNN_KERNELS_OF, *_ONEDNN_KERNELS_OF_FUSED) for prefix in ONEDNN_PREFIXES
}


def user_op(op: str) -> str:
    """The op of the user's graph that ``op`` runs (``_MklNativeConv2D`` -> ``Conv2D``); other names unchanged."""
    return ONEDNN_OPS.get(op, op)


def note_ran_as(ran_as: dict, op: str, kernel: str) -> None:
    """Record in ``ran_as`` (``{op: [kernel names]}``, sorted) that ``op`` ran as ``kernel``."""
    names = ran_as.setdefault(op, [])
    if kernel not in names:
        names.append(kernel)
        names.sort()


# -- kernel and op names, folded ------------------------------------------------------------------

def fold_brackets(text: str, opening: str, closing: str) -> str | None:
    """``text`` with every outermost ``opening…closing`` group's content replaced by one ellipsis (``f<int, 2>(x)``
    -> ``f<…>(x)``); None when the brackets do not balance."""
    out, depth = [], 0
    for ch in text:
        if ch == opening:
            if depth == 0:
                out.append(opening + "…" + closing)
            depth += 1
        elif ch == closing and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return None if depth else "".join(out)



def normalize_name(name: str) -> str:
    """A kernel or op name with template arguments folded to ``<…>`` and the argument list dropped.

    ``void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, ...>(int, ...)``
    becomes ``at::native::vectorized_elementwise_kernel<…>``; names without templates or arguments
    (TF node names, ``aten::mm``) are kept as they are.
    """
    text = name[5:] if name.startswith("void ") else name
    folded = fold_brackets(text, "<", ">")
    if folded is None:
        return name  # unbalanced brackets: not a template, keep the name
    folded = folded.strip()
    if folded.endswith(")"):  # drop the argument list: the last top-level (...) group
        depth = 0
        for i in range(len(folded) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(folded[i], 0)
            if depth == 0:
                folded = folded[:i].strip() if folded[:i].strip() else folded
                break
    return folded or name

