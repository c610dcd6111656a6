"""memory of jobs that split or shard: a pipeline's stages are not compared as replicas (1F1B's first stage holds
the activations of more micro-batches, which the schedule explains), ranks of one stage still are; FSDP2's gathered
parameters live at a device's peak, by module, against torch's own count of the model's parameters; on a GPU, each
step's peak against ``torch.cuda.max_memory_allocated()`` and the gathered parameters as CUDA's allocator rounds
them."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from fixtures import FIXTURES
from rnnprof.analyzers.memory import analyze_memory
from rnnprof.analyzers.memory.imbalance import imbalances
from rnnprof.events import Device, EventTableBuilder, Kind
from rnnprof.events.memory import memory_records
from rnnprof.traces import load_events

PP_RUN = FIXTURES / "torch-gloo-pp"
FSDP_RUN = FIXTURES / "torch-gloo-fsdp"


def test_a_pipelines_stages_peaks_are_said_as_the_schedule_explains_them():
    """1F1B on 2 stages, 4 micro-batches: stage 0 holds the activations of up to 2 micro-batches, stage 1 of 1; at
    their peaks stage 0 holds about twice stage 1's activations, and no imbalance is raised between them."""
    report = analyze_memory(load_events(str(PP_RUN)))
    pipeline = report.pipeline
    assert report.imbalances == () and pipeline.explained
    assert (pipeline.schedule, pipeline.ranks, pipeline.micro_batches) == ("1f1b", 2, 4)
    first, last = pipeline.peaks
    assert (first.position, first.in_flight, last.position, last.in_flight) == (0, 2, 1, 1)
    assert first.peak > last.peak
    assert first.activation / last.activation == pytest.approx(2.0, rel=0.25)


def _four_ranks(peaks: dict[str, int]):
    """A table of 4 CPU ranks whose devices each allocate, then free, their bytes in each of 4 steps."""
    b = EventTableBuilder("test")
    rows = []
    for r, (worker, nbytes) in enumerate(peaks.items()):
        cpu = Device("cpu", 0, worker)
        code = b.device_code(cpu)
        for n in range(4):
            b.add(100 * n, 100, f"ProfilerStep#{n}", "", cpu, "1", Kind.ANNOTATION, step=n)
            rows += [(100 * n + 10, code, nbytes, 1000 * n + r, n), (100 * n + 50, code, -nbytes, 1000 * n + r, n)]
    ts, device, nbytes, addr, step = (list(c) for c in zip(*rows))
    lane = b.strings.code("1")
    b.memory = memory_records(ts=ts, device=device, lane=[lane] * len(ts), nbytes=nbytes, addr=addr,
                              total_allocated=[0] * len(ts), total_reserved=[0] * len(ts), step=step)
    return b.build()


def test_ranks_of_one_stage_are_still_compared_and_stages_are_not():
    """pp+dp, 2 stages x 2 replicas: rank 2 (stage 0) holds 3 MB more than rank 0, its replica: an imbalance; stage
    1's ranks hold a third of stage 0's, which no replica is compared with."""
    mb = 1 << 20
    table = _four_ranks({"rank0": 9 * mb, "rank1": 3 * mb, "rank2": 12 * mb, "rank3": 3 * mb})
    devices = list(analyze_memory(table, pipeline=None).devices)
    stages = {"rank0": 0, "rank1": 1, "rank2": 0, "rank3": 1}
    found = imbalances(table.devices, devices, stages)
    assert [(i.device, i.excess) for i in found] == [("rank2/cpu:0", 3 * mb)]
    # the same devices read as replicas, rank 0 and rank 2 both stand out of the others' median
    assert {i.device for i in imbalances(table.devices, devices)} == {"rank0/cpu:0", "rank2/cpu:0"}


def _unsharded_bytes(module, world: int) -> int:
    """FSDP2's unsharded storage of ``module``'s own parameters: each sharded on dim 0 into ``world`` equal
    chunks, padded, gathered back whole (float32)."""
    total = 0
    for p in module.parameters():
        rows = p.shape[0]
        total += math.ceil(rows / world) * world * (p.numel() // rows) * p.element_size()
    return total


def test_fsdps_gathered_parameters_at_the_peak_are_the_models_by_module():
    """tests/data/torch-gloo-fsdp: fully_shard on each of 3 blocks and the root, 2 ranks. What memory says FSDP had
    gathered for each module at the peak is that module's parameters as torch counts them, padded as FSDP2 shards
    them; the root (embeddings, norm, head) stays gathered from forward to backward, so it is there."""
    torch = pytest.importorskip("torch")
    from rnnprof.models.config import TorchOptions, WorkloadConfig
    from rnnprof.models.torch.transformer import TransformerLM

    manifest = json.loads((FSDP_RUN / "manifest.json").read_text())
    config = manifest["config"]
    names = {f.name for f in dataclasses.fields(WorkloadConfig)}
    workload = WorkloadConfig(**{k: v for k, v in config.items() if k in names})
    torch.manual_seed(0)
    model = TransformerLM(TorchOptions(workload=workload, heads=config["heads"]))
    world = manifest["world_size"]
    expected = {f"layers.{name}": _unsharded_bytes(block, world) for name, block in model.layers.items()}
    in_blocks = {id(p) for block in model.layers.values() for p in block.parameters()}
    root = [p for p in model.parameters() if id(p) not in in_blocks]
    expected["(root)"] = sum(math.ceil(p.shape[0] / world) * world * (p.numel() // p.shape[0]) * p.element_size()
                             for p in root)
    report = analyze_memory(load_events(str(FSDP_RUN)))
    for device in report.devices:
        gathered = {u.module: u.parameters for u in device.unsharded if u.parameters}
        assert "(root)" in gathered and len(gathered) >= 2, gathered
        assert gathered == {m: expected[m] for m in gathered}, device.device
        assert sum(gathered.values()) < device.peak.allocated


def test_a_trace_without_fsdp_has_nothing_gathered():
    report = analyze_memory(load_events(str(PP_RUN)))
    assert all(d.unsharded == () for d in report.devices)
    assert np.all([d.peak.allocated > 0 for d in report.devices])


def test_a_stage_peak_the_schedule_does_not_explain_is_said_so():
    """The same two ranks with their peaks swapped: the last stage of 1F1B, which holds one micro-batch, above the
    first: not what the schedule explains; under GPipe, where every stage holds all of them, neither."""
    from rnnprof.analyzers.memory.imbalance import pipeline_memory
    from rnnprof.analyzers.pipeline import PipelineSchedule

    devices = list(analyze_memory(load_events(str(PP_RUN))).devices)
    roles = {"rank0": 0, "rank1": 1}
    one_f_one_b, gpipe = PipelineSchedule("1f1b", 2, 4), PipelineSchedule("gpipe", 2, 4)
    assert pipeline_memory(devices, one_f_one_b, roles).explained
    assert not pipeline_memory(devices, gpipe, roles).explained
    swapped = [dataclasses.replace(d, peak=dataclasses.replace(d.peak, allocated=o.peak.allocated))
               for d, o in zip(devices, devices[::-1])]
    assert not pipeline_memory(swapped, one_f_one_b, roles).explained


# tests/data/make_torch_sharded_traces.py's Transformer block, as torch.nn makes it (DIM 32, 2 heads, FFN 64): each
# parameter's shape, in module order (two LayerNorms, the attention's in and out projections, two Linears)
DIM, FFN, VOCAB = 32, 64, 64
BLOCK_SHAPES = [(DIM,), (DIM,), (3 * DIM, DIM), (3 * DIM,), (DIM, DIM), (DIM,), (DIM,), (DIM,), (FFN, DIM), (FFN,),
                (DIM, FFN), (DIM,)]
ROOT_SHAPES = [(VOCAB, DIM), (VOCAB, DIM), (VOCAB,)]  # the embedding, the head's weight and bias
CUDA_BLOCK = 512  # the CUDA caching allocator's smallest block: every allocation is rounded up to a multiple of it


def _allocated(shapes, world: int) -> int:
    """The unsharded float32 storage FSDP2 allocates for parameters of ``shapes``, each padded to ``world`` equal
    rows and allocated apart, as the CUDA allocator counts it."""
    return sum(math.ceil(math.ceil(s[0] / world) * world * math.prod(s[1:]) * 4 / CUDA_BLOCK) * CUDA_BLOCK
               for s in shapes)


def test_on_a_gpu_each_steps_peak_is_the_allocators_and_the_gathered_parameters_are_its_blocks():
    """FSDP2 on 2 ranks over nccl on one H200 (``torch-nccl-fsdp2-*``, profile_memory on): memory's peak of each
    traced step is the script's ``torch.cuda.max_memory_allocated()`` of that step, byte for byte; the parameters
    FSDP gathered, by module, are its parameters as torch counts them, each allocated apart and rounded up to the
    allocator's 512-byte blocks."""
    paths = [FIXTURES / f"torch-nccl-fsdp2-collectives-rank{r}.json.gz" for r in (0, 1)]
    report = analyze_memory(load_events([str(p) for p in paths]))
    gpus = [d for d in report.devices if "gpu" in d.device]
    assert [d.worker for d in gpus] == ["rank0", "rank1"]
    for device in gpus:
        told = json.loads((FIXTURES / f"collectives-oracle-nccl-fsdp2-{device.worker}.json").read_text())
        world, units = told["world_size"], told["fsdp_units"]
        assert sum(math.prod(s) for s in BLOCK_SHAPES) == units["blocks.0"]["parameters"]
        assert sum(math.prod(s) for s in ROOT_SHAPES) == units["root"]["parameters"]
        assert dict(device.step_peaks) == {s: told["peak_allocated"][s] for s in told["profiled_steps"]}
        assert device.peak.allocated == max(told["peak_allocated"][s] for s in told["profiled_steps"])
        gathered = {u.module: u.parameters for u in device.unsharded if u.parameters}
        expected = {name: _allocated(BLOCK_SHAPES, world) for name in ("blocks.0", "blocks.1", "blocks.2")}
        expected["(root)"] = _allocated(ROOT_SHAPES, world)
        assert "(root)" in gathered and len(gathered) >= 2, gathered
        assert gathered == {m: expected[m] for m in gathered}

