"""One rank's model under ``--parallel``, built with torch's own APIs: ``init_device_mesh`` for the mesh,
``fully_shard`` (FSDP2) per block and at the root, ``parallelize_module`` with ColwiseParallel/RowwiseParallel
for tensor parallelism, ``torch.distributed.pipelining`` (``PipelineStage`` and ``ScheduleGPipe``,
``Schedule1F1B`` or ``ScheduleInterleaved1F1B``) for pipelines, ``DistributedDataParallel`` for ddp, and
``replicate`` for the replicas of a pipeline stage (pp+dp, ``replicate_stage``). The layout (who holds what) is
``torch_layout``'s.

A model is a factory's: ``make_model()`` builds the whole model with the run's seed on every call, so each rank,
and each of its pipeline stages, starts from the same weights as a single process would. Models give
``blocks()`` (the units sharded one by one), ``tensor_parallel_plan()`` (a block's plan), ``keep_stage(blocks,
first, last)`` and ``loss(logits, targets)``.

torch is imported inside the functions, so that this module costs nothing where the flags are only checked.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable

from rnnprof.training.torch_layout import Layout
from rnnprof.models.config import TorchOptions


@dataclass
class RankModel:
    """What a rank trains: ``module(inputs, targets) -> loss``, or a ``pipeline``; the parameters it updates."""

    module: Any  # None for a pipeline
    model: Any  # the model (a pipeline: its first local stage's part) for evaluation and parameters
    parameters: list
    pipeline: "Pipeline | None" = None
    groups: dict | None = None  # mesh_groups'


def mesh_groups(layout: Layout, mesh) -> dict:
    """The rank's process group along each mesh dimension: ``{dim: {"name", "description", "ranks"}}`` (torch's
    group name, its description, the global ranks in it), what a trace of a gloo run does not say of each
    collective."""
    import torch.distributed as dist

    found = {}
    for dim in layout.mesh_dims:
        group = mesh[dim].get_group() if mesh is not None else dist.group.WORLD
        found[dim] = {"name": group.group_name, "description": getattr(group, "group_desc", None),
                      "ranks": dist.get_process_group_ranks(group)}
    return found


def preload(layout: Layout) -> None:
    """Import the parts of torch that ``layout``'s mode uses, now: a rank's peak memory (``torch_memory``, measured
    from before the model is built) then leaves out the modules' own memory. Only those of the mode: DTensor, which
    FSDP2, tensor parallelism and pipelining import, brings sympy and takes seconds."""
    import importlib

    modules = {"fsdp": "torch.distributed.fsdp", "hsdp": "torch.distributed.fsdp",
               "tp": "torch.distributed.tensor.parallel", "pp": "torch.distributed.pipelining"}
    needed = {modules[part] for part in layout.mode.split("+") if part in modules}
    if layout.mode == "pp+dp":
        needed |= {"torch.distributed.pipelining", "torch.distributed._composable.replicate_with_fsdp"}
    for name in sorted(needed | {"torch.nn.parallel"}):
        importlib.import_module(name)


def device_mesh(layout: Layout, device):
    """The layout's mesh over the default group's ranks (``init_device_mesh``: one subgroup per dimension)."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device.type, layout.mesh_shape, mesh_dim_names=layout.mesh_dims)


def build(options: TorchOptions, layout: Layout, rank: int, device, make_model: Callable,
          phase: Callable) -> RankModel:
    """The rank's part of the model, wrapped for ``layout.mode``; ``phase(name)`` marks a pipeline's forward and
    backward of each micro-batch (the training's ``phase``, looked up at each call)."""
    mesh = device_mesh(layout, device)
    groups = mesh_groups(layout, mesh)
    if layout.mode in ("pp", "pp+dp"):
        pipeline = Pipeline(options, layout, rank, device, mesh, make_model, phase)
        return RankModel(module=None, model=pipeline.modules[0], parameters=pipeline.parameters(), pipeline=pipeline,
                         groups=groups)
    model = make_model().to(device)
    if layout.mode in ("tp", "fsdp+tp"):
        tensor_parallel(model, mesh["tp"])
    if layout.mode in ("fsdp", "fsdp+tp"):
        shard(model, mesh["dp"], options)
    elif layout.mode == "hsdp":
        shard(model, mesh, options)  # a 2-D mesh: replicate x shard
    return RankModel(module=model, model=model, parameters=list(model.parameters()), groups=groups)


def tensor_parallel(model, mesh) -> None:
    """Each block's projections sliced over ``mesh`` by the model's plan; the embeddings, norms and head stay whole
    on every rank (they see the same activations, so their gradients agree without a collective)."""
    from torch.distributed.tensor.parallel import parallelize_module

    for block in model.blocks():
        parallelize_module(block, mesh, model.tensor_parallel_plan())


def shard(model, mesh, options: TorchOptions) -> None:
    """``fully_shard`` on each block, then on the root (the embeddings, the norm and the head: its parameters stay
    gathered between forward and backward, fully_shard's default for a root). ``--no-reshard-after-forward`` keeps
    each block's gathered parameters until its backward; ``--forward-prefetch N`` has each block's forward issue the
    all-gathers of the next N blocks, ``--backward-prefetch N`` each block's backward those of the N blocks before
    it (``set_modules_to_forward_prefetch``/``set_modules_to_backward_prefetch``); ``--unshard-async`` issues each
    all-gather asynchronously, waited for where its block needs it (``_set_unshard_async_op``: without a stream of
    its own, on a CPU rank, FSDP2 otherwise waits for a prefetched all-gather as soon as it issues it)."""
    from torch.distributed.fsdp import fully_shard

    blocks = model.blocks()
    for block in blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=options.reshard_after_forward)
    fully_shard(model, mesh=mesh)
    forward, backward = options.forward_prefetch or 0, options.backward_prefetch or 0
    for i, block in enumerate(blocks):
        ahead = blocks[i + 1:i + 1 + forward]
        if ahead:
            block.set_modules_to_forward_prefetch(ahead)
        behind = list(reversed(blocks[max(0, i - backward):i]))
        if behind:
            block.set_modules_to_backward_prefetch(behind)
    if options.unshard_async:
        model._set_unshard_async_op(True)  # the root's setter reaches every FSDP module below it


def data_parallel(model, device, options: TorchOptions):
    """``DistributedDataParallel`` over every rank, on the rank's GPU where it has one."""
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                   bucket_cap_mb=options.bucket_cap_mb)


def replicate_stage(module, mesh) -> None:
    """A pipeline stage replicated over ``mesh`` (pp+dp): torch's ``replicate`` (the data parallelism of
    ``torch.distributed._composable.replicate_with_fsdp``, which torch.distributed.pipelining drives itself: the
    stage's gradients are all-reduced once, after its last micro-batch's backward). DistributedDataParallel is not
    used here: inside torch 2.13's pipelining its reducer counts a stage's parameters twice, and fails, where the
    stage runs all its forwards before its first backward (GPipe; 1F1B with no more micro-batches than stages)."""
    from torch.distributed._composable.replicate_with_fsdp import replicate

    replicate(module, mesh=mesh)


@functools.lru_cache(maxsize=None)
def phased_stage_class():
    """``PipelineStage`` whose forward and backward of each micro-batch run inside ``phase("forward")`` and
    ``phase("backward")``: 1F1B and the interleaved schedules mark nothing per micro-batch themselves (GPipe marks
    ``Forward i``/``Backward i``, the interleaved runtime ``PP:<action>``)."""
    from torch.distributed.pipelining import PipelineStage

    class PhasedStage(PipelineStage):
        def __init__(self, *args, phase: Callable, **kwargs):
            super().__init__(*args, **kwargs)
            self.phase = phase

        def forward_one_chunk(self, *args, **kwargs):
            with self.phase("forward"):
                return super().forward_one_chunk(*args, **kwargs)

        def backward_one_chunk(self, *args, **kwargs):
            with self.phase("backward"):
                return super().backward_one_chunk(*args, **kwargs)

    return PhasedStage


def schedule_class(name: str):
    from torch.distributed import pipelining

    return {"gpipe": pipelining.ScheduleGPipe, "1f1b": pipelining.Schedule1F1B,
            "interleaved-1f1b": pipelining.ScheduleInterleaved1F1B}[name]


class Pipeline:
    """The rank's stages of the pipeline (its own parts of the model, each a ``PipelineStage``) and the schedule
    that runs the micro-batches through them; ``step(inputs, targets)`` runs one batch and returns the mean loss of
    its micro-batches on the rank that holds the last stage, NaN on the others."""

    def __init__(self, options: TorchOptions, layout: Layout, rank: int, device, mesh, make_model: Callable,
                 phase: Callable):
        indices = layout.stage_indices(rank)
        group = mesh["pp"].get_group()
        self.modules, stages = [], []
        for index in indices:
            module = make_model()  # the same seed on every call: the stage's weights are the whole model's
            module.keep_stage(layout.stage_blocks(index), first=index == 0, last=index == layout.stages - 1)
            module = module.to(device)
            self.modules.append(module)
            if "dp" in layout.mesh_dims:
                replicate_stage(module, mesh["dp"])
            stages.append(phased_stage_class()(module, index, layout.stages, device, group=group, phase=phase))
        self.first, self.last = 0 in indices, layout.stages - 1 in indices
        loss = type(self.modules[0]).loss
        cls = schedule_class(layout.schedule)
        self.schedule = cls(stages if layout.stages_per_rank > 1 else stages[0],
                            n_microbatches=layout.micro_batches, loss_fn=loss)

    def parameters(self) -> list:
        return [p for module in self.modules for p in module.parameters()]

    def step(self, inputs, targets) -> float:
        losses: list = []
        args = (inputs,) if self.first else ()
        kwargs = {"target": targets, "losses": losses} if self.last else {}
        self.schedule.step(*args, **kwargs)
        return sum(float(x.item()) for x in losses) / len(losses) if losses else math.nan
