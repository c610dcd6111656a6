"""rnnprof worker: run one task's TensorFlow gRPC server of a cluster (for --cluster-spec runs across hosts)."""

from __future__ import annotations

import argparse

import os

from rnnprof.commands.flags import non_negative_int, positive_int
from rnnprof.recording.hang_probe import task_probe
from rnnprof.training.cluster import read_cluster_spec, serve
from rnnprof.training.exposure import listening, parse_duration, worker_line



def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster-spec", required=True, metavar="FILE",
                        help='JSON: {"worker": ["host:port", ...], "ps": ["host:port", ...]}')
    parser.add_argument("--job", required=True, choices=("worker", "ps"), help="this task's job")
    parser.add_argument("--task", required=True, type=non_negative_int, help="this task's index in its job")
    parser.add_argument("--devices", type=positive_int, default=1,
                        help="logical CPU devices of a worker task; give the --devices of the run (default: %(default)s)")
    parser.add_argument("--timeout", default="12h", metavar="DURATION", type=_duration,
                        help="stop serving after DURATION (90s, 30m, 12h, 2d; default: 12h)")


def _duration(text: str) -> str:
    try:
        parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def run(args: argparse.Namespace, console) -> int:
    import datetime

    from rich.text import Text

    spec = read_cluster_spec(args.cluster_spec)
    address = spec.jobs.get(args.job, ())[args.task] if args.task < len(spec.jobs.get(args.job, ())) else "?:0"
    timeout_s = parse_duration(args.timeout)
    until = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=timeout_s)

    def ready() -> None:
        found = listening(int(address.rpartition(":")[2]))
        console.print(Text(worker_line(args.job, args.task, address, found, until, args.timeout)), soft_wrap=True)

    probe = task_probe(os.environ)  # a chief that started this task watches it for a hang
    if probe is not None:
        probe.install()
    try:
        serve(spec, args.job, args.task, args.devices, on_ready=ready, timeout_s=timeout_s)
    finally:
        if probe is not None:
            probe.close()
    console.print(Text(f"{args.job} task {args.task}: stopped after --timeout {args.timeout}"))
    return 0
