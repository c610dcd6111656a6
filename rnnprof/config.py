"""The workload configuration shared by ``rnnprof scale`` and ``rnnprof trace``.

``add_workload_arguments`` puts the same flags on every command that runs a
workload; ``workload_config_from_args`` turns them into a validated
``WorkloadConfig`` or raises ``UsageError`` with a one-line reason, and
``check_workload_args`` refuses what it can before TensorFlow loads to count the GPUs.
``--framework torch`` runs the RNNLM in PyTorch: its own flags live in ``TorchOptions`` (beside the
``WorkloadConfig``), and ``check_framework_args`` refuses what that path does not support, before torch loads.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass

from rnnprof.errors import UsageError
from rnnprof import limits

FRAMEWORKS = ("tensorflow", "torch")
MODELS = ("nmt", "rnnlm", "resnet50", "resnet18")
IMAGE_MODELS = ("resnet50", "resnet18")  # throughput in images/s
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
TORCH_BUCKET_CAP_MB = 25.0  # DistributedDataParallel's default


@dataclass(frozen=True)
class TorchOptions:
    """What ``--framework torch`` adds to a ``WorkloadConfig``."""

    workload: WorkloadConfig
    tied: bool = False  # the output projection shares the embedding table
    dropout: float = 0.0  # on the embedding output, between LSTM layers and on the LSTM output
    clip_norm: float | None = None  # clip the gradients' global norm; None: no clipping
    bucket_cap_mb: float = TORCH_BUCKET_CAP_MB
    eval: bool = False  # also time forward-only evaluation batches

    def replace(self, **changes) -> "TorchOptions":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        values = self.workload.to_dict()
        values["framework"] = "torch"
        values.update({f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "workload"})
        return values


def _number_in(minimum, maximum=None, kind=int, what="a whole number"):
    """An argparse type: ``kind`` parsed from text, refused outside [minimum, maximum] or not finite."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        if value < minimum or (maximum is not None and value > maximum):
            bound = f"between {minimum} and {maximum}" if maximum is not None else f"of at least {minimum}"
            raise argparse.ArgumentTypeError(f"expected a number {bound}, got {value}")
        return value

    return parse


positive_int = _number_in(1)
non_negative_int = _number_in(0)
non_negative_seconds = _number_in(0, kind=float, what="a number of seconds")
non_negative_us = _number_in(0, kind=float, what="a number of microseconds")
percentage = _number_in(0, 100, kind=float, what="a percentage")
positive_float = _number_in(1e-12, kind=float, what="a positive number")
dropout_rate = _number_in(0, 0.99, kind=float, what="a dropout rate")


def _per_model(key: str) -> str:
    """The default of a flag whose default depends on the model and preset, from ``model_defaults``."""
    nmt, rnnlm = model_defaults("nmt", None)[key], model_defaults("rnnlm", None)[key]
    benchmark = model_defaults("rnnlm", "rnn_benchmark")[key]
    return f"(default: {nmt:g} for nmt, {rnnlm:g} for rnnlm, {benchmark:g} with --preset rnn_benchmark)"


def add_workload_arguments(parser: argparse.ArgumentParser, sweep: bool = False) -> list[argparse.Action]:
    """Workload flags; returns their actions.

    With ``sweep``, ``--devices``, ``--variable-update``, ``--workers`` and ``--fake-location`` take comma lists."""
    actions = []

    def add(group, *flags, **kwargs):
        actions.append(group.add_argument(*flags, **kwargs))

    workload = parser.add_argument_group("workload")
    _model_flags(add, workload)
    _training_flags(add, workload, actions)
    _fake_location_flag(add, workload, sweep)
    _plant_and_seed_flags(add, workload)
    _torch_flags(add, parser.add_argument_group("PyTorch (--framework torch)"))
    devices = parser.add_argument_group("devices and variable updates")
    _device_flags(add, devices, sweep)
    _cluster_flags(add, parser.add_argument_group("TensorFlow gRPC cluster (one process per task)"), sweep)
    _update_flags(add, devices)
    _timing_flags(add, parser.add_argument_group("timing"))
    return actions


def _model_flags(add, g) -> None:
    """The framework, the model and its sizes."""
    add(g, "--framework", choices=FRAMEWORKS, default="tensorflow",
        help="tensorflow: graph-mode towers in one process; torch: the RNNLM in PyTorch, one process per "
             "device with DistributedDataParallel (default: %(default)s)")
    add(g, "--model", choices=MODELS, default="nmt",
        help="nmt: seq2seq translation; rnnlm: LSTM language model; resnet50, resnet18: image classification "
             "on synthetic images (default: %(default)s)")
    add(g, "--encoder", choices=ENCODERS, default=None,
        help="loop: LSTM cells from raw ops in tf.while_loop; fused: one sequence op per "
             "layer (BlockLSTM on CPU, CudnnRNN on GPU) (default: fused)")
    add(g, "--direction", choices=DIRECTIONS, default="uni",
        help="bi: a bidirectional first encoder layer (NMT) (default: %(default)s)")
    add(g, "--layers", type=positive_int, default=None,
        help=f"LSTM layers (NMT: of the encoder and of the decoder) {_per_model('layers')}")
    add(g, "--units", type=positive_int, default=None, help=f"LSTM units {_per_model('units')}")
    add(g, "--attention", choices=ATTENTIONS, default="none",
        help="decoder attention (NMT; luong and bahdanau need --encoder loop) (default: %(default)s)")
    add(g, "--src-max-len", type=positive_int, default=None,
        help=f"longest source sentence in tokens (NMT), sequence length (RNNLM) {_per_model('src_max_len')}")
    add(g, "--tgt-max-len", type=positive_int, default=None,
        help=f"longest target sentence in tokens (NMT) (default: {model_defaults('nmt', None)['tgt_max_len']})")
    add(g, "--vocab-size", type=positive_int, default=None, help=f"words in the vocabulary {_per_model('vocab_size')}")


def _training_flags(add, g, actions: list) -> None:
    """The optimizer, the sizes' presets and the training data (``actions`` gets the limit on reading it)."""
    add(g, "--optimizer", choices=OPTIMIZERS, default=None,
        help=f"the optimizer of every tower; momentum is SGD with momentum {MOMENTUM:g} (default: sgd; momentum "
             f"for the ResNets; adam with --framework torch)")
    add(g, "--learning-rate", type=float, default=None,
        help=f"the optimizer's learning rate {_per_model('learning_rate')[:-1]}; "
             f"{TORCH_ADAM_LEARNING_RATE:g} with --framework torch and adam)")
    add(g, "--preset", choices=PRESETS, default=None,
        help="RNNLM sizes: rnn_benchmark (1 layer of 1024 units, 128 steps, batch 128) or small "
             "(default: small's sizes); ResNet sizes: small (32x32 images, 10 classes, 1/8 of the width, "
             "batch 8) (default: 224x224 images, 1000 classes, batch 64)")
    add(g, "--data", default=None,
        help="a tokenized text file (one sentence a line) (default: the bundled corpus for rnnlm, synthetic "
             "sentences for nmt)")
    actions.append(limits.add_argument(g))  # applies to --data


def _fake_location_flag(add, g, sweep: bool) -> None:
    """Where a ResNet's synthetic images are made (with ``sweep``, a comma list)."""
    if sweep:
        add(g, "--fake-location", default=None,
            help="ResNet: comma-separated places where synthetic images are made: device (a batch kept on each "
                 "device), cpu (a TF op on the host every step), python (numpy through a prefetching tf.data "
                 "pipeline) (default: device)")
    else:
        add(g, "--fake-location", choices=FAKE_LOCATIONS, default=None,
            help="ResNet: where synthetic images are made: device (a batch kept on each device), cpu (a TF op "
                 "on the host every step), python (numpy through a prefetching tf.data pipeline) "
                 "(default: device)")


def _plant_and_seed_flags(add, g) -> None:
    """The planted mishap, if any, and the seed."""
    add(g, "--plant", choices=PLANTS, default=None,
        help="opt-in demo of a placement mishap (or a starved thread pool) for the audits to find: "
             "softmax-on-device0 pins every tower's softmax to "
             "device 0 (RNNLM); few-inter-op-threads runs the session with one inter-op thread (one op at a time) "
             "over several devices; updates-on-device0 keeps every tower's variables, so all parameter updates, "
             "on device 0 (replicated or independent) (default: none)")
    add(g, "--seed", type=int, default=1, help="seed of the initial weights and the batches (default: %(default)s)")


def _torch_flags(add, p) -> None:
    add(p, "--tied", action="store_true", help="the output projection shares the embedding table "
        "(needs the embedding as wide as --units)")
    add(p, "--dropout", type=dropout_rate, default=None,
        help="dropout on the embedding output, between LSTM layers and on the LSTM output "
             "(default: 0.5 with --preset rnn_benchmark, else 0)")
    add(p, "--clip-norm", type=positive_float, default=None,
        help="clip the gradients to this global norm before each update (default: no clipping)")
    add(p, "--bucket-cap-mb", type=positive_float, default=None,
        help=f"DistributedDataParallel's gradient bucket size in MB (default: {TORCH_BUCKET_CAP_MB:g})")
    add(p, "--eval", action="store_true",
        help="after the timed training batches, time as many forward-only batches (no gradients)")


def _device_flags(add, r, sweep: bool) -> None:
    if sweep:
        add(r, "--devices", default="1,2,4", help="comma-separated device counts (default: %(default)s)")
        add(r, "--variable-update", default="replicated",
            help="comma-separated: " + ", ".join(VARIABLE_UPDATES) + " (default: %(default)s)")
    else:
        add(r, "--devices", type=positive_int, default=2, help="towers, one per device (default: %(default)s)")
        add(r, "--variable-update", choices=VARIABLE_UPDATES, default="replicated",
            help="how towers share variables (default: %(default)s)")


def _cluster_flags(add, c, sweep: bool) -> None:
    if sweep:
        add(c, "--workers", default=None,
            help="comma-separated worker task counts: each run starts a localhost cluster of that many "
                 "worker processes (tf.distribute.Server), --devices on each (default: no cluster)")
    else:
        add(c, "--workers", type=positive_int, default=None,
            help="worker tasks: start a localhost cluster of that many worker processes "
                 "(tf.distribute.Server), --devices on each (default: no cluster, every tower in this process)")
    add(c, "--ps-tasks", type=non_negative_int, default=None,
        help="parameter server tasks holding the variables of parameter_server runs, spread over them by "
             "size (default: 1 with --workers)")
    add(c, "--cluster-spec", metavar="FILE", default=None,
        help='run on the tasks of a JSON cluster spec ({"worker": ["host:port", ...], "ps": [...]}) '
             "started with `rnnprof worker`, instead of a localhost cluster")
    add(c, "--ps-placement", choices=PS_PLACEMENTS, default=None, help=argparse.SUPPRESS)


def _update_flags(add, r) -> None:
    add(r, "--all-reduce", choices=ALL_REDUCES, default=None,
        help="gradient all-reduce for replicated mode (default: nccl on GPUs, ring on CPU)")
    add(r, "--local-parameter-device", choices=PARAMETER_DEVICES, default="cpu",
        help="where parameter_server mode keeps the shared variables (default: %(default)s)")
    add(r, "--gradient-repacking", type=non_negative_int, default=0,
        help="pack gradients into N chunks before all-reduce; 0: one all-reduce per variable (default: %(default)s)")
    add(r, "--batch-size", type=positive_int, default=None,
        help=f"per device, or total with --batch-scaling total {_per_model('batch_size')}")
    add(r, "--batch-scaling", choices=BATCH_SCALINGS, default="per-device",
        help="per-device: every tower gets --batch-size; total: --batch-size is split over the towers "
             "(default: %(default)s)")
    add(r, "--inter-op-threads", type=non_negative_int, default=0,
        help="threads running independent ops; 0 lets TensorFlow choose (default: %(default)s)")
    add(r, "--intra-op-threads", type=non_negative_int, default=0,
        help="threads inside one op; 0 lets TensorFlow choose, or with --framework torch splits the cores "
             "over the processes (default: %(default)s)")
    add(r, "--request-gpu", action="store_true",
        help="place towers on GPUs even when none is visible (soft placement falls back to CPU)")


def _timing_flags(add, t) -> None:
    add(t, "--warmup", type=non_negative_int, default=10,
        help="batches run before timing starts (default: %(default)s)")
    add(t, "--batches", type=positive_int, default=20, help="timed batches (default: %(default)s)")
    add(t, "--include-warmup", action="store_true",
        help="also report the biased figure that includes the warm-up batches")


def parse_int_list(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{flag} takes comma-separated whole numbers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise UsageError(f"{flag} takes device counts of at least 1, got {text!r}")
    return values


def parse_choice_list(text: str, flag: str, choices: tuple[str, ...]) -> list[str]:
    values = [v.strip() for v in str(text).split(",") if v.strip()]
    bad = [v for v in values if v not in choices]
    if not values or bad:
        raise UsageError(f"{flag}: unknown value {', '.join(bad) or repr(text)} (expected one of {', '.join(choices)})")
    return values


def workload_config_from_args(args: argparse.Namespace, gpus_available: int | None = None,
                              **overrides) -> WorkloadConfig:
    """Build and validate a config from parsed flags; ``overrides`` replace single values."""
    config = _config_from_args(args, gpus_available, overrides)
    validate(config, gpus_available)
    return config


def check_workload_args(args: argparse.Namespace, **overrides) -> None:
    """Refuse what is wrong whatever GPUs the machine has (bad combinations, a missing ``--data`` file),
    so a bad flag is refused before TensorFlow loads to count the GPUs."""
    check_framework_args(args, **overrides)
    config = _config_from_args(args, None, overrides)
    validate_without_gpus(config)
    if config.data is not None:
        from rnnprof.models.data import check_data_path

        check_data_path(config.data)


def _config_from_args(args: argparse.Namespace, gpus_available: int | None, overrides: dict) -> WorkloadConfig:
    values = {}
    for f in dataclasses.fields(WorkloadConfig):
        if hasattr(args, f.name):
            values[f.name] = getattr(args, f.name)
    values.update(overrides)
    values = {k: v for k, v in values.items() if v is not None}
    if getattr(args, "framework", "tensorflow") == "torch":
        values.setdefault("optimizer", "adam")
        if values["optimizer"] == "adam":
            values.setdefault("learning_rate", TORCH_ADAM_LEARNING_RATE)
    values.setdefault("optimizer", "momentum" if values.get("model") in IMAGE_MODELS else "sgd")
    _cluster_values(values)
    preset_defaults = model_defaults(values.get("model", "nmt"), values.get("preset"))
    for key, value in preset_defaults.items():
        values.setdefault(key, value)
    if "all_reduce" not in values:
        values["all_reduce"] = "nccl" if gpus_available else "ring"
    return WorkloadConfig(**values)


def _cluster_values(values: dict) -> None:
    """``workers`` and ``ps_tasks`` from ``--cluster-spec``, or ``--ps-tasks``' default with ``--workers``."""
    spec_path = values.get("cluster_spec")
    if spec_path is not None:
        for dest in ("workers", "ps_tasks"):
            if dest in values:
                raise UsageError(f"{_flag(dest)} and --cluster-spec cannot be combined: the spec lists the tasks")
        from rnnprof.training.cluster import read_cluster_spec

        spec = read_cluster_spec(spec_path)
        values["workers"], values["ps_tasks"] = spec.workers, spec.ps_tasks
    elif values.get("workers") is None:
        if values.get("ps_tasks"):
            raise UsageError("--ps-tasks needs a cluster: give --workers N or --cluster-spec FILE")
        values.pop("ps_tasks", None)
    elif values.get("variable_update", "replicated") != "parameter_server":
        if values.get("ps_tasks") and not values.pop("_sweep", False):
            raise UsageError("--ps-tasks applies to --variable-update parameter_server")
        values["ps_tasks"] = 0
    else:
        values.setdefault("ps_tasks", 1)
    values.pop("_sweep", None)
    if values.get("ps_placement") and not values.get("ps_tasks"):
        raise UsageError("--ps-placement needs parameter server tasks (--ps-tasks)")


def model_defaults(model: str, preset: str | None) -> dict:
    """Defaults that depend on the model and preset."""
    if model in IMAGE_MODELS:
        return dict(batch_size=8 if preset == "small" else 64, learning_rate=0.1)
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
    if config.preset and config.model == "nmt":
        raise UsageError("--preset applies to --model rnnlm and the ResNets")
    if config.fake_location is not None and config.model not in IMAGE_MODELS:
        raise UsageError(f"--fake-location applies to the ResNets (--model {' or '.join(IMAGE_MODELS)})")
    if config.batch_scaling == "total" and config.batch_size < config.towers:
        towers = f"--devices {config.devices}" if not config.workers else \
            f"the {config.towers} towers (--workers {config.workers} x --devices {config.devices})"
        raise UsageError(f"--batch-size {config.batch_size} with --batch-scaling total is smaller than {towers}")


# Flags the PyTorch path does not support, with the value that means "not given".
_TENSORFLOW_ONLY = {"encoder": None, "direction": "uni", "attention": "none", "tgt_max_len": None,
                    "all_reduce": None, "local_parameter_device": "cpu", "gradient_repacking": 0,
                    "inter_op_threads": 0, "request_gpu": False, "plant": None, "workers": None,
                    "ps_tasks": None, "cluster_spec": None, "ps_placement": None}
_TORCH_ONLY = {"tied": False, "dropout": None, "clip_norm": None, "bucket_cap_mb": None, "eval": False}


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def check_framework_args(args: argparse.Namespace, **overrides) -> None:
    """Refuse, before anything heavy loads, what the chosen ``--framework`` does not support."""
    framework = getattr(args, "framework", "tensorflow")
    if framework != "torch":
        for dest, unset in _TORCH_ONLY.items():
            if getattr(args, dest, unset) != unset:
                raise UsageError(f"{_flag(dest)} applies to --framework torch")
        return
    model = overrides.get("model", getattr(args, "model", "nmt"))
    if model != "rnnlm":
        raise UsageError(f"--framework torch runs --model rnnlm only, got --model {model}")
    for dest, unset in _TENSORFLOW_ONLY.items():
        if getattr(args, dest, unset) != unset:
            raise UsageError(f"{_flag(dest)} applies to --framework tensorflow, not torch")
    update = overrides.get("variable_update", getattr(args, "variable_update", "replicated"))
    if update == "parameter_server":
        raise UsageError("--variable-update parameter_server applies to --framework tensorflow; torch runs "
                         "replicated (DistributedDataParallel) or independent")


def torch_options_from_args(args: argparse.Namespace, gpus_available: int | None = None,
                            **overrides) -> TorchOptions:
    """The ``TorchOptions`` of parsed flags (``check_framework_args`` has passed)."""
    workload = workload_config_from_args(args, gpus_available, **overrides)
    dropout = args.dropout if args.dropout is not None else (0.5 if workload.preset == "rnn_benchmark" else 0.0)
    embedding = workload.embedding or workload.units
    if args.tied and embedding != workload.units:
        raise UsageError(f"--tied needs the embedding ({embedding}) as wide as --units ({workload.units})")
    return TorchOptions(workload=workload, tied=args.tied, dropout=dropout, clip_norm=args.clip_norm,
                        bucket_cap_mb=args.bucket_cap_mb or TORCH_BUCKET_CAP_MB, eval=args.eval)
