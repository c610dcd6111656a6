"""rnnprof whatif: each step's dependency graph across ranks replayed with changed durations: the step time a
change would give, the chain critical after it and the waits that appear or vanish."""

from __future__ import annotations

import argparse
import re

from rich.console import Console

from rnnprof import limits
from rnnprof.analyzers.replay import (COMM, COMM_GROUP, DELAY, EVEN_HOST, EVEN_INPUT, EVEN_WORK, FAMILY, GRAPH_LAUNCH,
                                     INEXPRESSIBLE, MICRO_BATCHES, MOVE_LAYER, NO_SYNCS, OVERLAP, PREFETCH, SCALE,
                                     Change, ChangeError, whatif)
from rnnprof.analyzers.replay.comm_changes import collective_kind
from rnnprof.analyzers.replay.pipeline_changes import parse_layers
from rnnprof.analyzers.replay.families import family_named
from rnnprof.analyzers.replay.fixes import RequestedChanges, copies_removed, parse_fix
from rnnprof.analyzers.flops import FAMILIES
from rnnprof.commands import job_flags, left_out_notes, step_flags
from rnnprof.commands.flags import INPUT, check_comm_patterns
from rnnprof.errors import InputError, UsageError
from rnnprof.inputs.dependencies import read_dependencies
from rnnprof.reports.whatif import render_table
from rnnprof.reports.results.whatif import WhatIfResult
from rnnprof.rundir.manifest import run_notes
from rnnprof.traces import load_events
from rnnprof.traces.rank_folder import job_notes
from rnnprof.job.whatif import job_whatif


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar=INPUT,
                        help="a run directory, trace file or rank folder; several Kineto files (one per rank) are "
                             "joined through their collectives")
    group = parser.add_argument_group("changes (one or more; together when several)")
    group.add_argument("--scale", action="append", default=[], metavar="OP=F",
                       help="an operator's or kernel's time times F, the kernels it launched included "
                            "('aten::mm=0.5'); 'family:NAME=F' for a kernel family (" + ", ".join(FAMILIES) + ")")
    group.add_argument("--even-host", nargs="?", action="append", const="", metavar="RANK",
                       help="RANK's untraced host time at the other ranks' median, gap by gap, where shorter (a "
                            "straggler fixed; without RANK: the rank that arrives last at the collectives)")
    group.add_argument("--even-input", nargs="?", action="append", const="", metavar="RANK",
                       help="RANK's data loading at the other ranks' median (without RANK: the latest rank)")
    group.add_argument("--even-work", nargs="?", action="append", const="", metavar="RANK",
                       help="RANK's operators that no other rank runs removed (a compute straggler's extra work; "
                            "without RANK: the latest rank)")
    group.add_argument("--delay", action="append", default=[], metavar="RANK=MS[@OP]",
                       help="MS milliseconds of host time added to RANK's every step, at its start, or before the "
                            "first operator matching the regex OP ('rank1=40@^Optimizer.zero_grad'): a straggler")
    _add_collective_changes(group)
    group.add_argument("--overlap-comm", nargs="?", const="", default=None, metavar="WHAT",
                       help="communication moved off compute's dependencies (overlapped); WHAT: only a collective "
                            "type's or a process group's, as --comm names them")
    group.add_argument("--no-copies", nargs="?", const="", default=None, metavar="KIND",
                       help="device copies and their launch calls removed; KIND: only those of one kind (HtoD, "
                            "DtoH, DtoD, PtoP, HtoH)")
    group.add_argument("--no-syncs", action="store_true", help="synchronizing calls removed")
    group.add_argument("--graph-launch", action="store_true",
                       help="launches replaced by a graph launch: host launch overhead gone")
    group.add_argument("--fix", action="append", default=[], metavar="RULE[:SUBJECT]",
                       help="the fix of an audit finding (--fix PF001, --fix PF001:rank1, --fix PF006:OP); "
                            "docs/commands/whatif.md lists what each rule's fix changes")
    for flag, why in INEXPRESSIBLE.items():
        group.add_argument(f"--{flag}", nargs="?", const="", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout instead of tables")
    parser.add_argument("--comm-pattern", action="append", default=[], metavar="REGEX",
                        help="also count events whose name or op type matches REGEX as communication (repeatable)")
    step_flags.add_arguments(parser)
    job_flags.add_arguments(parser)
    limits.add_argument(parser)


def _add_collective_changes(group) -> None:
    """The changes about collectives and a parallel job's layout: --comm, --prefetch, --micro-batches, --move-layer."""
    group.add_argument("--comm", action="append", default=[], metavar="[WHAT=]F",
                       help="communication's transfer times times F; WHAT=F: only a collective type's "
                            "('all_gather=0.5': all-reduce, all-gather, reduce-scatter, send/recv, ...) or a "
                            "process group's, by name, description or ranks ('mesh_shard=0.5', '0,1=0.5')")
    group.add_argument("--prefetch", action="store_true",
                       help="FSDP forward prefetch: each block's all-gather issued where the block before it issued "
                            "its own (what --forward-prefetch 1 does)")
    group.add_argument("--micro-batches", type=int, default=None, metavar="M",
                       help="a pipeline's micro-batches per step: its schedule replayed with M (each micro-batch's "
                            "operators scaled to its size), the change added to the step's replay")
    group.add_argument("--move-layer", default=None, metavar="FROM:TO",
                       help="a pipeline's layers moved between stages: each stage's layers now and after "
                            "('3,1:2,2' moves a layer from the first stage to the second), its schedule replayed")


def _factor(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (expected a factor such as 0.5)") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a factor of 0 or more")
    return value


def _scale(text: str) -> Change:
    name, sep, value = text.rpartition("=")
    if not sep or not name:
        raise UsageError(f"--scale {text!r}: expected OP=F or family:NAME=F (--scale 'aten::mm=0.5')")
    try:
        factor = _factor(value)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"--scale {text!r}: {exc}") from None
    if name.startswith("family:"):
        family = family_named(name.removeprefix("family:"))
        if family is None:
            raise UsageError(f"--scale {text!r}: no kernel family {name.removeprefix('family:')!r} "
                             f"(expected one of {', '.join(FAMILIES)})")
        return Change(FAMILY, family, factor)
    return Change(SCALE, name, factor)


def _delay(text: str) -> Change:
    rank, sep, rest = text.partition("=")
    value, at, before = rest.partition("@")
    expected = "expected RANK=MS or RANK=MS@OP (--delay 'rank1=40@^Optimizer.zero_grad')"
    if not sep or not rank.strip():
        raise UsageError(f"--delay {text!r}: {expected}")
    try:
        ms = float(value)
    except ValueError:
        raise UsageError(f"--delay {text!r}: {value!r} is not a number of ms; {expected}") from None
    if not ms >= 0 or ms == float("inf"):
        raise UsageError(f"--delay {text!r}: expected a delay of 0 ms or more")
    if at and not before:
        raise UsageError(f"--delay {text!r}: nothing after '@'; {expected}")
    try:
        re.compile(before)
    except re.error as exc:
        raise UsageError(f"--delay {text!r}: {before!r} is no regular expression ({exc})") from None
    return Change(DELAY, rank.strip(), delay_ms=ms, before=before)


NO_CHANGE = ("no change given (expected one or more of the changes 'rnnprof whatif --help' lists: --scale, --comm, "
             "--delay, --fix, ...)")


def _requested(args: argparse.Namespace) -> RequestedChanges:
    """The changes the flags ask for, read once, before any input is read: those they state and the audit fixes
    (whose changes depend on the input's devices); a flag a replay cannot express is refused."""
    for flag, why in INEXPRESSIBLE.items():
        if getattr(args, flag) is not None:
            raise UsageError(f"--{flag}: a replay cannot express {why}")
    changes = [_scale(text) for text in args.scale]
    changes += [Change(EVEN_HOST, rank) for rank in args.even_host or ()]
    changes += [Change(EVEN_INPUT, rank) for rank in args.even_input or ()]
    changes += [Change(EVEN_WORK, rank) for rank in args.even_work or ()]
    changes += [_delay(text) for text in args.delay]
    groups = []
    for text in args.comm:
        what, factor = _comm(text)
        kind = collective_kind(what) if what else ""
        if kind is None:
            groups.append((COMM_GROUP, what, factor))  # a process group, resolved by the input's groups
        else:
            changes.append(Change(COMM, kind, factor))
    try:
        if args.no_copies is not None:
            changes.append(copies_removed(args.no_copies, f"--no-copies {args.no_copies}", "or none for every copy"))
        fixes = tuple(parse_fix(text) for text in args.fix)
    except ChangeError as exc:
        raise UsageError(str(exc)) from None
    if args.overlap_comm is not None:
        kind = collective_kind(args.overlap_comm) if args.overlap_comm else ""
        if kind is None:
            groups.append((OVERLAP, args.overlap_comm, 1.0))
        else:
            changes.append(Change(OVERLAP, kind))
    flags = ((args.no_syncs, NO_SYNCS), (args.graph_launch, GRAPH_LAUNCH), (args.prefetch, PREFETCH))
    changes += [Change(kind) for on, kind in flags if on]
    if args.micro_batches is not None:
        if args.micro_batches < 1:
            raise UsageError(f"--micro-batches {args.micro_batches}: expected 1 or more")
        changes.append(Change(MICRO_BATCHES, "", float(args.micro_batches)))
    if args.move_layer is not None:
        try:
            parse_layers(args.move_layer)
        except ChangeError as exc:
            raise UsageError(str(exc)) from None
        changes.append(Change(MOVE_LAYER, args.move_layer))
    if not changes and not fixes and not groups:
        raise UsageError(NO_CHANGE)
    return RequestedChanges(tuple(changes), fixes, tuple(groups))


def _comm(text: str) -> tuple[str, float]:
    """``--comm [WHAT=]F`` as (WHAT, F): WHAT "" for every collective."""
    what, sep, value = text.rpartition("=")
    if sep and not what.strip():
        raise UsageError(f"--comm {text!r}: nothing before '='; expected F, KIND=F or GROUP=F (--comm all_gather=0.5)")
    try:
        return what.strip(), _factor(value)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"--comm {text!r}: {exc}") from None


def run(args: argparse.Namespace, console: Console) -> int:
    result = analyze(args)
    result.render(console, args.json, lambda: render_table(result.report, console))
    return 0


def analyze(args: argparse.Namespace) -> WhatIfResult:
    """whatif's result for ``args``: what the command renders and ``rnnprof.open(...).whatif(...)`` gives."""
    check_comm_patterns(args.comm_pattern)
    asked = _requested(args)
    notes = run_notes(args.paths)
    job = job_flags.rank_job(args.paths)
    try:
        if job is not None:
            report, more, left_out = _job(job, args, asked)
        else:
            job_flags.refuse_job_options(args)
            report, more, left_out = _one_table(args, asked)
    except ChangeError as exc:
        raise UsageError(str(exc)) from None
    notes += more
    if not report.steps:
        raise InputError(", ".join(args.paths), "has no event on a device in the chosen steps",
                         "a trace of device ops or kernels")
    return WhatIfResult(tuple(notes), report, left_out)


def _one_table(args: argparse.Namespace, asked: RequestedChanges):
    """``(report, notes, left_out counts)`` of the input read into one table."""
    table = load_events(args.paths[0] if len(args.paths) == 1 else args.paths)
    changes = asked.on(table)
    notes = [*job_notes(table), *left_out_notes.notes(args, table)]
    steps = step_flags.select(table, args).steps()
    report = whatif(table, changes, read_dependencies(args.paths), steps=steps if len(steps) else None,
                    comm_patterns=args.comm_pattern)
    return report, notes, left_out_notes.counts(table)


def _job(job, args: argparse.Namespace, asked: RequestedChanges):
    """``(report, notes, left_out counts)`` of a whole job's rank files, a rank per worker."""
    report, notes, left_out = job_flags.run_job(
        job_whatif, job, args, requested=asked, comm_patterns=args.comm_pattern,
        dependencies=read_dependencies(args.paths), choose=lambda known: _chosen(args, known))
    return report, [*notes, *left_out_notes.notes(args, left_out)], left_out_notes.counts(left_out)


def _chosen(args: argparse.Namespace, known) -> list[int] | None:
    steps = step_flags.chosen(known, args)
    return list(steps) if len(steps) else None
