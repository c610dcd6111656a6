"""A workload's configuration: the model, its sizes, the devices and the updates (``WorkloadConfig``), what
``--framework torch`` adds (``TorchOptions``), the model-dependent defaults and the checks of combinations that
cannot work. The models, the training code and the commands' flags all read it; it imports nothing of theirs."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from rnnprof.errors import UsageError

FRAMEWORKS = ("tensorflow", "torch")
MODELS = ("nmt", "rnnlm", "resnet50", "resnet18", "transformer")
IMAGE_MODELS = ("resnet50", "resnet18")  # throughput in images/s
TORCH_MODELS = ("rnnlm", "transformer")  # what --framework torch trains
TORCH_ONLY_MODELS = ("transformer",)
ENCODERS = ("loop", "fused")
DIRECTIONS = ("uni", "bi")
ATTENTIONS = ("none", "luong", "bahdanau")
OPTIMIZERS = ("sgd", "momentum", "adam")
MOMENTUM = 0.9  # --optimizer momentum, as tf_cnn_benchmarks
VARIABLE_UPDATES = ("independent", "parameter_server", "replicated")
ALL_REDUCES = ("nccl", "ring", "hierarchical", "pscpu")
PARAMETER_DEVICES = ("cpu", "gpu")
BATCH_SCALINGS = ("per-device", "total")
RNNLM_PRESETS = ("rnn_benchmark", "small")
PRESETS = RNNLM_PRESETS  # small: every model; rnn_benchmark: the RNNLM
FAKE_LOCATIONS = ("device", "cpu", "python")  # where a ResNet's synthetic images are made
# Planted mishaps (``--plant``), for the diagnosis benchmark and the audits to find: softmax-on-device0 (RNNLM,
# ``models.tensorflow.rnnlm``); few-inter-op-threads and updates-on-device0 (every TensorFlow workload,
# ``profiler.run.runner``).
SOFTMAX_ON_DEVICE0 = "softmax-on-device0"
FEW_INTER_OP_THREADS = "few-inter-op-threads"  # the session runs with inter_op_parallelism_threads=1
UPDATES_ON_DEVICE0 = "updates-on-device0"  # every tower's variables, so their updates, on device 0
PLANTS = (SOFTMAX_ON_DEVICE0, FEW_INTER_OP_THREADS, UPDATES_ON_DEVICE0)
# greedy: each variable to the ps task holding the fewest bytes so far (tf_cnn_benchmarks' greedy
# load balancing); first: every variable on ps task 0 (a deliberate imbalance, for testing the audit).
PS_PLACEMENTS = ("greedy", "first")


@dataclass(frozen=True)
class WorkloadConfig:
    model: str = "nmt"
    encoder: str = "fused"
    direction: str = "uni"
    layers: int = 4
    units: int = 512
    attention: str = "none"
    src_max_len: int = 50
    tgt_max_len: int = 50
    vocab_size: int = 8000
    embedding: int | None = None  # defaults to units
    optimizer: str = "sgd"
    learning_rate: float = 0.5
    preset: str | None = None  # rnnlm only
    data: str | None = None  # a tokenized text file; None uses the bundled corpus / synthetic ids
    devices: int = 2
    variable_update: str = "replicated"
    all_reduce: str = "ring"
    local_parameter_device: str = "cpu"
    gradient_repacking: int = 0
    batch_size: int = 64
    batch_scaling: str = "per-device"
    inter_op_threads: int = 0  # 0 lets TF choose
    intra_op_threads: int = 0
    warmup: int = 10
    batches: int = 20
    include_warmup: bool = False
    seed: int = 1
    plant: str | None = None  # diagnostic mishaps, see PLANTS
    soft_placement: bool = True
    request_gpu: bool = False  # ask for GPU devices even without one (soft placement then falls back)
    workers: int | None = None  # worker tasks of a TensorFlow gRPC cluster; None: every tower in this process
    ps_tasks: int = 0  # parameter server tasks of the cluster
    cluster_spec: str | None = None  # a cluster spec file of tasks started with ``rnnprof worker``
    ps_placement: str = "greedy"  # how variables spread over ps tasks, see PS_PLACEMENTS
    fake_location: str | None = None  # ResNet: where the synthetic images are made (FAKE_LOCATIONS; None: device)

    def replace(self, **changes) -> "WorkloadConfig":
        return dataclasses.replace(self, **changes)

    @property
    def towers(self) -> int:
        """Towers of the whole run: ``devices`` on each worker task."""
        return self.devices * (self.workers or 1)

    def per_device_batch(self) -> int:
        """Examples each tower processes per step."""
        if self.batch_scaling == "total":
            return max(1, self.batch_size // self.towers)
        return self.batch_size

    def total_batch(self) -> int:
        return self.per_device_batch() * self.towers

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


TORCH_ADAM_LEARNING_RATE = 2e-4  # rnn_benchmark's PyTorch default
TRANSFORMER_HEADS = 4
TORCH_BUCKET_CAP_MB = 25.0  # DistributedDataParallel's default


@dataclass(frozen=True)
class TorchOptions:
    """What ``--framework torch`` adds to a ``WorkloadConfig``; how the ranks split the model:
    ``rnnprof.parallel_layout`` (``parallel`` and the fields after it)."""

    workload: WorkloadConfig
    tied: bool = False  # the output projection shares the embedding table
    dropout: float = 0.0  # on the embedding output, between LSTM layers and on the LSTM output
    clip_norm: float | None = None  # clip the gradients' global norm; None: no clipping
    bucket_cap_mb: float = TORCH_BUCKET_CAP_MB
    eval: bool = False  # also time forward-only evaluation batches
    heads: int = TRANSFORMER_HEADS  # attention heads of the Transformer LM
    parallel: str = "ddp"  # see PARALLEL_MODES
    mesh: tuple[int, int] | None = None  # a hybrid mode's 2-D mesh (outer, inner); None: (2, ranks / 2)
    micro_batches: int | None = None  # pipelines: None is max(4, stages)
    schedule: str | None = None  # pipelines: see SCHEDULES; None is 1f1b
    stages_per_rank: int | None = None  # pipelines: None is 2 for interleaved-1f1b, else 1
    stage_layers: tuple[int, ...] | None = None  # pipelines: the blocks of each stage in order; None: even
    reshard_after_forward: bool = True  # FSDP: free each block's gathered parameters after its forward
    forward_prefetch: int | None = None  # FSDP: blocks whose all-gathers each block's forward issues (None: 0, none)
    backward_prefetch: int | None = None  # FSDP: the same in backward (None: 0, fully_shard's own: the next block)
    unshard_async: bool = False  # FSDP: each all-gather issued with async_op (waited for where its block needs it)

    def replace(self, **changes) -> "TorchOptions":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        values = self.workload.to_dict()
        values["framework"] = "torch"
        values.update({f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "workload"})
        return values

def model_defaults(model: str, preset: str | None) -> dict:
    """Defaults that depend on the model and preset."""
    if model in IMAGE_MODELS:
        return dict(batch_size=8 if preset == "small" else 64, learning_rate=0.1)
    if model == "transformer":
        return dict(layers=4, units=128, src_max_len=32, batch_size=16, vocab_size=2000, learning_rate=0.1)
    if model == "rnnlm":
        if preset == "rnn_benchmark":
            return dict(layers=1, units=1024, embedding=1024, src_max_len=128, tgt_max_len=128,
                        batch_size=128, vocab_size=10000, learning_rate=0.2)  # plain SGD at 1.0 diverges here
        return dict(layers=2, units=128, embedding=128, src_max_len=20, tgt_max_len=20,
                    batch_size=32, vocab_size=2000, learning_rate=1.0)
    return dict(encoder="fused", layers=4, units=512, src_max_len=50, tgt_max_len=50,
                batch_size=64, vocab_size=8000, learning_rate=0.5)


def validate(config: WorkloadConfig, gpus_available: int | None = None) -> None:
    """Raise ``UsageError`` for combinations that cannot work with ``gpus_available`` GPUs."""
    validate_without_gpus(config)
    if config.variable_update == "replicated" and config.all_reduce == "nccl" and not gpus_available:
        raise UsageError("--all-reduce nccl needs GPUs and none is visible; use ring, hierarchical or pscpu")
    if config.local_parameter_device == "gpu" and config.variable_update == "parameter_server" and not gpus_available:
        raise UsageError("--local-parameter-device gpu needs a GPU and none is visible; use cpu")


def validate_without_gpus(config: WorkloadConfig) -> None:
    """Raise ``UsageError`` for combinations that cannot work on any machine."""
    if config.devices < 1:
        raise UsageError(f"--devices must be at least 1, got {config.devices}")
    if not 0 < config.learning_rate < float("inf"):  # also refuses nan
        raise UsageError(f"--learning-rate must be a positive number, got {config.learning_rate}")
    if config.model == "nmt" and config.attention != "none" and config.encoder == "fused":
        raise UsageError("--attention needs the loop decoder; use --encoder loop or --attention none")
    if config.plant == SOFTMAX_ON_DEVICE0 and config.model != "rnnlm":
        raise UsageError(f"--plant {config.plant} applies to --model rnnlm")
    if config.plant in (FEW_INTER_OP_THREADS, UPDATES_ON_DEVICE0) and config.devices < 2:
        raise UsageError(f"--plant {config.plant} needs several devices; got --devices {config.devices}")
    if config.plant == FEW_INTER_OP_THREADS and (config.inter_op_threads or config.workers):
        raise UsageError(f"--plant {config.plant} sets the session's inter-op threads itself; it runs without "
                         "--inter-op-threads and --workers")
    if config.plant == UPDATES_ON_DEVICE0 and config.variable_update not in ("replicated", "independent"):
        raise UsageError(f"--plant {config.plant} applies to --variable-update replicated or independent "
                         f"(parameter_server updates on the parameter device by design)")
    if config.preset == "rnn_benchmark" and config.model != "rnnlm":
        raise UsageError("--preset rnn_benchmark applies to --model rnnlm")
    if config.preset and config.model in ("nmt", "transformer"):
        raise UsageError("--preset applies to --model rnnlm and the ResNets")
    if config.fake_location is not None and config.model not in IMAGE_MODELS:
        raise UsageError(f"--fake-location applies to the ResNets (--model {' or '.join(IMAGE_MODELS)})")
    if config.batch_scaling == "total" and config.batch_size < config.towers:
        towers = f"--devices {config.devices}" if not config.workers else \
            f"the {config.towers} towers (--workers {config.workers} x --devices {config.devices})"
        raise UsageError(f"--batch-size {config.batch_size} with --batch-scaling total is smaller than {towers}")
