"""rnnprof worker: run one task's TensorFlow gRPC server of a cluster (for --cluster-spec runs across hosts)."""

from __future__ import annotations

import argparse

from rnnprof.config import non_negative_int, positive_int

NAME = "worker"
HELP = ("run one task of a TensorFlow gRPC cluster (tf.distribute.Server) until stopped, for "
        "`rnnprof trace/scale --cluster-spec FILE` on several hosts")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster-spec", required=True, metavar="FILE",
                        help='JSON: {"worker": ["host:port", ...], "ps": ["host:port", ...]}')
    parser.add_argument("--job", required=True, choices=("worker", "ps"), help="this task's job")
    parser.add_argument("--task", required=True, type=non_negative_int, help="this task's index in its job")
    parser.add_argument("--devices", type=positive_int, default=1,
                        help="logical CPU devices of a worker task; give the --devices of the run (default: %(default)s)")


def run(args: argparse.Namespace, console) -> int:
    from rich.text import Text

    from rnnprof.profiler.run.cluster import read_cluster_spec, serve

    spec = read_cluster_spec(args.cluster_spec)
    address = spec.jobs.get(args.job, ())[args.task] if args.task < len(spec.jobs.get(args.job, ())) else "?"
    serve(spec, args.job, args.task, args.devices,
          on_ready=lambda: console.print(Text(f"{args.job} task {args.task} serving on {address}; Ctrl-C stops it")))
    return 0
