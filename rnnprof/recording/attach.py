"""Capturing from a running job that started ``tf.profiler.experimental.server.start(port)``."""

from __future__ import annotations

import re
import shutil
import threading
from pathlib import Path

from rnnprof.errors import InputError, InterruptedRun, UsageError
from rnnprof import rundir
from rnnprof.rundir.writer import RunWriter
from rnnprof.frameworks.tensorflow import import_tensorflow

_ADDRESS = re.compile(r"^(?:grpc://)?(?P<host>\[[0-9a-fA-F:]+\]|[A-Za-z0-9._-]+):(?P<port>\d{1,5})$")


def service_address(text: str) -> str:
    """``grpc://HOST:PORT`` (or ``HOST:PORT``) -> the form tf.profiler's client takes."""
    match = _ADDRESS.match(text.strip())
    if not match or not 0 < int(match.group("port")) < 65536:
        raise UsageError(f"--attach expects grpc://HOST:PORT, got {text!r}")
    return f"grpc://{match.group('host')}:{match.group('port')}"


def attach_capture(address: str, duration_s: float, out_dir: str | Path, force: bool = False,
                   command=None, attempts: int = 3) -> RunWriter:
    """Ask the job's profiler server for ``duration_s`` seconds of trace into ``out_dir``."""
    address = service_address(address)
    if duration_s <= 0:
        raise UsageError(f"--duration must be positive, got {duration_s}")

    tf = import_tensorflow()

    writer = RunWriter(out_dir, command=command, force=force, config={"attach": address, "duration_s": duration_s})
    scratch = writer.scratch_dir("attach")
    status = rundir.STATUS_INTERRUPTED
    try:
        try:
            _interruptible(lambda: tf.profiler.experimental.client.trace(
                address, str(scratch), duration_ms=int(duration_s * 1000), num_tracing_attempts=attempts))
        except KeyboardInterrupt:
            raise InterruptedRun(f"interrupted before {address} sent its trace (run directory: {writer.path})"
                                 ) from None
        except tf.errors.OpError as exc:
            message = (exc.message or str(exc)).strip().splitlines()[0]
            raise InputError(address, f"profiler capture failed: {message}",
                             "a job that called tf.profiler.experimental.server.start(PORT)") from None
        if not writer.adopt_profile(scratch):
            raise InputError(address, "the profiler server returned no trace", "a job running TensorFlow ops")
        status = rundir.STATUS_COMPLETE
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        writer.finish(status)
    return writer


def _interruptible(call) -> None:
    """Run ``call`` in a thread and wait for it in the main thread, where Ctrl-C and SIGTERM land.

    The profiler client blocks in C++ for the whole capture, and Python runs signal handlers only between
    bytecodes of the main thread; waiting here lets an interrupt end the command at once. An abandoned
    call ends with the process.
    """
    outcome: dict = {}

    def target():
        try:
            call()
        except BaseException as exc:  # handed to the main thread
            outcome["error"] = exc

    worker = threading.Thread(target=target, name="rnnprof-attach", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
    if "error" in outcome:
        raise outcome["error"]
