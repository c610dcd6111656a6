"""Running a user's script under capture: ``rnnprof trace --out DIR -- python train.py ARGS``, or
``-- torchrun OPTIONS train.py ARGS`` for PyTorch jobs of several ranks.

The script runs in a child ``python -m rnnprof.recording.script``, which picks the framework by what the
script imports (``script_framework``; a script naming neither gets the capture of the first it imports, as that
import ends), opens the capture (TensorFlow: a ``Capture`` hooking ``Session.run`` and ``tf.function``; torch: a
``TorchScriptCapture``) and runs the script with ``runpy`` as ``__main__``. The parent
prepares the directory, waits, and marks the run interrupted if the child died first; for torch it rebuilds
the manifest from the ranks' records and passes on a failing rank's exit code. On SIGINT or SIGTERM it passes
SIGTERM on (``_stop``) and kills what still runs ``STOP_GRACE_S`` seconds later or at a second interrupt.
See docs/commands/trace.md.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import runpy
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Sequence

from rnnprof.errors import InputError, UsageError
from rnnprof import rundir
from rnnprof.recording import ranks
from rnnprof.recording.interrupt import ignore_interrupts, interrupt_once
from rnnprof.events import Manifest
from rnnprof.rundir.manifest import kept_in, new_manifest, read_manifest, read_manifest_json
from rnnprof.recording.launch import launch_command
from rnnprof.recording.hang_collect import ProbedRanks, remark_hung
from rnnprof.recording.hang_probe import FR_BUFFER, FR_BUFFER_ENV, TASKS, remove_probe_files, tensorflow_probe
from rnnprof.recording.hang_watch import HUNG_EXIT, POLL_S, HangOptions, HangWatch
from rnnprof.rundir.writer import RunWriter, atomic_write_json, check_out_dir, prepare_out_dir
from rnnprof.recording.imports import when_imported
from rnnprof.recording.tf_capture import TensorFlowCapture
from rnnprof.recording.torch_script import TorchScriptCapture
from rnnprof.recording.watch_rank import TorchRankWatch
from rnnprof.recording.torchrun_launch import ACCEPTED, CHANNEL_ENV, GO

ENV = "RNNPROF_CAPTURE"
HANG_STOP_GRACE_S = 2  # a hung job: how long its ranks have after SIGTERM before SIGKILL
STOP_GRACE_S = 4  # how long an interrupted script may take to close its capture before it is killed
_PR_SET_PDEATHSIG = 1  # prctl option: the signal a process gets when its parent dies
_NO_DELAY = "--delay applies to TensorFlow scripts; a PyTorch script's window is set by --skip-steps and --steps"
NO_TENSORFLOW = 2  # the child's exit code when its Python has no TensorFlow (rnnprof's error, not the script's)


def run_script(out_dir: str | Path, command: Sequence[str], steps: int | None = 3, skip_steps: int = 1,
               delay: float = 0.0, force: bool = False, hang: HangOptions = HangOptions(),
               watch: dict | None = None, beside=None) -> int:
    """Run ``command`` under capture into ``out_dir``; returns the script's exit code (``HUNG_EXIT`` when the
    job hung and was stopped). ``watch``: the ranks watch their steps instead (``rnnprof watch``; its settings),
    and ``beside`` (a context manager) runs while the job does, from the moment its run directory is ready."""
    launch = launch_command(command)
    if launch.torchrun and delay:
        raise UsageError(_NO_DELAY)
    out = check_out_dir(out_dir, force=force)  # refused before anything starts

    def open_run() -> None:
        prepare_out_dir(out, force=force)
        atomic_write_json(out / rundir.MANIFEST, new_manifest(list(command), {"script": list(command)}))

    env = _child_environment({"out": str(out), "steps": steps, "skip_steps": skip_steps, "delay": delay,
                              "command": list(command), "rnnprof_python": sys.executable,
                              "torchrun": launch.torchrun, "watch": watch})
    if launch.torchrun:
        child = _start_torchrun(launch.argv, env, open_run)
    else:
        open_run()
        child = subprocess.Popen(launch.argv, env=env, preexec_fn=_end_with_parent())
    interrupted, hung, watch = False, False, HangWatch(out, ProbedRanks(out), hang)
    with ranks.ExitWatch(out) as exits, beside or contextlib.nullcontext():  # exits: which rank ended first
        try:
            code, hung = _wait(child, out, hang, watch)
        except KeyboardInterrupt:
            interrupted = True
            code = _stop(child, out)
    records = ranks.read_records(out)
    if records:  # torch: the ranks recorded themselves
        _stop_leftover_ranks(records, time.monotonic() + (HANG_STOP_GRACE_S if hung else STOP_GRACE_S))
        for record in records:
            record["exited"] = exits.exited.get(record["rank"])
        code = HUNG_EXIT if hung else ranks.exit_code_of(records, code)
        ranks.combine(out, list(command), exit_code=130 if interrupted else code, exited=exits.exited)
        remove_probe_files(out)
    elif watch.record is not None:  # a TensorFlow script that hung: its process closed its capture, or was killed
        code = HUNG_EXIT if hung else code
        remark_hung(out, watch.record)
        remove_probe_files(out, TASKS)
    else:
        _mark_unfinished(out, list(command), code)
        remove_probe_files(out, TASKS)
    return 130 if interrupted or code == -signal.SIGINT else code


def _child_environment(settings: dict) -> dict:
    """The environment of the script's processes: rnnprof importable, the bootstrap's ``settings``, the flight
    recorder on."""
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])  # the folder holding rnnprof/
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # TF's info lines (profiler sessions) are rnnprof's noise
    env[ENV] = json.dumps(settings)
    env.setdefault(FR_BUFFER_ENV, FR_BUFFER)  # each rank's flight recorder, for the hang watch
    return env


def _start_torchrun(argv: list[str], env: dict, open_run) -> subprocess.Popen:
    """torchrun's launcher (``torchrun_launch``) started; once it accepts the options, ``open_run()`` and the
    launcher told to go on. Where it refuses them, its one line is a ``UsageError`` and nothing is written; where
    ``open_run`` fails, the launcher runs nothing."""
    ours, theirs = socket.socketpair()
    with ours:
        with theirs:
            child = subprocess.Popen(argv, env={**env, CHANNEL_ENV: str(theirs.fileno())},
                                     pass_fds=(theirs.fileno(),), preexec_fn=_end_with_parent())
        try:
            verdict = ours.makefile("rb").readline()
            if verdict != ACCEPTED:
                code = child.wait()
                raise UsageError(verdict.decode(errors="replace").strip()
                                 or f"torchrun's launcher ended before it read its options (exit code {code})")
            open_run()
            ours.sendall(GO)
        except BaseException:
            if child.poll() is None:
                child.terminate()
                child.wait()
            raise
    return child


def _wait(child: subprocess.Popen, out: Path, hang: HangOptions, watch: HangWatch) -> tuple[int, bool]:
    """Wait for the job, watching it for a hang (``watch``): (its exit code, whether it hung and was stopped).
    With ``hang.stop`` a hung job is stopped at once; otherwise (the watch said the verdict) the job is waited
    for."""
    waiting = False
    while True:
        try:
            return child.wait(timeout=POLL_S), False
        except subprocess.TimeoutExpired:
            pass
        if waiting:
            continue
        verdict = watch.poll()
        if verdict is not None and hang.stop:
            return _stop_hung(child, out), True
        waiting = verdict is not None


def _stop_hung(child: subprocess.Popen, out: Path) -> int:
    """Stop a hung job: SIGTERM to the launcher and every rank, SIGKILL to what runs ``HANG_STOP_GRACE_S`` later
    (a rank blocked in a collective cannot act on SIGTERM: its main thread does not return to Python)."""
    deadline = time.monotonic() + HANG_STOP_GRACE_S
    child.send_signal(signal.SIGTERM)
    _signal_pids(ranks.leftover_ranks(ranks.read_records(out)), signal.SIGTERM)
    try:
        return child.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _signal_pids(ranks.leftover_ranks(ranks.read_records(out)), signal.SIGKILL)
        child.kill()
        return child.wait()


def _stop_leftover_ranks(records: list[dict], deadline: float) -> None:
    """Ranks still running once the launcher has exited (it was killed before it could stop them): asked
    to close with SIGTERM, killed if still there at ``deadline`` (``time.monotonic()``)."""
    _signal_pids(ranks.leftover_ranks(records), signal.SIGTERM)
    try:
        while ranks.leftover_ranks(records) and time.monotonic() < deadline:
            time.sleep(0.05)
    except KeyboardInterrupt:
        pass
    _signal_pids(ranks.leftover_ranks(records), signal.SIGKILL)


def _signal_pids(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except OSError:
            pass


def _stop(child: subprocess.Popen, out: Path) -> int:
    """Stop the script after an interrupt and return its exit code.

    Ctrl-C reaches the whole process group; a SIGINT or SIGTERM sent to rnnprof alone reaches only rnnprof.
    Either way rnnprof passes SIGTERM on, to the launcher (python or torchrun) and to every rank that has
    recorded itself; the bootstrap takes the first signal and ignores the rest, so a second one does no harm.
    Each rank closes its capture (a window being exported is finished first; the run says ``interrupted``);
    whatever has not exited ``STOP_GRACE_S`` seconds after the interrupt, or at a second interrupt, is killed
    (ranks that outlive the launcher by ``_stop_leftover_ranks``, with the same deadline).
    """
    deadline = time.monotonic() + STOP_GRACE_S
    try:
        child.send_signal(signal.SIGTERM)
        _signal_pids(ranks.leftover_ranks(ranks.read_records(out)), signal.SIGTERM)
        return child.wait(timeout=max(0.0, deadline - time.monotonic()))
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
    manifest = _child_manifest_json(out) or new_manifest(command, {"script": command})
    if manifest.get("status") == rundir.STATUS_COMPLETE and code == 0:
        return
    if manifest.get("status") != rundir.STATUS_COMPLETE:
        manifest["status"] = rundir.STATUS_INTERRUPTED
    manifest["exit_code"] = code
    atomic_write_json(out / rundir.MANIFEST, manifest)


def _child_manifest_json(out: str | Path) -> dict:
    """The run's manifest as the child left it, as a JSON object to rewrite; empty when it cannot be read."""
    try:
        return read_manifest_json(Path(out))
    except InputError:
        return {}


def _child_manifest(out: str | Path) -> Manifest:
    """The run's manifest as the child left it; empty (every field its default) when it cannot be read."""
    try:
        return read_manifest(Path(out))
    except InputError:
        return Manifest()


def script_failure(out: str | Path) -> str | None:
    """Why the script's capture stopped, as the child recorded it in the manifest."""
    return _child_manifest(out).error


def what_was_kept(out: str | Path) -> str:
    """What an interrupted run holds, as its manifest lists it (the manifest matches the files on disk)."""
    return kept_in(out, _child_manifest(out))


def hang_verdict(out: str | Path) -> str | None:
    """The verdict the hang watch recorded in the manifest, or None."""
    hang = _child_manifest(out).hang
    return str(hang.get("verdict")) if hang and hang.get("verdict") else None


def errors_after_failure(out: str | Path) -> tuple[int | None, list[str]]:
    """The rank that failed first and the other ranks' errors after it (its consequences), in order."""
    manifest = _child_manifest(out)
    return manifest.failed_rank, list(manifest.errors_after)


def nothing_captured(out: str | Path, skip_steps: int, delay: float) -> str | None:
    """Why a script that ran to its end left no capture behind, or None when something was captured."""
    manifest = _child_manifest(out)
    if any(manifest.captured.values()):
        return None
    if manifest.framework != ranks.FRAMEWORK and not manifest.has("steps_seen"):  # no capture ran (_capture_either)
        return ("nothing was captured: the script imported neither TensorFlow nor torch (rnnprof captures the one a "
                "script imports)")
    seen = manifest.steps_seen if manifest.has("steps_seen") else 0
    if manifest.framework == ranks.FRAMEWORK:
        return (f"nothing was captured: the script ran {seen} step(s) (optimizer.step calls or rnnprof.step "
                f"marks) and the window opens after --skip-steps {skip_steps}")
    return (f"nothing was captured: the script ran {seen} step(s) (tf.function calls, Session.run calls or "
            f"rnnprof.step marks) and the window opens after --skip-steps {skip_steps} and --delay {delay:g} s")


def main(argv: Sequence[str] | None = None) -> int:
    """The bootstrap inside the child process (each rank's, under torchrun)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    settings = json.loads(os.environ.pop(ENV, "{}") or "{}")
    if not settings.get("out"):
        print("rnnprof.recording.script: run me through `rnnprof trace --out DIR -- python ...`", file=sys.stderr)
        return 2
    if settings.get("torchrun"):
        _end_with_launcher()
    framework = script_framework(argv) or (TORCH if settings.get("torchrun") else None)
    with interrupt_once():  # SIGINT or SIGTERM (rnnprof passes its own on): the capture closes as interrupted
        if settings.get("watch"):
            return _watch_torch(settings, argv, framework)
        if framework == TORCH:
            return _capture_torch(settings, argv)
        if framework == TENSORFLOW and settings.get("torchrun"):
            return _refuse_rank(settings, "rnnprof captures a TensorFlow script run by `-- python`, not by torchrun")
        if framework is None:
            return _capture_either(settings, argv)
        return _capture_tensorflow(settings, argv)


TORCH, TENSORFLOW = "torch", "tensorflow"
_FRAMEWORK_OF = {"torch": TORCH, "tensorflow": TENSORFLOW, "keras": TENSORFLOW}


def script_framework(argv: list[str]) -> str | None:
    """"torch" or "tensorflow" by the import statements of the script and of the modules it imports from
    its own folder; None if they name neither. A file importing both is taken for TensorFlow, as before
    torch capture existed.
    """
    if argv and argv[0] == "-m":
        import importlib.util

        try:
            spec = importlib.util.find_spec(argv[1])
        except (ImportError, ValueError):
            return None
        path = getattr(spec, "origin", None)
    else:
        path = argv[0] if argv else None
    return _framework_of(Path(path), Path(path).parent, set()) if path else None


_LOCAL_MODULES = 50  # at most this many of the script's own modules are read


def _framework_of(path: Path, folder: Path, seen: set) -> str | None:
    """The framework ``path`` imports, itself or through the modules it imports from ``folder``."""
    import ast

    seen.add(path.resolve())
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None  # the script's own error shows when it runs
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module.split(".")[0])
    found = {_FRAMEWORK_OF.get(name) for name in names}
    if TENSORFLOW in found or TORCH in found:
        return TENSORFLOW if TENSORFLOW in found else TORCH
    for name in dict.fromkeys(names):
        for local in (folder / f"{name}.py", folder / name / "__init__.py"):
            if local.is_file() and local.resolve() not in seen and len(seen) < _LOCAL_MODULES:
                framework = _framework_of(local, folder, seen)
                if framework:
                    return framework
    return None


def _capture_tensorflow(settings: dict, argv: list[str]) -> int:
    """TensorFlow's capture, TensorFlow imported before the script runs."""
    writer = _tensorflow_writer(settings, argv)
    try:
        return _capture(writer, settings, argv)
    except KeyboardInterrupt:  # before the script started: TensorFlow was still loading
        ignore_interrupts()
        writer.finish(rundir.STATUS_INTERRUPTED)
        return 130


def _tensorflow_writer(settings: dict, argv: list[str]) -> RunWriter:
    # The parent prepared the directory; the writer exists before TensorFlow so a failed import is recorded.
    command = settings.get("command") or argv
    return RunWriter(settings["out"], command=command, force=True, config={"script": command})


def _capture_either(settings: dict, argv: list[str]) -> int:
    """A script that names neither framework (it gets one through a library: Lightning, transformers): nothing is
    imported before it runs; the capture of the framework it imports first starts as that import ends, before the
    script can build anything with it, and TensorFlow's gives way to torch's if torch comes before TensorFlow ran a
    step. A script that imports neither leaves TensorFlow's run, with nothing captured."""
    writer = _tensorflow_writer(settings, argv)
    caps: list = []

    def tensorflow_imported(module) -> None:
        if not caps:
            caps.append(_tensorflow_capture(settings, writer))

    cancels = [when_imported("tensorflow", tensorflow_imported),
               when_imported("torch", lambda module: _switch_to_torch(caps, settings))]
    status, code, error = rundir.STATUS_COMPLETE, 0, None
    try:
        status, code, error = _run(argv)
    finally:
        ignore_interrupts()  # closing writes the window's files; rnnprof kills a child that takes too long
        for cancel in cancels:
            cancel()
        if caps:
            _close(caps[-1], status, code, error)
        else:  # no capture ran: the manifest has no steps_seen, which ``nothing_captured`` reads
            if error:
                writer.manifest["error"] = error
            writer.finish(status)
    return code


def _capture(writer: RunWriter, settings: dict, argv: list[str]) -> int:
    """Run the script under TensorFlow's capture, which writes through ``writer``; returns its exit code."""
    try:
        import tensorflow  # noqa: F401  hooks go on TF's classes before the script builds anything
    except ImportError as exc:
        hint = settings.get("rnnprof_python") or "the Python that has TensorFlow"
        writer.manifest["error"] = (f"{sys.executable} cannot import tensorflow ({exc}); run the script with a "
                                    f"Python that has it, e.g. `-- {hint} {' '.join(argv)}`")
        writer.finish(rundir.STATUS_INTERRUPTED)
        return NO_TENSORFLOW
    cap = _tensorflow_capture(settings, writer)
    status, code, error = rundir.STATUS_COMPLETE, 0, None
    try:
        status, code, error = _run(argv)
    finally:
        ignore_interrupts()  # closing writes the window's files; rnnprof kills a child that takes too long
        _close(cap, status, code, error)
    return code


def _switch_to_torch(caps: list, settings: dict) -> None:
    """Open torch's capture as torch is imported: at once where no capture runs yet, else in place of TensorFlow's
    where TensorFlow has not run a step (which keeps its capture)."""
    if caps:
        if caps[-1]._seen_steps:
            return
        caps[-1].close(rundir.STATUS_RUNNING)
    (Path(settings["out"]) / rundir.MANIFEST).unlink(missing_ok=True)  # the ranks' manifest replaces it
    caps.append(_torch_capture(settings))


def _tensorflow_capture(settings: dict, writer: RunWriter):
    cap = TensorFlowCapture(settings["out"], steps=settings.get("steps"), skip_steps=settings.get("skip_steps", 0),
                            delay=settings.get("delay", 0.0), _writer=writer, _probe=tensorflow_probe(settings["out"]))
    return cap.start()


def _torch_capture(settings: dict):
    return TorchScriptCapture(settings["out"], steps=settings.get("steps"), skip_steps=settings.get("skip_steps", 0),
                              command=settings.get("command"), _prepared=True).start()


def _capture_torch(settings: dict, argv: list[str]) -> int:
    if settings.get("delay"):
        return _refuse_rank(settings, _NO_DELAY)
    cap, status, code, error = None, rundir.STATUS_COMPLETE, 0, None
    try:
        try:
            import torch  # noqa: F401  the optimizer hooks go in before the script builds anything
        except ImportError as exc:
            hint = settings.get("rnnprof_python") or "the Python that has torch"
            return _refuse_rank(settings, f"{sys.executable} cannot import torch ({exc}); run the script with a "
                                          f"Python that has it, e.g. `-- {hint} {' '.join(argv)}`")
        cap = _torch_capture(settings)
        status, code, error = _run(argv)
    except KeyboardInterrupt:  # before the script started: torch was still loading
        status, code = rundir.STATUS_INTERRUPTED, 130
    finally:
        ignore_interrupts()
        if cap is not None:
            _close(cap, status, code, error)
        elif status == rundir.STATUS_INTERRUPTED:
            _rank_record(settings, status, code, None, stopped=True)
    return code


def _watch_torch(settings: dict, argv: list[str], framework: str | None) -> int:
    """A rank of a watched job (``rnnprof watch``): its steps measured, windows captured when asked."""
    if framework == TENSORFLOW:
        return _refuse_rank(settings, WATCH_TORCH_ONLY)
    watch, status, code, error = None, rundir.STATUS_COMPLETE, 0, None
    try:
        import torch  # noqa: F401  the optimizer hooks go in before the script builds anything

        watch = TorchRankWatch(settings["out"], command=settings.get("command")).start()
        status, code, error = _run(argv)
    except ImportError as exc:
        return _refuse_rank(settings, f"{sys.executable} cannot import torch ({exc})")
    except KeyboardInterrupt:
        status, code = rundir.STATUS_INTERRUPTED, 130
    finally:
        ignore_interrupts()
        if watch is not None:
            watch.close(status, exit_code=code, error=error, stopped=code == 130)
    return code


WATCH_TORCH_ONLY = ("rnnprof watch runs PyTorch scripts (-- python or -- torchrun); TensorFlow is watched through "
                    "the built-in workloads (rnnprof watch --model ...)")


def _run(argv: list[str]) -> tuple[str, int, str | None]:
    """Run the script as ``__main__``: (run status, exit code, why it failed)."""
    status, code, error = rundir.STATUS_COMPLETE, 0, None
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
        ignore_interrupts()  # the script has ended: a stop arriving now must not replace how it ended
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if code:
            status = rundir.STATUS_INTERRUPTED
            error = f"the script exited with code {code}"
    except BaseException as exc:
        ignore_interrupts()
        _print_user_traceback(exc)
        status, code = rundir.STATUS_INTERRUPTED, 1
        last_line = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()[-1]
        error = f"the script raised {last_line}"
    return status, code, error


def _close(cap, status: str, code: int, error: str | None) -> None:
    """Close either framework's capture with how the script ended."""

    if isinstance(cap, TensorFlowCapture):
        if error:
            cap.writer.manifest["error"] = error
        cap.close(status)
    else:
        cap.close(status, exit_code=code, error=error, stopped=code == 130)


def _refuse_rank(settings: dict, reason: str) -> int:
    """A rank that cannot run its script under capture says why in its record (rnnprof prints it); exit code 2."""
    _rank_record(settings, rundir.STATUS_INTERRUPTED, NO_TENSORFLOW, reason)
    return NO_TENSORFLOW


def _rank_record(settings: dict, status: str, code: int, error: str | None, stopped: bool = False) -> None:
    import time

    rank = int(os.environ.get("RANK", 0) or 0)
    record = {"rank": rank, "pid": os.getpid(), "world_size": int(os.environ.get("WORLD_SIZE", 1) or 1),
              "trace": None, "steps": [], "steps_run": 0, "status": status, "exit_code": code,
              "stopped": stopped, "ended": time.time()}
    if error:
        record["error"] = error
    ranks.write_record(settings["out"], record, settings.get("command"))


def _end_with_launcher() -> None:
    """A rank gets SIGTERM when torchrun's agent dies, even by SIGKILL (Linux), and goes at once if it already has."""
    prctl = _end_with_parent()
    if prctl is not None:
        prctl()
    if os.getppid() == 1:
        os._exit(1)


def _print_user_traceback(exc: BaseException) -> None:
    """The script's traceback from its own first frame: the bootstrap and runpy frames are not the user's."""
    tb = exc.__traceback__
    own = {__file__, runpy.__file__}
    while tb is not None and (tb.tb_frame.f_code.co_filename in own
                              or tb.tb_frame.f_code.co_filename.startswith("<frozen runpy")):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


def _exit_now(code: int) -> None:
    """End the process at once after an interrupt (the capture is closed and on disk), without the
    interpreter's teardown (a second or more with torch or TensorFlow loaded), so the job stops in seconds."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


if __name__ == "__main__":
    _code = main()
    if _code == 130:
        _exit_now(_code)
    sys.exit(_code)
