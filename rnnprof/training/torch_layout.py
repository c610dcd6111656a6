"""Where each rank of a PyTorch run sits under ``--parallel``: the device mesh, the rank's coordinates on it, the
batches a step trains on, and a pipeline's stages, micro-batches and blocks per stage.

Pure arithmetic (no torch): the flags are checked with it before torch loads (``plan_layout`` raises
``UsageError`` with one line for a combination that cannot work), and each rank builds its mesh from it. Ranks are
laid out row-major over the mesh, the last dimension varying fastest, as ``init_device_mesh`` lays them. The modes,
their meshes and what each rank holds: docs/workloads.md, "Parallel modes".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from rnnprof.errors import UsageError
from rnnprof.events.names import PIPELINE_SCHEDULES
from rnnprof.models.config import TorchOptions

PARALLEL_MODES = ("ddp", "fsdp", "hsdp", "tp", "pp", "fsdp+tp", "pp+dp")
HYBRID_DIMS = {"hsdp": ("replicate", "shard"), "fsdp+tp": ("dp", "tp"), "pp+dp": ("pp", "dp")}
SCHEDULES = PIPELINE_SCHEDULES
SHARDED = ("fsdp", "hsdp", "fsdp+tp")  # modes that call fully_shard
PIPELINED = ("pp", "pp+dp")
TENSOR_PARALLEL = ("tp", "fsdp+tp")
LSTM_MODES = ("ddp", "fsdp", "hsdp")  # the LSTM LM is one nn.LSTM: nothing to slice or to split into stages
DDP_MODES = ("ddp",)  # those that wrap the model in DistributedDataParallel
# The flags (by TorchOptions field) that only some modes read: elsewhere they are refused, or, in a sweep of
# several modes, left to the modes that read them.
MODE_FLAGS = {"mesh": tuple(HYBRID_DIMS), "micro_batches": PIPELINED, "schedule": PIPELINED,
              "stages_per_rank": PIPELINED, "stage_layers": PIPELINED, "reshard_after_forward": SHARDED,
              "forward_prefetch": SHARDED, "backward_prefetch": SHARDED, "bucket_cap_mb": DDP_MODES}
DEFAULT_MICRO_BATCHES = 4


@dataclass(frozen=True)
class Layout:
    """The mesh of a run and what it implies; ``coordinates(rank)`` places a rank on it."""

    mode: str
    world: int
    mesh_shape: tuple[int, ...]
    mesh_dims: tuple[str, ...]
    stages_per_rank: int = 0  # pipelines only (0: no pipeline)
    stage_layers: tuple[int, ...] = ()  # the blocks of each stage, in stage order
    micro_batches: int = 0
    schedule: str | None = None

    def coordinates(self, rank: int) -> dict[str, int]:
        """The rank's index along each mesh dimension."""
        found = {}
        for name, size in reversed(list(zip(self.mesh_dims, self.mesh_shape))):
            found[name] = rank % size
            rank //= size
        return {name: found[name] for name in self.mesh_dims}

    def degree(self, dim: str) -> int:
        """The mesh's size along ``dim`` (1 where it has no such dimension)."""
        return dict(zip(self.mesh_dims, self.mesh_shape)).get(dim, 1)

    @property
    def data_dims(self) -> tuple[str, ...]:
        """The dimensions along which ranks train on different batches."""
        return tuple(d for d in self.mesh_dims if d not in ("tp", "pp"))

    @property
    def data_ranks(self) -> int:
        """Batches trained on per step (one per data-parallel coordinate)."""
        size = 1
        for dim in self.data_dims:
            size *= self.degree(dim)
        return size

    @property
    def ranks_per_batch(self) -> int:
        """Ranks that work on one batch together (a tensor-parallel group times a pipeline)."""
        return self.world // self.data_ranks

    def data_rank(self, rank: int) -> int:
        """Which of the step's batches the rank works on."""
        index, where = 0, self.coordinates(rank)
        for dim in self.data_dims:
            index = index * self.degree(dim) + where[dim]
        return index

    @property
    def stages(self) -> int:
        return self.degree("pp") * self.stages_per_rank

    def stage_indices(self, rank: int) -> tuple[int, ...]:
        """The pipeline stages of the rank: its pipeline coordinate, then every ``pp`` stages after it (the
        looped placement of interleaved schedules)."""
        if not self.stages_per_rank:
            return ()
        first = self.coordinates(rank)["pp"]
        return tuple(first + k * self.degree("pp") for k in range(self.stages_per_rank))

    def stage_blocks(self, stage: int) -> range:
        """The indices of the blocks stage ``stage`` holds."""
        start = sum(self.stage_layers[:stage])
        return range(start, start + self.stage_layers[stage])

    def to_dict(self) -> dict:
        return {"mode": self.mode, "world": self.world, "mesh_shape": list(self.mesh_shape),
                "mesh_dims": list(self.mesh_dims), "data_ranks": self.data_ranks, "stages": self.stages,
                "stages_per_rank": self.stages_per_rank, "stage_layers": list(self.stage_layers),
                "micro_batches": self.micro_batches, "schedule": self.schedule}


def plan_layout(options: TorchOptions) -> Layout:
    """The layout of ``options``' run, or ``UsageError`` with one line saying what cannot work."""
    config, mode = options.workload, options.parallel
    if mode not in PARALLEL_MODES:
        raise UsageError(f"--parallel must be one of {', '.join(PARALLEL_MODES)}, got {mode}")
    _check_model(options)
    world = config.devices
    shape, dims = _mesh(options, world)
    layout = Layout(mode=mode, world=world, mesh_shape=shape, mesh_dims=dims)
    _check_fsdp_options(options, layout)
    _check_tensor_parallel(options, layout)
    if mode in PIPELINED:
        return _pipeline(options, layout)
    _refuse_pipeline_flags(options)
    return layout


def _check_model(options: TorchOptions) -> None:
    config, mode = options.workload, options.parallel
    if config.model == "rnnlm" and mode not in LSTM_MODES:
        why = ("its nn.LSTM keeps the four gates of a layer in one fused weight, which ColwiseParallel and "
               "RowwiseParallel cannot slice" if mode in TENSOR_PARALLEL else
               "it is one nn.LSTM module between the embedding and the projection, not a stack of blocks to split "
               "into stages")
        raise UsageError(f"--parallel {mode} applies to --model transformer, not the LSTM LM: {why} "
                         f"(the LSTM LM runs {', '.join(LSTM_MODES)})")
    if mode != "ddp" and config.variable_update != "replicated":
        raise UsageError(f"--variable-update {config.variable_update} trains unconnected replicas; it does not "
                         f"combine with --parallel {mode}")


def _mesh(options: TorchOptions, world: int) -> tuple[tuple[int, ...], tuple[str, ...]]:
    mode = options.parallel
    if mode not in HYBRID_DIMS:
        if options.mesh is not None:
            raise UsageError(f"--mesh applies to the 2-D modes ({', '.join(HYBRID_DIMS)}); --parallel {mode} uses "
                             f"one dimension of all {world} ranks")
        if world < 2 and mode in ("tp", "pp"):
            raise UsageError(f"--parallel {mode} needs at least 2 ranks, got --devices {world}")
        return (world,), ({"tp": "tp", "pp": "pp"}.get(mode, "dp"),)
    dims = HYBRID_DIMS[mode]
    shape = options.mesh
    if shape is None:
        if world < 4 or world % 2:
            raise UsageError(f"--parallel {mode} needs a 2-D mesh ({' x '.join(dims)}) of at least 2 x 2 ranks, "
                             f"got --devices {world}")
        shape = (2, world // 2)
    if shape[0] * shape[1] != world:
        raise UsageError(f"--mesh {shape[0]}x{shape[1]} holds {shape[0] * shape[1]} ranks but --devices is {world}")
    if min(shape) < 2:
        raise UsageError(f"--mesh {shape[0]}x{shape[1]}: each dimension of --parallel {mode}'s mesh "
                         f"({' x '.join(dims)}) needs at least 2 ranks")
    return tuple(shape), dims


def _check_fsdp_options(options: TorchOptions, layout: Layout) -> None:
    given = [flag for flag, value, unset in (("--no-reshard-after-forward", options.reshard_after_forward, True),
                                             ("--forward-prefetch", options.forward_prefetch, None),
                                             ("--backward-prefetch", options.backward_prefetch, None))
             if value != unset]
    if given and layout.mode not in SHARDED:
        raise UsageError(f"{given[0]} is fully_shard's: it applies to --parallel {', '.join(SHARDED)}")
    blocks = options.workload.layers if options.workload.model == "transformer" else 1
    for flag, value in (("--forward-prefetch", options.forward_prefetch),
                        ("--backward-prefetch", options.backward_prefetch)):
        if value and value >= blocks:
            raise UsageError(f"{flag} {value} reaches past the last block: the model has {blocks} sharded "
                             f"block(s), so at most {blocks - 1} can be prefetched")


def _check_tensor_parallel(options: TorchOptions, layout: Layout) -> None:
    config = options.workload
    if config.model == "transformer" and config.units % options.heads:
        raise UsageError(f"--units {config.units} does not split into --heads {options.heads} equal heads")
    tp = layout.degree("tp")
    if tp == 1:
        return
    if options.clip_norm is not None:
        raise UsageError(f"--clip-norm does not combine with --parallel {layout.mode}: torch's clip_grad_norm_ cannot "
                         "take one norm over sliced (DTensor) and whole gradients together")
    for flag, value in (("--units", config.units), ("--heads", options.heads)):
        if value % tp:
            raise UsageError(f"{flag} {value} does not split over the {tp} tensor-parallel ranks (it must be a "
                             f"multiple of {tp})")


def _refuse_pipeline_flags(options: TorchOptions) -> None:
    for flag, value, unset in (("--micro-batches", options.micro_batches, None), ("--schedule", options.schedule, None),
                               ("--stages-per-rank", options.stages_per_rank, None),
                               ("--stage-layers", options.stage_layers, None)):
        if value != unset:
            raise UsageError(f"{flag} applies to the pipelines, --parallel {' or '.join(PIPELINED)}")


def _pipeline(options: TorchOptions, layout: Layout) -> Layout:
    """The layout completed with the pipeline's stages, split and micro-batches, each checked."""
    schedule = options.schedule or "1f1b"
    if schedule not in SCHEDULES:
        raise UsageError(f"--schedule must be one of {', '.join(SCHEDULES)}, got {schedule}")
    interleaved = schedule == "interleaved-1f1b"
    per_rank = options.stages_per_rank or (2 if interleaved else 1)
    if interleaved and per_rank < 2:
        raise UsageError("--schedule interleaved-1f1b runs several stages on each rank: --stages-per-rank must be "
                         f"at least 2, got {per_rank}")
    if not interleaved and per_rank != 1:
        raise UsageError(f"--stages-per-rank applies to --schedule interleaved-1f1b; {schedule} runs one stage "
                         "per rank")
    stages = layout.degree("pp") * per_rank
    split = _stage_layers(options, stages)
    micro = options.micro_batches or max(DEFAULT_MICRO_BATCHES, stages)
    _check_micro_batches(options.workload.per_device_batch(), schedule, micro, stages, layout.degree("pp"))
    if options.tied:
        raise UsageError("--tied shares the embedding table with the output projection; a pipeline puts them on "
                         "different stages")
    for flag, given in (("--clip-norm", options.clip_norm is not None), ("--eval", options.eval)):
        if given:
            what = ("clip each stage by its own gradients' norm" if flag == "--clip-norm"
                    else "need the whole model in each process")
            raise UsageError(f"{flag} does not combine with --parallel {options.parallel}: it would {what}")
    return dataclasses.replace(layout, stages_per_rank=per_rank, stage_layers=split, micro_batches=micro,
                               schedule=schedule)


def _stage_layers(options: TorchOptions, stages: int) -> tuple[int, ...]:
    layers = options.workload.layers
    if options.stage_layers is None:
        if layers < stages:
            raise UsageError(f"--layers {layers} cannot fill {stages} pipeline stages (a block each at least)")
        return tuple(layers // stages + (1 if s < layers % stages else 0) for s in range(stages))
    split = tuple(options.stage_layers)
    shown = ",".join(map(str, split))
    if len(split) != stages:
        raise UsageError(f"--stage-layers {shown} names {len(split)} stage(s) but the pipeline has {stages}")
    if min(split) < 1 or sum(split) != layers:
        raise UsageError(f"--stage-layers {shown} must give each stage at least one block and add up to "
                         f"--layers {layers}")
    return split


def _check_micro_batches(batch: int, schedule: str, micro: int, stages: int, ranks: int) -> None:
    if batch % micro:
        raise UsageError(f"--batch-size {batch} does not split into {micro} equal micro-batches (--micro-batches)")
    if schedule == "1f1b" and micro < stages:
        raise UsageError(f"--schedule 1f1b needs at least as many micro-batches as stages: --micro-batches {micro} "
                         f"for {stages} stages")
    rounds = max(1, micro // ranks)
    if schedule == "interleaved-1f1b" and micro % rounds:
        raise UsageError(f"--schedule interleaved-1f1b runs the micro-batches in rounds of {ranks}: "
                         f"--micro-batches {micro} is not a multiple of its {rounds} rounds")
