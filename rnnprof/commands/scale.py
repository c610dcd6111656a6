"""rnnprof scale: train on 1, 2, 4... devices and print the speedup table."""

from __future__ import annotations

import argparse
import os

from rich.console import Console
from rich.text import Text

from rnnprof.config import (FAKE_LOCATIONS, VARIABLE_UPDATES, add_workload_arguments, parse_choice_list,
                            parse_int_list)
from rnnprof.errors import UsageError

NAME = "scale"
HELP = "time training on several device counts (after warm-up) and print words/s (images/s) and speedup"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_workload_arguments(parser, sweep=True)
    parser.add_argument("--trainer", default=None,
                        help="comma-separated: rnnprof (its own towers and exchange), distribute (the same model "
                             "trained by TensorFlow's tf.distribute: MirroredStrategy for replicated, "
                             "CentralStorageStrategy for parameter_server); given, scale prints each trainer's "
                             "throughput side by side (default: rnnprof only, the speedup tables)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout instead of a table")


def run(args: argparse.Namespace, console: Console) -> int:
    from rnnprof.analyzers.scale import shared_cores_note, speedup_table
    from rnnprof.config import check_workload_args
    from rnnprof.reports.layout import render_json
    from rnnprof.reports.scale import render_table, to_document

    device_counts = parse_int_list(args.devices, "--devices")
    modes = parse_choice_list(args.variable_update, "--variable-update", VARIABLE_UPDATES)
    locations = (parse_choice_list(args.fake_location, "--fake-location", FAKE_LOCATIONS)
                 if args.fake_location else [None])
    sweep_points = [dict(devices=n, variable_update=mode, fake_location=location)
                    for mode in modes for location in locations for n in device_counts]
    for point in sweep_points:  # before TensorFlow or torch loads: a bad flag is refused at once
        check_workload_args(args, **point)
    trainers = _trainers(args, modes)

    if args.framework == "torch":
        swept, configs = _torch(args, sweep_points)
    else:
        swept, configs = _tensorflow(args, sweep_points, device_counts, trainers)
    first = getattr(configs[0], "workload", configs[0])

    result = speedup_table(swept.points)
    notes = [n for n in [shared_cores_note(swept.device_kind, os.cpu_count())] if n]
    if args.json:
        base = configs[0].to_dict()
        base["devices"] = device_counts
        base["variable_update"] = modes
        if args.fake_location:
            base["fake_location"] = locations
        unit = getattr(swept, "unit", "words")
        document = to_document(result, config=base, words_definition=swept.words_definition,
                               device_kind=swept.device_kind, notes=notes,
                               step_definition=swept.step_definition, unit=unit)
        if trainers:
            from rnnprof.analyzers.scale import trainer_table
            from rnnprof.profiler.run.distribute import STRATEGIES
            from rnnprof.reports.scale import trainer_document

            base["trainer"] = trainers
            document["trainers"] = trainer_document(trainer_table(swept.points, trainers), trainers, unit,
                                                    STRATEGIES)
        render_json(document, console)
    elif trainers:
        from rnnprof.analyzers.scale import trainer_table
        from rnnprof.profiler.run.distribute import STRATEGIES
        from rnnprof.reports.scale import render_trainer_tables

        render_trainer_tables(trainer_table(swept.points, trainers), trainers, model=swept.model,
                              warmup=first.warmup, batches=first.batches, unit=getattr(swept, "unit", "words"),
                              strategies=STRATEGIES, notes=list(result.notes) + notes, console=console)
    else:
        render_table(result, model=swept.model, words_definition=swept.words_definition, warmup=first.warmup,
                     batches=first.batches, include_warmup=first.include_warmup, notes=notes,
                     console=console, parameter_device=first.local_parameter_device,
                     unit=getattr(swept, "unit", "words"))
    return 0


def _warning_printer(errors: Console):
    return lambda warning: errors.print(Text(f"rnnprof scale: warning: {warning}"))


def _trainers(args: argparse.Namespace, modes: list[str]) -> list[str] | None:
    """The trainers of ``--trainer`` (None when not given), refused before TensorFlow loads."""
    if args.trainer is None:
        return None
    from rnnprof.profiler.run.distribute import TRAINERS, check_trainer

    trainers = list(dict.fromkeys(parse_choice_list(args.trainer, "--trainer", TRAINERS)))
    if args.framework == "torch" and trainers != ["rnnprof"]:
        raise UsageError("--trainer distribute applies to --framework tensorflow")
    for trainer in trainers:
        for mode in modes:
            check_trainer(trainer, mode)
    return trainers


def _tensorflow(args: argparse.Namespace, sweep_points: list[dict], device_counts: list[int],
                trainers: list[str] | None = None):
    from rnnprof.config import workload_config_from_args
    from rnnprof.reports.progress import StepProgress
    from rnnprof.profiler.run.runner import visible_gpus
    from rnnprof.profiler.run.sweep import sweep

    gpus = visible_gpus()
    if gpus and max(device_counts) > gpus:
        raise UsageError(f"--devices {args.devices} asks for {max(device_counts)} GPUs but {gpus} are visible")
    # Validate every configuration before spending minutes on the first one.
    configs = [workload_config_from_args(args, gpus, **point) for point in sweep_points]
    names = [None] * len(configs)
    if trainers:  # each configuration once per trainer, side by side
        names = [t for _ in configs for t in trainers]
        configs = [c for c in configs for _ in trainers]
    errors = Console(stderr=True)
    with StepProgress(errors) as progress:
        return sweep(configs, progress.run, on_warning=_warning_printer(errors), trainers=names), configs


def _torch(args: argparse.Namespace, sweep_points: list[dict]):
    from rnnprof.config import torch_options_from_args
    from rnnprof.profiler.run.torch_ddp import torch_sweep

    configs = [torch_options_from_args(args, 0, **point) for point in sweep_points]
    return torch_sweep(configs, on_warning=_warning_printer(Console(stderr=True))), configs
