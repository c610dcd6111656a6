"""The workload flags of the commands that run one (``scale`` and ``trace``).

``add_workload_arguments`` puts the same flags on every command that runs a workload; ``workload_config_from_args``
turns them into a validated ``WorkloadConfig`` or raises ``UsageError`` with a one-line reason, and
``check_workload_args`` refuses what it can before TensorFlow loads to count the GPUs. ``--framework torch`` runs
the RNNLM in PyTorch: ``check_framework_args`` refuses what that path does not support, before torch loads.
"""

from __future__ import annotations

import argparse
import dataclasses

from rnnprof import limits
from rnnprof.commands.flags import dropout_rate, non_negative_int, positive_float, positive_int
from rnnprof.errors import UsageError
from rnnprof.models.data import check_data_path
from rnnprof.training.cluster import read_cluster_spec
from rnnprof.training.torch_layout import DDP_MODES, HYBRID_DIMS, MODE_FLAGS, PARALLEL_MODES, SCHEDULES, plan_layout
from rnnprof.models.config import (ALL_REDUCES, ATTENTIONS, BATCH_SCALINGS, DIRECTIONS, ENCODERS, FAKE_LOCATIONS,
                              FRAMEWORKS, IMAGE_MODELS, MODELS, MOMENTUM, OPTIMIZERS, PARAMETER_DEVICES, PLANTS,
                              PRESETS, PS_PLACEMENTS, TORCH_ADAM_LEARNING_RATE, TORCH_BUCKET_CAP_MB, TORCH_MODELS,
                              TORCH_ONLY_MODELS, TRANSFORMER_HEADS, VARIABLE_UPDATES, TorchOptions, WorkloadConfig, model_defaults,
                              validate, validate_without_gpus)


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
    _parallel_flags(add, parser.add_argument_group("PyTorch parallelism (--framework torch --parallel)"), sweep)
    devices = parser.add_argument_group("devices and variable updates")
    _device_flags(add, devices, sweep)
    _cluster_flags(add, parser.add_argument_group("TensorFlow gRPC cluster (one process per task)"), sweep)
    _update_flags(add, devices)
    _timing_flags(add, parser.add_argument_group("timing"))
    return actions


def _model_flags(add, g) -> None:
    """The framework, the model and its sizes."""
    add(g, "--framework", choices=FRAMEWORKS, default="tensorflow",
        help="tensorflow: graph-mode towers in one process; torch: the RNNLM or the Transformer LM in PyTorch, "
             "one process per device (DistributedDataParallel, or as --parallel says) (default: %(default)s)")
    add(g, "--model", choices=MODELS, default="nmt",
        help="nmt: seq2seq translation; rnnlm: LSTM language model; resnet50, resnet18: image classification "
             "on synthetic images; transformer: a decoder-only Transformer LM (--framework torch) "
             "(default: %(default)s)")
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
    add(p, "--heads", type=positive_int, default=None,
        help=f"attention heads of --model transformer (default: {TRANSFORMER_HEADS})")


def _parallel_flags(add, p, sweep: bool) -> None:
    """How the ranks of a --framework torch run split the model (``training.torch_layout``)."""
    modes = ", ".join(PARALLEL_MODES)
    add(p, "--parallel", default=None, **({} if sweep else {"choices": PARALLEL_MODES}),
        help=(f"comma-separated modes, each a table: {modes}" if sweep else f"one of {modes}") +
             "; ddp replicates (DistributedDataParallel), fsdp shards each block and the root (fully_shard), hsdp "
             "shards within a group and replicates across groups, tp slices every attention and MLP projection "
             "(parallelize_module), pp splits the blocks into pipeline stages (torch.distributed.pipelining); the "
             "LSTM LM runs ddp, fsdp and hsdp (default: ddp)")
    add(p, "--mesh", type=mesh_shape, default=None, metavar="AxB",
        help="the 2-D mesh of " + ", ".join(f"{mode} ({' x '.join(dims)})" for mode, dims in HYBRID_DIMS.items())
             + ", outer x inner (the inner dimension's ranks are neighbours) (default: 2 x devices/2)")
    add(p, "--no-reshard-after-forward", dest="reshard_after_forward", action="store_false", default=True,
        help="FSDP: keep each block's gathered parameters from its forward to its backward instead of gathering "
             "them again (fully_shard's reshard_after_forward=False)")
    add(p, "--forward-prefetch", type=non_negative_int, default=None, metavar="N",
        help="FSDP: each block's forward issues the all-gathers of the next N blocks "
             "(set_modules_to_forward_prefetch) (default: 0, each block gathers as its forward begins)")
    add(p, "--backward-prefetch", type=non_negative_int, default=None, metavar="N",
        help="FSDP: each block's backward issues the all-gathers of the N blocks before it "
             "(set_modules_to_backward_prefetch) (default: 0, fully_shard's own: the next block's)")
    add(p, "--unshard-async", action="store_true", default=False,
        help="FSDP: each block's all-gather issued asynchronously and waited for where the block needs it "
             "(FSDPModule._set_unshard_async_op): on CPU ranks, where FSDP2 has no all-gather stream, a prefetched "
             "all-gather then runs beside the block before instead of being waited for at once")
    add(p, "--micro-batches", type=positive_int, default=None, metavar="M",
        help="pipelines: micro-batches each batch is cut into (default: 4, or the number of stages if more)")
    add(p, "--schedule", choices=SCHEDULES, default=None,
        help="pipelines: torch's ScheduleGPipe, Schedule1F1B or ScheduleInterleaved1F1B (default: 1f1b)")
    add(p, "--stages-per-rank", type=positive_int, default=None, metavar="N",
        help="pipelines, --schedule interleaved-1f1b: stages on each rank, placed round-robin (default: 2)")
    add(p, "--stage-layers", type=stage_layers, default=None, metavar="N,N,...",
        help="pipelines: the blocks of each stage, in stage order, adding up to --layers, e.g. 3,1 (default: as "
             "even as possible, earlier stages taking the remainder)")


def mesh_shape(text: str) -> tuple[int, int]:
    """``--mesh``: ``AxB``, two whole numbers of at least 1."""
    parts = text.lower().split("x")
    try:
        shape = tuple(int(part) for part in parts)
    except ValueError:
        shape = ()
    if len(shape) != 2 or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"expected two whole numbers as AxB (2x2), got {text!r}")
    return shape


def stage_layers(text: str) -> tuple[int, ...]:
    """``--stage-layers``: comma-separated whole numbers."""
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers (3,1), got {text!r}") from None


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


def workload_config_from_args(args: argparse.Namespace, gpus_available: int | None = None,
                              **overrides) -> WorkloadConfig:
    """Build and validate a config from parsed flags; ``overrides`` replace single values."""
    config = _config_from_args(args, gpus_available, overrides)
    validate(config, gpus_available)
    return config


def check_workload_args(args: argparse.Namespace, **overrides) -> None:
    """Refuse what is wrong whatever GPUs the machine has (bad combinations, a missing ``--data`` file, a
    ``--parallel`` layout that cannot work), so a bad flag is refused before TensorFlow or torch loads."""
    check_framework_args(args, **overrides)
    config = _config_from_args(args, None, overrides)
    validate_without_gpus(config)
    if config.data is not None:
        check_data_path(config.data)
    if getattr(args, "framework", "tensorflow") == "torch":
        torch_options_from_args(args, None, **overrides)


def _config_from_args(args: argparse.Namespace, gpus_available: int | None, overrides: dict) -> WorkloadConfig:
    values = {}
    for f in dataclasses.fields(WorkloadConfig):
        if hasattr(args, f.name):
            values[f.name] = getattr(args, f.name)
    values.update({k: v for k, v in overrides.items() if k != "parallel"})
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



# Flags the PyTorch path does not support, with the value that means "not given".
_TENSORFLOW_ONLY = {"encoder": None, "direction": "uni", "attention": "none", "tgt_max_len": None,
                    "all_reduce": None, "local_parameter_device": "cpu", "gradient_repacking": 0,
                    "inter_op_threads": 0, "request_gpu": False, "plant": None, "workers": None,
                    "ps_tasks": None, "cluster_spec": None, "ps_placement": None}
_TORCH_ONLY = {"tied": False, "dropout": None, "clip_norm": None, "bucket_cap_mb": None, "eval": False,
               "heads": None, "parallel": None, "mesh": None, "reshard_after_forward": True,
               "forward_prefetch": None, "backward_prefetch": None, "unshard_async": False, "micro_batches": None, "schedule": None,
               "stages_per_rank": None, "stage_layers": None}


def _flag(dest: str) -> str:
    if dest == "reshard_after_forward":
        return "--no-reshard-after-forward"
    return "--" + dest.replace("_", "-")


def check_framework_args(args: argparse.Namespace, **overrides) -> None:
    """Refuse, before anything heavy loads, what the chosen ``--framework`` does not support."""
    framework = getattr(args, "framework", "tensorflow")
    model = overrides.get("model", getattr(args, "model", "nmt"))
    if framework != "torch":
        for dest, unset in _TORCH_ONLY.items():
            if getattr(args, dest, unset) != unset:
                raise UsageError(f"{_flag(dest)} applies to --framework torch")
        if model in TORCH_ONLY_MODELS:
            raise UsageError(f"--model {model} applies to --framework torch")
        return
    if model not in TORCH_MODELS:
        raise UsageError(f"--framework torch runs --model {' or '.join(TORCH_MODELS)}, got --model {model}")
    for dest, unset in _TENSORFLOW_ONLY.items():
        if getattr(args, dest, unset) != unset:
            raise UsageError(f"{_flag(dest)} applies to --framework tensorflow, not torch")
    update = overrides.get("variable_update", getattr(args, "variable_update", "replicated"))
    if update == "parameter_server":
        raise UsageError("--variable-update parameter_server applies to --framework tensorflow; torch runs "
                         "replicated (DistributedDataParallel) or independent")


def torch_options_from_args(args: argparse.Namespace, gpus_available: int | None = None,
                            **overrides) -> TorchOptions:
    """The ``TorchOptions`` of parsed flags (``check_framework_args`` has passed; ``overrides["parallel"]``: the
    mode of one configuration of a sweep), their ``--parallel`` layout checked (``plan_layout``)."""
    workload = workload_config_from_args(args, gpus_available, **overrides)
    dropout = args.dropout if args.dropout is not None else (0.5 if workload.preset == "rnn_benchmark" else 0.0)
    embedding = workload.embedding or workload.units
    if args.tied and embedding != workload.units:
        raise UsageError(f"--tied needs the embedding ({embedding}) as wide as --units ({workload.units})")
    if getattr(args, "heads", None) is not None and workload.model != "transformer":
        raise UsageError("--heads applies to --model transformer")
    parallel = overrides.get("parallel") or getattr(args, "parallel", None) or "ddp"
    values = _parallel_options(args, parallel, sweep=bool(overrides.get("_sweep")))
    if values.pop("bucket_cap_mb") is not None and parallel not in DDP_MODES:
        raise UsageError(f"--bucket-cap-mb sizes DistributedDataParallel's buckets: it applies to --parallel "
                         f"{' or '.join(DDP_MODES)}, not {parallel}")
    options = TorchOptions(workload=workload, tied=args.tied, dropout=dropout, clip_norm=args.clip_norm,
                           bucket_cap_mb=args.bucket_cap_mb or TORCH_BUCKET_CAP_MB, eval=args.eval,
                           heads=getattr(args, "heads", None) or TRANSFORMER_HEADS, **values)
    plan_layout(options)
    return options


def _parallel_options(args: argparse.Namespace, parallel: str, sweep: bool) -> dict:
    """``TorchOptions``' --parallel fields from parsed flags (None, or True, where not given), and whether
    ``--bucket-cap-mb`` was given; in a ``sweep`` of several modes, a flag that ``parallel`` does not read is left
    unset for it (``check_sweep_flags`` refuses one that no swept mode reads)."""
    values = {dest: getattr(args, dest, _TORCH_ONLY[dest]) for dest in MODE_FLAGS}
    if sweep:
        values.update({dest: _TORCH_ONLY[dest] for dest, modes in MODE_FLAGS.items() if parallel not in modes})
    return dict(parallel=parallel, **values)


def check_sweep_flags(args: argparse.Namespace, modes: list[str]) -> None:
    """Refuse a flag of some modes (``MODE_FLAGS``) that none of a sweep's ``--parallel`` modes reads."""
    for dest, readers in MODE_FLAGS.items():
        if getattr(args, dest, _TORCH_ONLY[dest]) != _TORCH_ONLY[dest] and not set(modes) & set(readers):
            raise UsageError(f"{_flag(dest)} applies to --parallel {', '.join(readers)}; none of the swept modes "
                             f"({', '.join(modes)}) reads it")
