"""Communication by every name it goes by, and its collective type.

The expected events come from the raw JSON of every real trace in tests/data, read here without rnnprof and
matched against the communication names listed below (written from the libraries' own naming, not from
rnnprof's patterns): NCCL's ``ncclKernel_*``/``ncclDevKernel_*``, RCCL's ``ncclDevKernel_Generic``, PyTorch's
symmetric-memory ``multimem_all_reduce_kernel``, gloo's ``gloo:*`` ranges and ``c10d::*`` calls of a CPU rank,
TensorFlow's transfer and collective ops. A collective's expected type: what the kernel's args name
(``Collective name``), else the ``nccl:*`` range around the kernel on its stream, else the kernel's name.
"""

from __future__ import annotations

import collections
import functools
import gzip
import json
import re

import pytest

from rnnprof.analyzers.classify import EventClass, classify
from rnnprof.cli import main
from rnnprof.events import Device, EventTableBuilder, Kind
from rnnprof.events.names import COLLECTIVE_TYPES, collective_type

from fixtures import FILES, FIXTURES, GLOO_PAIRS

# The collective types, written out: the test's own vocabulary must be rnnprof's.
TYPES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "broadcast", "reduce", "gather", "scatter",
         "send/recv", "barrier", "unknown")

# GPU kernels that communicate (NCCL, RCCL, PyTorch symmetric memory).
GPU_COMM = re.compile(r"^(ncclKernel_|ncclDevKernel_|rccl)|multimem_all_reduce_kernel")
# NCCL kernel names: ncclKernel_<Collective>_..., ncclDevKernel_<Collective>_...
NCCL_COLLECTIVE = {"AllReduce": "all-reduce", "AllGather": "all-gather", "ReduceScatter": "reduce-scatter",
                   "Broadcast": "broadcast", "Reduce": "reduce", "SendRecv": "send/recv", "Send": "send/recv",
                   "Recv": "send/recv", "Generic": "unknown"}
# Kineto's "Collective name" arg (c10d's names) and the nccl:<name> / gloo:<name> ranges.
C10D_COLLECTIVE = {"allreduce": "all-reduce", "all_reduce": "all-reduce", "broadcast": "broadcast",
                   "_allgather_base": "all-gather", "_all_gather_base": "all-gather", "allgather": "all-gather",
                   "all_gather": "all-gather", "_reduce_scatter_base": "reduce-scatter",
                   "reduce_scatter": "reduce-scatter", "all_to_all": "all-to-all", "alltoall_base": "all-to-all",
                   "alltoall": "all-to-all", "send": "send/recv", "recv": "send/recv", "barrier": "barrier",
                   "reduce": "reduce", "gather": "gather", "scatter": "scatter"}
# On a rank without a GPU: gloo's ranges and the c10d calls.
CPU_COMM = re.compile(r"^(gloo:(?P<range>\w+)|c10d::(?P<call>\w+?)_?)$")
# Files that hold communication: the check below must find some there.
WITH_COMM = {"kineto-2rank-nccl-rank0.json.gz", "kineto-sampled-rank0.json.gz", "kineto-sampled-rank1.json.gz",
             *(name for pair in GLOO_PAIRS for name in pair), "kineto-8rank-rank3-a100.json.gz",
             "kineto-2rank-rank1-v100-cudagraph.json.gz", "kineto-16rank-rank0-a100-cudagraph.json.gz",
             "kineto-b200-8rank-rank0.json.gz", "kineto-mi300x-8rank-ddp-rank0.json.gz",
             "torch-nccl-pp-collectives-rank0.json.gz"}


def _document(path):
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)


def _kernel_type(kernel: dict, ranges: list[dict]) -> str:
    args = kernel.get("args") or {}
    if args.get("Collective name"):
        return C10D_COLLECTIVE[args["Collective name"]]
    for r in ranges:  # the nccl:* range around the kernel on its own stream (nccl:coalesced names none)
        if (r["pid"], r["tid"]) == (kernel["pid"], kernel["tid"]) and r["ts"] <= kernel["ts"] < r["ts"] + r["dur"] \
                and r["name"].split(":", 1)[1] in C10D_COLLECTIVE:
            return C10D_COLLECTIVE[r["name"].split(":", 1)[1]]
    if "multimem_all_reduce_kernel" in kernel["name"]:
        return "all-reduce"
    return NCCL_COLLECTIVE[re.match(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)", kernel["name"]).group(1)]


@functools.cache
def expected_communication(path) -> collections.Counter:
    """``(name, type) -> events`` of the device-side communication of one real trace, from its raw JSON (worked out
    once a trace for the module's tests, which only read it)."""
    doc = _document(path)
    events = [e for e in (doc["traceEvents"] if isinstance(doc, dict) else doc)
              if isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("name"), str)]
    found: collections.Counter = collections.Counter()
    if not path.name.startswith(("kineto-", "torch-")):  # TF1 timelines: transfer and collective ops
        for e in events:
            op = (e.get("args") or {}).get("op", e["name"])
            if re.match(r"^(_?(Host)?(Send|Recv)|RecvTensor|RecvBuf|Collective\w+|Nccl\w+)$", op):
                found[(e["name"], "send/recv")] += 1  # none of the three timelines holds any
        return found
    on_gpu = any(e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") for e in events)
    if on_gpu:
        ranges = [e for e in events if e.get("cat") == "gpu_user_annotation" and re.match(r"^nccl:\w+$", e["name"])]
        for e in events:
            if e.get("cat") == "kernel" and GPU_COMM.search(e["name"]):
                found[(e["name"], _kernel_type(e, ranges))] += 1
    elif "distributedInfo" in doc:  # a rank without a GPU: its collectives are its communication
        for e in events:
            match = CPU_COMM.match(e["name"]) if e.get("cat") in ("cpu_op", "user_annotation") else None
            if match:
                found[(e["name"], C10D_COLLECTIVE[match.group("range") or match.group("call")])] += 1
    return found


def reported_communication(path, capsys) -> collections.Counter:
    assert main(["comm", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    found: collections.Counter = collections.Counter()
    for op in doc["communication_ops"]:
        assert sum(op["collective_types"].values()) == op["events"], op
        for kind, n in op["collective_types"].items():
            found[(op["name"], kind)] += n
    return found


def test_the_vocabulary_is_defined_once_and_as_written():
    assert COLLECTIVE_TYPES == TYPES


@pytest.mark.parametrize("name", FILES)
def test_every_communication_event_of_a_real_trace_is_communication_of_its_type(name, capsys):
    """All of a trace's device-side communication events are reported as communication with the expected type,
    and nothing else is (a compute kernel named reduce_kernel or splitKreduce_kernel is not)."""
    expected = expected_communication(FIXTURES / name)
    assert bool(expected) == (name in WITH_COMM), expected
    assert reported_communication(FIXTURES / name, capsys) == expected


def test_the_real_traces_hold_every_kind_of_name():
    """The check above covers old and new NCCL names, RCCL's generic kernel typed by its range and args,
    symmetric memory and gloo."""
    seen = collections.Counter()
    for name in WITH_COMM:
        for (event, kind), n in expected_communication(FIXTURES / name).items():
            family = re.search(r"ncclDevKernel|ncclKernel|multimem|gloo:|c10d::", event).group(0)
            seen[(family, kind)] += n
    assert seen[("ncclKernel", "all-reduce")] and seen[("ncclKernel", "send/recv")]
    assert seen[("ncclKernel", "broadcast")] and seen[("ncclDevKernel", "all-gather")]
    assert seen[("multimem", "all-reduce")] == 73
    # RCCL: 6 all-reduces and 6 broadcasts named by their ranges and args; 5 launched before the profiler started
    # name nothing
    generic = expected_communication(FIXTURES / "kineto-mi300x-8rank-ddp-rank0.json.gz")
    assert sorted((k, n) for (_, k), n in generic.items()) == [("all-reduce", 6), ("broadcast", 6), ("unknown", 5)]
    # gloo: one all-reduce a step on each rank, 2 steps in torch-gloo, 10 in torch-gloo-balanced
    assert seen[("gloo:", "all-reduce")] == 2 * 2 + 2 * 10 and seen[("c10d::", "all-reduce")] == 2 * 2 + 2 * 10


# -- synthetic traces: each source of the type on its own ---------------------------------------------------------

def _kineto(path, events):
    trace = {"schemaVersion": 1, "traceEvents": [{"ph": "X", "pid": 0, "dur": 10, **e} for e in events]}
    path.write_text(json.dumps(trace))
    return path


def _kernel(name, ts, stream=7, **args):
    return {"cat": "kernel", "name": name, "tid": stream, "ts": ts,
            "args": {"device": 0, "stream": stream, "correlation": ts, **args}}


def _range(name, ts, stream=7):
    return {"cat": "gpu_user_annotation", "name": name, "tid": stream, "ts": ts - 1, "dur": 12,
            "args": {"device": 0, "stream": stream}}


def test_the_type_comes_from_the_args_then_the_range_then_the_name(tmp_path, capsys):
    generic = "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"
    path = _kineto(tmp_path / "t.json", [
        _kernel(generic, 100), _range("nccl:all_gather", 100),  # RCCL: only the range names it
        _kernel(generic, 200), _range("nccl:all_reduce", 200, stream=8),  # a range on another stream: not its own
        _kernel(generic, 300, **{"Collective name": "reduce_scatter_tensor_coalesced"}),
        _range("nccl:all_reduce", 300),  # the args win over the range
        _kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", 400), _range("nccl:all_to_all", 400),
        _kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", 500),  # the name alone
        _kernel("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*)", 600),
        _kernel("rcclKernel_Broadcast", 700),
        _kernel("void at::native::reduce_kernel<512, 1>(at::native::ReduceOp<float>)", 800),
        _kernel("void splitKreduce_kernel<float>(cublasSplitKParams<float>)", 900),
        _kernel("small_gather_kernel", 1000),
        _range("nccl:all_reduce", 1100), _kernel("ampere_sgemm_128x64_nn", 1100),  # compute inside a range
    ])
    assert reported_communication(path, capsys) == collections.Counter({
        (generic, "all-gather"): 1, (generic, "unknown"): 1, (generic, "reduce-scatter"): 1,
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", "all-to-all"): 1,
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", "send/recv"): 1,
        ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*)", "all-reduce"): 1,
        ("rcclKernel_Broadcast", "broadcast"): 1,
    })


COMPUTE_KERNELS = [
    "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::func_wrapper_t<float> > >()",
    "void splitKreduce_kernel<float, float, float, float, true, false, false>(cublasSplitKParams<float>)",
    "void cub::DeviceReduceByKeyKernel<cub::DispatchReduceByKey<long*> >()",
    "void at::native::_scatter_gather_elementwise_kernel<128, 4>()", "void fbgemm_gpu::permute_2D_lengths_kernel<int>()",
    "reduce_segments", "void cudnn::cnn::reduce_wgrad_nchw_helper<float, float>()", "small_gather_kernel",
    "_finalize_matmul_scatter_bf16", "void at::native::indexFuncLargeIndex<float, ReduceAdd>()",
    "cudnn_infer_volta_scudnn_128x64_relu_small_nn_v1", "install_gather_kernel", "ampere_sgemm_128x64_nn",
]
COMM_KERNELS = {
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)": "all-reduce",
    "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)": "send/recv",
    "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)": "broadcast",
    "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "all-gather",
    "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "reduce-scatter",
    "ncclDevKernel_Reduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "reduce",
    "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*)": "all-reduce",
    "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)": "unknown",
}


def _gpu_table(names):
    builder = EventTableBuilder("test")
    for k, name in enumerate(names):
        builder.add(float(k * 10), 5.0, name, name, Device("gpu", 0), "stream:7", Kind.KERNEL)
    return builder.build()


def test_compute_kernels_that_look_like_collectives_stay_compute():
    table = _gpu_table(COMPUTE_KERNELS)
    assert [EventClass(c) for c in classify(table)] == [EventClass.COMPUTE] * len(COMPUTE_KERNELS)


def test_communication_kernels_are_communication_of_their_type():
    table = _gpu_table(list(COMM_KERNELS))
    assert [EventClass(c) for c in classify(table)] == [EventClass.COMMUNICATION] * len(COMM_KERNELS)
    assert {name: collective_type(name) for name in COMM_KERNELS} == COMM_KERNELS


# -- TensorFlow ---------------------------------------------------------------------------------------------------

CPU = "/job:localhost/replica:0/task:0/device:CPU:{}"
# (node, op type, expected type; None: compute)
TF_OPS = [
    ("tower_0/grad/_Send", "_Send", "send/recv"), ("tower_1/grad/_Recv", "_Recv", "send/recv"),
    ("host/_HostSend", "_HostSend", "send/recv"), ("host/_HostRecv", "_HostRecv", "send/recv"),
    ("allreduce/CollectiveReduceV2", "CollectiveReduceV2", "all-reduce"),
    ("allreduce/CollectiveReduce_3", "CollectiveReduce", "all-reduce"),
    ("gather/CollectiveGatherV2", "CollectiveGatherV2", "all-gather"),
    ("bcast/CollectiveBcastSendV2", "CollectiveBcastSendV2", "broadcast"),
    ("bcast/CollectiveBcastRecvV2", "CollectiveBcastRecvV2", "broadcast"),
    ("rs/CollectiveReduceScatterV2", "CollectiveReduceScatterV2", "reduce-scatter"),
    ("a2a/CollectiveAllToAllV2", "CollectiveAllToAllV2", "all-to-all"),
    ("nccl/NcclAllReduce", "NcclAllReduce", "all-reduce"), ("nccl/NcclBroadcast", "NcclBroadcast", "broadcast"),
    ("allreduce/ring/Add_3", "AddV2", "all-reduce"),  # plain ops of the runner's gradient exchange scopes
    ("hierarchical_copy/Identity", "Identity", "all-reduce"),
    ("gradient_aggregation/AddN_2", "AddN", "reduce"),
    ("tower_0/loss/reduce_sum", "Sum", None), ("tower_0/loss/Mean", "Mean", None),
    ("tower_0/gather_nd", "GatherNd", None), ("tower_0/scatter_add", "ScatterAdd", None),
    ("tower_0/MatMul", "MatMul", None), ("tower_0/broadcast_to", "BroadcastTo", None),
]


def test_tensorflow_transfers_and_collectives_have_their_types(tmp_path, capsys):
    from tensorboard.compat.proto import config_pb2

    meta = config_pb2.RunMetadata()
    dev = meta.step_stats.dev_stats.add()
    dev.device = CPU.format(0)
    for k, (node, op, _) in enumerate(TF_OPS):
        stats = dev.node_stats.add()
        stats.node_name = node
        stats.all_start_micros = 1_000_000 + 100 * k
        stats.op_end_rel_micros = stats.all_end_rel_micros = 50
        stats.timeline_label = f"{node} = {op}(x)"
    path = tmp_path / "step-1.pb"
    path.write_bytes(meta.SerializeToString())
    assert main(["comm", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    reported = {op["name"]: (op["op_type"], op["collective_type"]) for op in doc["communication_ops"]}
    assert reported == {node: (op, kind) for node, op, kind in TF_OPS if kind is not None}


@pytest.mark.slow
def test_a_captured_tensorflow_run_reports_its_ring_all_reduce(tiny_nmt_run, capsys):
    """Every CollectiveReduce op the run's timelines hold (read here from the gzipped JSON) is communication, an
    all-reduce."""
    expected = collections.Counter()
    for timeline in sorted((tiny_nmt_run / "timelines").glob("step-*.trace.json.gz")):
        for e in _document(timeline)["traceEvents"]:
            args = e.get("args") or {}
            if e.get("ph") == "X" and str(args.get("op", "")).startswith("CollectiveReduce"):
                expected[(args["name"], "all-reduce")] += 1
    assert expected
    assert reported_communication(tiny_nmt_run, capsys) == expected
