"""torchrun as ``rnnprof trace -- torchrun OPTIONS train.py ARGS`` runs it: ``PYTHON -m
rnnprof.recording.torchrun_launch PYTHON OPTIONS train.py ARGS``, on the interpreter torchrun runs on.

It reads the options with torchrun's own parser, says on the channel rnnprof handed it (``CHANNEL_ENV``, a
socket) whether it accepts them (``ACCEPTED``) or why not (the one-line error), and waits for rnnprof to open
the run directory: then it runs torchrun with the options as given and the bootstrap as each rank's program
(``torchrun_argv``). Where rnnprof sends nothing (it could not open the run), it runs nothing. torch is imported
here, in the launcher, which needs it anyway, and not in rnnprof's own process.
"""

from __future__ import annotations

import os
import runpy
import socket
import sys
from typing import Sequence

from rnnprof.errors import RnnprofError, UsageError
from rnnprof.recording.launch import BOOTSTRAP, EXPECTED, script_args
from rnnprof.frameworks.torch import import_torch
from rnnprof.training.child_processes import exit_process

CHANNEL_ENV = "RNNPROF_LAUNCH_CHANNEL"  # the file descriptor of the launcher's end of the channel
ACCEPTED = b"\n"  # the launcher's word where it takes the options (else the one-line error, then a newline)
GO = b"1"  # what rnnprof sends once the run directory is open


def torchrun_argv(python: str, options: Sequence[str]) -> list[str]:
    """torchrun's options, each rank's program replaced by the bootstrap running the same script with ``python``
    (refused with a ``UsageError`` where torchrun's parser or rnnprof cannot take them)."""
    options = list(options)
    import_torch("-- torchrun")
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()

    def refuse(message):
        raise UsageError(f"torchrun: {message}; {EXPECTED}")

    parser.error = refuse
    args = parser.parse_args(options)
    if args.no_python:
        raise UsageError("torchrun --no-python runs a program that is not Python; rnnprof captures Python scripts")
    if args.run_path:
        raise UsageError("torchrun --run-path runs the script inside the agent; rnnprof captures it in its own "
                         "processes: leave --run-path out")
    cut = len(options) - len(args.training_script_args) - 1  # the script, then its arguments
    own = [o for o in options[:cut] if o not in ("-m", "--module")]
    script = (["-m"] if args.module else []) + [args.training_script, *args.training_script_args]
    return [*own, "--no-python", python, "-u", "-m", BOOTSTRAP, *script_args(script)]


def main(argv: Sequence[str] | None = None) -> int:
    """``PYTHON OPTIONS...``: check the options and tell rnnprof; then run torchrun, or stop where rnnprof says
    nothing (torchrun's failures end this process as they end torchrun's own)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    with socket.socket(fileno=int(os.environ.pop(CHANNEL_ENV))) as channel:
        try:
            options = torchrun_argv(argv[0], argv[1:])
        except RnnprofError as error:
            _say(channel, " ".join(str(error).split()).encode() + b"\n")
            return 2
        if not (_say(channel, ACCEPTED) and _heard(channel) == GO):
            return 0  # rnnprof stopped, or could not open the run: nothing runs
    sys.argv = [sys.argv[0], *options]
    runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)
    return 0


def _say(channel: socket.socket, line: bytes) -> bool:
    """``line`` sent to rnnprof; False where rnnprof is gone."""
    try:
        channel.sendall(line)
    except OSError:
        return False
    return True


def _heard(channel: socket.socket) -> bytes:
    """rnnprof's word; nothing where rnnprof is gone."""
    try:
        return channel.recv(1)
    except OSError:
        return b""


if __name__ == "__main__":
    exit_process(main())
