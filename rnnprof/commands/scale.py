"""rnnprof scale: train on 1, 2, 4... devices and print the speedup table."""

from __future__ import annotations

import argparse
import os

from rich.console import Console

from rnnprof.config import VARIABLE_UPDATES, add_workload_arguments, parse_choice_list, parse_int_list
from rnnprof.errors import UsageError

NAME = "scale"
HELP = "time training on several device counts (after warm-up) and print words/s and speedup"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_workload_arguments(parser, sweep=True)
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout instead of a table")


def _open_run(config):
    from rnnprof.profiler.run.runner import DataParallelRun

    return DataParallelRun(config)


def run(args: argparse.Namespace, console: Console) -> int:
    from rnnprof.analyzers.scale import ScalePoint, shared_cores_note, speedup_table
    from rnnprof.config import workload_config_from_args
    from rnnprof.reports.progress import StepProgress
    from rnnprof.profiler.run.runner import visible_gpus
    from rnnprof.profiler.run.measure import measure
    from rnnprof.reports.layout import render_json
    from rnnprof.reports.scale import render_table, to_document

    device_counts = parse_int_list(args.devices, "--devices")
    modes = parse_choice_list(args.variable_update, "--variable-update", VARIABLE_UPDATES)
    gpus = visible_gpus()
    if gpus and max(device_counts) > gpus:
        raise UsageError(f"--devices {args.devices} asks for {max(device_counts)} GPUs but {gpus} are visible")
    # Validate every configuration before spending minutes on the first one.
    configs = [workload_config_from_args(args, gpus, devices=n, variable_update=mode)
               for mode in modes for n in device_counts]

    errors = Console(stderr=True)
    points, device_kind, words_definition, model_name = [], "gpu" if gpus else "logical-cpu", "", args.model
    with StepProgress(errors) as progress:
        for config in configs:
            with _open_run(config) as training:
                for warning in training.warnings:
                    errors.print(f"rnnprof scale: warning: {warning}", markup=False, highlight=False)
                device_kind = training.device_kind
                words_definition = training.workload.words_definition
                model_name = training.workload.name
                label = f"{config.variable_update} x{config.devices}"
                m = measure(training, config.warmup, config.batches,
                            on_step=progress.run(label, config.warmup, config.batches))
            points.append(ScalePoint(
                variable_update=config.variable_update,
                all_reduce=config.all_reduce if config.variable_update == "replicated" else None,
                devices=config.devices,
                per_device_batch=config.per_device_batch(),
                total_batch=config.total_batch(),
                timed=m.timed,
                with_warmup=m.with_warmup if config.include_warmup else None,
                step_seconds=tuple(s.seconds for s in m.timed_steps),
                warmup_step_seconds=tuple(s.seconds for s in m.warmup_steps),
            ))

    result = speedup_table(points)
    notes = [n for n in [shared_cores_note(device_kind, os.cpu_count())] if n]
    if args.json:
        base = configs[0].to_dict()
        base["devices"] = device_counts
        base["variable_update"] = modes
        render_json(to_document(result, config=base, words_definition=words_definition,
                                device_kind=device_kind, notes=notes), console)
    else:
        render_table(result, model=model_name, words_definition=words_definition, warmup=configs[0].warmup,
                     batches=configs[0].batches, include_warmup=configs[0].include_warmup, notes=notes,
                     console=console, parameter_device=configs[0].local_parameter_device)
    return 0
