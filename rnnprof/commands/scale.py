"""rnnprof scale: train on 1, 2, 4... devices and print the speedup table."""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path

from rich.console import Console
from rich.text import Text

from rnnprof.commands.flags import parse_choice_list, parse_int_list, positive_int
from rnnprof.commands.workload_flags import (add_workload_arguments, check_sweep_flags, check_workload_args,
                                             torch_options_from_args, workload_config_from_args)
from rnnprof.models.config import FAKE_LOCATIONS, IMAGE_MODELS, VARIABLE_UPDATES
from rnnprof.errors import UsageError
from rnnprof.analyzers.scale import shared_cores_note, speedup_table, trainer_table
from rnnprof.commands.explain import explain_paths
from rnnprof.commands.traced_sweep import traced_sweep
from rnnprof.reports.charts import check_plot_path, save_chart, scaling_chart
from rnnprof.reports.explain import render_table as render_explain_table
from rnnprof.reports.layout import render_json, render_notes
from rnnprof.reports.progress import StepProgress, own_stderr_console
from rnnprof.reports.scale import render_table, render_trainer_tables, to_document, trainer_document
from rnnprof.rundir.sweep import EXPLAIN_FILE, check_sweep_out, write_sweep
from rnnprof.rundir.writer import atomic_write_json, default_run_dir
from rnnprof.training.distribute import STRATEGIES, TRAINERS, check_trainer
from rnnprof.training.runner import visible_gpus
from rnnprof.training.sweep import sweep
from rnnprof.training.torch_ddp import torch_sweep
from rnnprof.training.torch_layout import PARALLEL_MODES
from rnnprof.training.torch_memory import PEAK_SOURCES

TRACE_STEPS = 2  # --explain's traced steps per configuration


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_workload_arguments(parser, sweep=True)
    parser.add_argument("--trainer", default=None,
                        help="comma-separated: rnnprof (its own towers and exchange), distribute (the same model "
                             "trained by TensorFlow's tf.distribute: MirroredStrategy for replicated, "
                             "CentralStorageStrategy for parameter_server); given, scale prints each trainer's "
                             "throughput side by side (default: rnnprof only, the speedup tables)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout instead of a table")
    parser.add_argument("--out", metavar="DIR", help="also save the sweep in DIR (a new or empty folder): the --json "
                                                     "document and one file per configuration, for rnnprof report")
    parser.add_argument("--explain", action="store_true",
                        help="also trace --trace-steps steps of every configuration after its timed steps (the "
                             "timed figures come from the steps before tracing starts), save the sweep and the "
                             "traced runs in --out DIR (default: a fresh runs/<model>-sweep-<time>) and print why "
                             "the speedup falls short of linear (as rnnprof explain DIR)")
    parser.add_argument("--trace-steps", type=positive_int, default=None,
                        help=f"with --explain: steps traced after each configuration's timed steps "
                             f"(default: {TRACE_STEPS})")
    parser.add_argument("--plot", metavar="FILE", help="also write the scaling chart (words/s against devices, "
                                                       "with the ideal line) to FILE, .png or .svg")


def run(args: argparse.Namespace, console: Console) -> int:
    plot = check_plot_path(args.plot)
    _check_out(args)
    sweep_points, lists = _sweep_points(args)
    trainers = _trainers(args, lists["variable_update"])
    swept, configs = _measure(args, sweep_points, lists["devices"], trainers)
    result = speedup_table(swept.points)
    notes = [n for n in [shared_cores_note(swept.device_kind, os.cpu_count())] if n]
    document = _document(args, result, swept, configs, lists, trainers, notes)
    _save(args.out, document, plot)
    explained = _explain(args, document) if args.explain else None
    if args.json:
        render_json(document, console)
        return 0
    _render(result, swept, configs, trainers, notes, console)
    if explained is not None:
        _render_explanation(args.out, explained, notes, console)
    return 0


def _check_out(args: argparse.Namespace) -> None:
    """Refuse ``--trace-steps`` without ``--explain``; give ``--explain`` its default ``--out`` (a fresh run
    directory), and refuse an ``--out`` that is not a new or empty folder."""

    if args.trace_steps is not None and not args.explain:
        raise UsageError("--trace-steps applies with --explain (the steps traced after the timed ones)")
    if args.explain and set((args.parallel or "ddp").split(",")) - {"ddp"}:
        raise UsageError("--explain reads each run as replicas that all-reduce their gradients; it does not "
                         "combine with --parallel modes other than ddp")
    if args.explain and args.out is None:
        args.out = str(default_run_dir(f"{args.model}-sweep"))
    if args.out is not None:
        check_sweep_out(args.out)


def _measure(args: argparse.Namespace, sweep_points: list[dict], device_counts: list[int],
             trainers: list[str] | None):
    """The sweep of every configuration, and the configurations: traced after timing with ``--explain``, else
    timed in TensorFlow or torch."""
    if args.explain:
        if trainers:
            raise UsageError("--explain traces rnnprof's own trainer; it does not combine with --trainer")
        return _traced(args, sweep_points, device_counts)
    if args.framework == "torch":
        return _torch(args, sweep_points)
    return _tensorflow(args, sweep_points, device_counts, trainers)


def _save(out: str | None, document: dict, plot) -> None:
    """The sweep's document into ``--out`` and its chart into ``--plot``, each when given."""

    if out is not None:
        write_sweep(out, document)
    if plot is not None:
        save_chart(scaling_chart(document["rows"]), plot)


def _explain(args: argparse.Namespace, document: dict):
    """``rnnprof explain``'s document and report on the sweep saved in ``--out``, saved beside it and added to
    the sweep's document (saved again, for rnnprof report)."""

    explained = explain_paths([args.out], None, None, args)
    atomic_write_json(Path(args.out) / EXPLAIN_FILE, explained[0])
    document["explain"] = explained[0]
    write_sweep(args.out, document)
    return explained


def _render_explanation(out: str, explained, notes: list[str], console: Console) -> None:
    """The explanation's table, its notes not already printed, and where the sweep and its runs were saved."""

    console.print()
    render_explain_table(explained[1], console)
    render_notes([n for n in explained[0]["notes"] if n not in notes])
    console.print(Text.assemble("sweep and traced runs: ", (str(out), "bold"),
                                f" (rnnprof explain {out}; rnnprof report {out})"))


def _traced(args: argparse.Namespace, sweep_points: list[dict], device_counts: list[int]):
    """Every configuration timed, then traced, into ``--out``'s runs/ (``commands.traced_sweep``)."""
    import sys

    if args.framework == "torch":
        configs = [torch_options_from_args(args, 0, **point) for point in sweep_points]
    else:
        configs = _tf_configs(args, sweep_points, device_counts)
    argv = ["rnnprof", *sys.argv[1:]]
    errors = Console(stderr=True)
    with _progress(args, errors) as progress:
        swept = traced_sweep(configs, args.out, args.trace_steps or TRACE_STEPS, argv,
                             on_warning=_warning_printer(errors), framework=args.framework, on_run=progress.on_run)
    return swept, configs


def _sweep_points(args: argparse.Namespace) -> tuple[list[dict], dict]:
    """Every configuration of the sweep (checked before TensorFlow or torch loads: a bad flag is refused at once),
    and the swept lists by flag."""

    lists = {
        "devices": parse_int_list(args.devices, "--devices"),
        "variable_update": parse_choice_list(args.variable_update, "--variable-update", VARIABLE_UPDATES),
        "workers": parse_int_list(args.workers, "--workers") if args.workers is not None else [None],
        "fake_location": (parse_choice_list(args.fake_location, "--fake-location", FAKE_LOCATIONS)
                          if args.fake_location else [None]),
        "parallel": parse_choice_list(args.parallel, "--parallel", PARALLEL_MODES) if args.parallel else [None],
    }
    points = [dict(devices=n, variable_update=mode, workers=w, fake_location=location, parallel=parallel,
                   _sweep=True)
              for parallel in lists["parallel"] for mode in lists["variable_update"]
              for location in lists["fake_location"] for w in lists["workers"] for n in lists["devices"]]
    for point in points:
        check_workload_args(args, **point)
    if args.framework == "torch":
        check_sweep_flags(args, [mode or "ddp" for mode in lists["parallel"]])
    return points, lists


def _document(args, result, swept, configs, lists: dict, trainers, notes: list[str]) -> dict:
    """The sweep's --json document (also what --out saves)."""

    base = configs[0].to_dict()
    base["devices"] = lists["devices"]
    base["variable_update"] = lists["variable_update"]
    if args.workers is not None:
        base["workers"] = lists["workers"]
    if args.fake_location:
        base["fake_location"] = lists["fake_location"]
    if args.parallel:
        base["parallel"] = lists["parallel"]
    unit = getattr(swept, "unit", "words")
    document = to_document(result, config=base, words_definition=swept.words_definition,
                           device_kind=swept.device_kind, notes=notes, step_definition=swept.step_definition,
                           unit=unit, memory_sources=PEAK_SOURCES)
    if trainers:
        base["trainer"] = trainers
        document["trainers"] = trainer_document(trainer_table(swept.points, trainers), trainers, unit, STRATEGIES)
    return document


def _render(result, swept, configs, trainers, notes: list[str], console: Console) -> None:
    first = getattr(configs[0], "workload", configs[0])
    unit = getattr(swept, "unit", "words")
    if trainers:
        render_trainer_tables(trainer_table(swept.points, trainers), trainers, model=swept.model,
                              warmup=first.warmup, batches=first.batches, unit=unit,
                              strategies=STRATEGIES, notes=list(result.notes) + notes, console=console)
        return
    render_table(result, model=swept.model, words_definition=swept.words_definition, warmup=first.warmup,
                 batches=first.batches, include_warmup=first.include_warmup, notes=notes,
                 console=console, parameter_device=_parameter_device(configs), unit=unit,
                 memory_sources=PEAK_SOURCES)


def _parameter_device(configs) -> str:
    """Where parameter_server runs keep the variables, for the mode's title."""
    ps = [c for c in configs if getattr(c, "variable_update", "") == "parameter_server" and c.ps_tasks]
    if ps:
        return f"{ps[0].ps_tasks} ps task(s)"
    return getattr(configs[0], "workload", configs[0]).local_parameter_device


def _warning_printer(errors: Console):
    return lambda warning: errors.print(Text(f"rnnprof scale: warning: {warning}"))


def _trainers(args: argparse.Namespace, modes: list[str]) -> list[str] | None:
    """The trainers of ``--trainer`` (None when not given), refused before TensorFlow loads."""
    if args.trainer is None:
        return None

    trainers = list(dict.fromkeys(parse_choice_list(args.trainer, "--trainer", TRAINERS)))
    if args.framework == "torch" and trainers != ["rnnprof"]:
        raise UsageError("--trainer distribute applies to --framework tensorflow")
    if "distribute" in trainers and (args.workers is not None or args.cluster_spec is not None):
        raise UsageError("--trainer distribute trains in one process; it does not combine with --workers or "
                         "--cluster-spec")
    for trainer in trainers:
        for mode in modes:
            check_trainer(trainer, mode)
    return trainers


def _tf_configs(args: argparse.Namespace, sweep_points: list[dict], device_counts: list[int]) -> list:
    """Every TensorFlow configuration, each validated, and the device counts against the visible GPUs, before
    minutes are spent on the first one."""

    gpus = visible_gpus()
    if gpus and max(device_counts) > gpus:
        raise UsageError(f"--devices {args.devices} asks for {max(device_counts)} GPUs but {gpus} are visible")
    return [workload_config_from_args(args, gpus, **point) for point in sweep_points]


def _tensorflow(args: argparse.Namespace, sweep_points: list[dict], device_counts: list[int],
                trainers: list[str] | None = None):
    configs = _tf_configs(args, sweep_points, device_counts)
    names = [None] * len(configs)
    if trainers:  # each configuration once per trainer, side by side
        names = [t for _ in configs for t in trainers]
        configs = [c for c in configs for _ in trainers]
    errors = Console(stderr=True)
    with _progress(args, errors) as progress:
        return sweep(configs, progress.run, on_warning=_warning_printer(errors), trainers=names,
                     on_run=progress.on_run), configs


def _torch(args: argparse.Namespace, sweep_points: list[dict]):
    """The torch sweep; the modes' figures (layout, peak memory, model state) where ``--parallel`` was given."""
    configs = [torch_options_from_args(args, 0, **point) for point in sweep_points]
    with own_stderr_console() as errors, _progress(args, errors) as progress:
        swept = torch_sweep(configs, progress.run, on_warning=_warning_printer(errors), on_run=progress.on_run)
    if not args.parallel:
        swept = dataclasses.replace(swept, points=tuple(dataclasses.replace(p, parallel=None, layout=None, memory=None)
                                                        for p in swept.points))
    return swept, configs


def _progress(args: argparse.Namespace, errors: Console) -> StepProgress:
    """The sweep's progress on stderr: bars on a terminal, a line per configuration elsewhere."""
    return StepProgress(errors, name="rnnprof scale", unit="images" if args.model in IMAGE_MODELS else "words")
