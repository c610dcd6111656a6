"""What ``rnnprof trace -- COMMAND`` runs: the user's command, with rnnprof's bootstrap in every Python process
that runs the script.

* ``python train.py ARGS`` / ``python -m pkg ARGS``: ``python -m rnnprof.recording.script train.py ARGS``.
* ``torchrun OPTIONS train.py ARGS`` (or ``python -m torch.distributed.run ...``): ``PYTHON -m
  rnnprof.recording.torchrun_launch PYTHON OPTIONS train.py ARGS``, PYTHON being the interpreter torchrun runs
  on (its ``#!`` line). That launcher reads the options with torchrun's own parser, so no option is misread,
  and runs torchrun with them as given and ``--no-python PYTHON -u -m rnnprof.recording.script train.py ARGS``
  as each rank's program (torchrun's ``-m/--module`` becomes the bootstrap's). torchrun still sets up each
  rank's environment, rendezvous, restarts and signals; nothing is put on PYTHONPATH but rnnprof itself.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from rnnprof.errors import UsageError

BOOTSTRAP = "rnnprof.recording.script"
LAUNCHER = "rnnprof.recording.torchrun_launch"
TORCHRUN_MODULES = ("torch.distributed.run",)
EXPECTED = "expected `-- python train.py ARGS` or `-- torchrun OPTIONS train.py ARGS`"


@dataclass(frozen=True)
class Launch:
    argv: list[str]  # what rnnprof starts
    torchrun: bool  # the ranks are started by torchrun


def launch_command(command: Sequence[str]) -> Launch:
    command = list(command)
    if not command:
        raise UsageError(f"nothing to run after --; {EXPECTED}")
    program = command[0]
    if Path(program).name == "torchrun":
        return _torchrun(_python_of(program), command[1:])
    if not Path(program).name.startswith("python"):
        raise UsageError(f"can only run Python or torchrun under capture, got {program!r}; {EXPECTED}")
    rest = command[1:]
    if len(rest) >= 2 and rest[0] == "-m" and rest[1] in TORCHRUN_MODULES:
        return _torchrun(program, rest[2:])
    return Launch([program, "-m", BOOTSTRAP, *script_args(rest)], torchrun=False)


def script_args(rest: list[str]) -> list[str]:
    """``script.py ARGS`` or ``-m module ARGS``, checked."""
    if not rest:
        raise UsageError(f"no script after the interpreter; {EXPECTED}")
    if rest[0] == "-m":
        if len(rest) < 2:
            raise UsageError("`-m` needs a module name")
    elif rest[0].startswith("-"):
        raise UsageError(f"interpreter option {rest[0]!r} is not supported; expected a script or -m module")
    elif not Path(rest[0]).is_file():
        raise UsageError(f"script {rest[0]!r} does not exist")
    return rest


def _torchrun(python: str, options: list[str]) -> Launch:
    """torchrun with ``options``, through the launcher that checks them with torchrun's parser."""
    return Launch([python, "-m", LAUNCHER, python, *options], torchrun=True)


def _torchrun_path(program: str) -> str:
    found = shutil.which(program)
    if found is None:
        raise UsageError(f"{program!r} not found; {EXPECTED}")
    return found


def _python_of(program: str) -> str:
    """The interpreter on a console script's ``#!`` line; rnnprof's own where there is none."""
    try:
        with open(_torchrun_path(program), "rb") as handle:
            first = handle.readline(4096).decode(errors="replace").strip()
    except OSError:
        return sys.executable
    if first.startswith("#!"):
        interpreter = first[2:].strip().split()[0] if first[2:].strip() else ""
        if Path(interpreter).name.startswith("python"):
            return interpreter
    return sys.executable
