"""Running a user's script under capture: ``rnnprof trace --out DIR -- python train.py ARGS``.

The script runs in a child Python process started as ``python -m rnnprof.profiler.capture.script``;
that bootstrap opens a ``Capture`` (hooks on ``Session.run`` and ``tf.function``), then runs
the script with ``runpy`` as ``__main__``. The parent only prepares the directory, waits,
and marks the run interrupted if the child died before it could. Interrupted, it stops the child:
Ctrl-C reaches both, SIGTERM is passed on, and a child still running ``STOP_GRACE_S`` seconds later
(or at a second interrupt) is killed; a child whose parent dies outright gets SIGTERM.
"""

from __future__ import annotations

import ctypes
import json
import os
import runpy
import signal
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Sequence

import rnnprof
from rnnprof.errors import UsageError
from rnnprof.profiler import rundir
from rnnprof.errors import InputError
from rnnprof.profiler.capture.interrupt import Terminated, ignore_interrupts, terminate_as_interrupt
from rnnprof.profiler.rundir.manifest import new_manifest, read_manifest
from rnnprof.profiler.rundir.writer import RunWriter, atomic_write_json, prepare_out_dir

ENV = "RNNPROF_CAPTURE"
STOP_GRACE_S = 30  # how long an interrupted script may take to close its capture before it is killed
_PR_SET_PDEATHSIG = 1  # prctl option: the signal a process gets when its parent dies
NO_TENSORFLOW = 2  # the child's exit code when its Python has no TensorFlow (rnnprof's error, not the script's)


def parse_command(command: Sequence[str]) -> tuple[str, list[str]]:
    """``python [-m module | script.py] args`` -> (interpreter, the rest)."""
    command = list(command)
    if not command:
        raise UsageError("nothing to run after --; expected `-- python train.py ARGS`")
    interpreter = command[0]
    if not Path(interpreter).name.startswith("python"):
        raise UsageError(f"can only run Python under capture, got {interpreter!r}; expected `-- python train.py ARGS`")
    rest = command[1:]
    if not rest:
        raise UsageError("no script after the interpreter; expected `-- python train.py ARGS`")
    if rest[0] == "-m":
        if len(rest) < 2:
            raise UsageError("`-m` needs a module name")
    elif rest[0].startswith("-"):
        raise UsageError(f"interpreter option {rest[0]!r} is not supported; expected a script or -m module")
    elif not Path(rest[0]).is_file():
        raise UsageError(f"script {rest[0]!r} does not exist")
    return interpreter, rest


def run_script(out_dir: str | Path, command: Sequence[str], steps: int | None = 3, skip_steps: int = 1,
               delay: float = 0.0, force: bool = False) -> int:
    """Run ``command`` under capture into ``out_dir``; returns the script's exit code."""
    interpreter, rest = parse_command(command)
    out = prepare_out_dir(out_dir, force=force)
    env = dict(os.environ)
    package_root = str(Path(rnnprof.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # TF's info lines (profiler sessions) are rnnprof's noise
    env[ENV] = json.dumps({"out": str(out), "steps": steps, "skip_steps": skip_steps, "delay": delay,
                           "command": list(command), "rnnprof_python": sys.executable})
    child = subprocess.Popen([interpreter, "-m", "rnnprof.profiler.capture.script", *rest], env=env,
                             preexec_fn=_end_with_parent())
    interrupted = False
    try:
        code = child.wait()
    except KeyboardInterrupt as exc:
        interrupted = True
        code = _stop(child, forward=isinstance(exc, Terminated))
    _mark_unfinished(out, list(command), code)
    return 130 if interrupted or code == -signal.SIGINT else code


def _stop(child: subprocess.Popen, forward: bool) -> int:
    """Stop the script after an interrupt and return its exit code.

    Ctrl-C reaches the whole process group, the script included; SIGTERM reached only rnnprof and is
    passed on. Either way the script closes its capture (the run says ``interrupted``); one that has not
    exited after ``STOP_GRACE_S`` seconds, or a second interrupt, is killed.
    """
    if forward:
        child.send_signal(signal.SIGTERM)
    try:
        return child.wait(timeout=STOP_GRACE_S)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        child.kill()
        return child.wait()


def _end_with_parent():
    """For ``Popen(preexec_fn=...)``: the child gets SIGTERM when rnnprof dies, even by SIGKILL (Linux only).

    libc is loaded here, in the parent: only the ``prctl`` call runs between fork and exec.
    """
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _mark_unfinished(out: Path, command: list[str], code: int) -> None:
    """Record the exit code of a failed script; a child that died early leaves the manifest to the parent."""
    manifest = _child_manifest(out) or new_manifest(command, {"script": command})
    if manifest.get("status") == rundir.STATUS_COMPLETE and code == 0:
        return
    if manifest.get("status") != rundir.STATUS_COMPLETE:
        manifest["status"] = rundir.STATUS_INTERRUPTED
    manifest["exit_code"] = code
    atomic_write_json(out / rundir.MANIFEST, manifest)


def _child_manifest(out: str | Path) -> dict:
    """The run's manifest as the child left it; empty when it cannot be read."""
    try:
        return read_manifest(Path(out))
    except InputError:
        return {}


def script_failure(out: str | Path) -> str | None:
    """Why the script's capture stopped, as the child recorded it in the manifest."""
    return _child_manifest(out).get("error")


def nothing_captured(out: str | Path, skip_steps: int, delay: float) -> str | None:
    """Why a script that ran to its end left no capture behind, or None when something was captured."""
    manifest = _child_manifest(out)
    if any(manifest.get("captured", {}).values()):
        return None
    seen = manifest.get("steps_seen", 0)
    return (f"nothing was captured: the script ran {seen} step(s) (tf.function calls, Session.run calls or "
            f"rnnprof.step marks) and the window opens after --skip-steps {skip_steps} and --delay {delay:g} s")


def main(argv: Sequence[str] | None = None) -> int:
    """The bootstrap inside the child process."""
    argv = list(sys.argv[1:] if argv is None else argv)
    settings = json.loads(os.environ.pop(ENV, "{}") or "{}")
    if not settings.get("out"):
        print("rnnprof.profiler.capture.script: run me through `rnnprof trace --out DIR -- python ...`", file=sys.stderr)
        return 2
    command = settings.get("command") or argv
    # The parent prepared the directory; the writer exists before TensorFlow so a failed import is recorded.
    writer = RunWriter(settings["out"], command=command, force=True, config={"script": command})
    with terminate_as_interrupt():  # rnnprof passes SIGTERM on; the capture then closes as interrupted
        try:
            return _capture(writer, settings, argv)
        except KeyboardInterrupt:  # before the script started: TensorFlow was still loading
            ignore_interrupts()
            writer.finish(rundir.STATUS_INTERRUPTED)
            return 130


def _capture(writer: RunWriter, settings: dict, argv: list[str]) -> int:
    """Run the script under a capture that writes through ``writer``; returns its exit code."""
    try:
        import tensorflow  # noqa: F401  hooks go on TF's classes before the script builds anything
    except ImportError as exc:
        hint = settings.get("rnnprof_python") or "the Python that has TensorFlow"
        writer.manifest["error"] = (f"{sys.executable} cannot import tensorflow ({exc}); run the script with a "
                                    f"Python that has it, e.g. `-- {hint} {' '.join(argv)}`")
        writer.finish(rundir.STATUS_INTERRUPTED)
        return NO_TENSORFLOW

    from rnnprof.profiler.capture.api import Capture

    cap = Capture(settings["out"], steps=settings.get("steps"), skip_steps=settings.get("skip_steps", 0),
                  delay=settings.get("delay", 0.0), _writer=writer)
    cap.start()
    status, code = rundir.STATUS_COMPLETE, 0
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path.insert(0, str(Path(argv[0]).resolve().parent))
            runpy.run_path(argv[0], run_name="__main__")
    except KeyboardInterrupt:
        ignore_interrupts()  # one interrupt is enough: the capture closes now
        status, code = rundir.STATUS_INTERRUPTED, 130
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if code:
            status = rundir.STATUS_INTERRUPTED
            writer.manifest["error"] = f"the script exited with code {code}"
    except BaseException as exc:
        _print_user_traceback(exc)
        status, code = rundir.STATUS_INTERRUPTED, 1
        last_line = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()[-1]
        writer.manifest["error"] = f"the script raised {last_line}"
    finally:
        ignore_interrupts()  # closing writes the window's files; rnnprof kills a child that takes too long
        cap.close(status)
    return code


def _print_user_traceback(exc: BaseException) -> None:
    """The script's traceback from its own first frame: the bootstrap and runpy frames are not the user's."""
    tb = exc.__traceback__
    own = {__file__, runpy.__file__}
    while tb is not None and (tb.tb_frame.f_code.co_filename in own
                              or tb.tb_frame.f_code.co_filename.startswith("<frozen runpy")):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


if __name__ == "__main__":
    sys.exit(main())
