"""rnnprof view: open run directories in TensorBoard: rnnprof's tab (each run's findings, time per step, memory and
critical path) and, for a TensorFlow run, the profile plugin."""

from __future__ import annotations

import argparse
import errno
import os
import socket
import subprocess
import sys
from pathlib import Path

from rich.text import Text

from rnnprof import rundir
from rnnprof.training import child_processes
from rnnprof.commands.flags import INPUT
from rnnprof.paths import broken
from rnnprof.errors import InputError, UsageError



def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar=INPUT, help="a run directory or a folder holding run directories")
    parser.add_argument("--port", type=int, default=6006, help="port to serve on (default 6006; 0 picks a free one)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0 shares the run)")


def rnnprof_runs(path: Path) -> list[Path]:
    """Run directories under ``path`` (itself included), as rnnprof's tab lists them."""
    return sorted({p.parent for p in path.glob("**/" + rundir.MANIFEST) if rundir.is_run_dir(p.parent)})


def profile_runs(path: Path) -> list[Path]:
    """Folders under ``path`` that hold a TensorBoard profile (``plugins/profile/<run>/*.xplane.pb``)."""
    return sorted({p.parent.parent.parent.parent for p in path.glob("**/plugins/profile/*/*.xplane.pb")})


def tensorboard_command(logdir: Path, host: str, port: int) -> list[str]:
    return [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", host,
            "--port", str(port), "--reload_interval", "5"]


def run(args: argparse.Namespace, console) -> int:
    logdir = Path(args.path)
    if not logdir.is_dir():
        raise InputError(logdir, broken(logdir) or "is not a directory", "a run directory from `rnnprof trace` or a folder of them")
    if not 0 <= args.port < 65536:
        raise UsageError(f"--port must be between 0 and 65535, got {args.port}")
    if not profile_runs(logdir) and not rnnprof_runs(logdir):
        raise InputError(logdir, "holds no run directory (manifest.json) and no TensorBoard profile "
                                 "(plugins/profile/*/*.xplane.pb)",
                         "a run directory from `rnnprof trace` or a folder of them")
    check_port(args.host, args.port)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
    # TensorBoard (and its data server) run in a process group of their own, stopped as a whole
    # however this command ends: Ctrl-C, SIGTERM or SIGHUP (taken as Ctrl-C), an error, or TensorBoard exiting.
    with child_processes.signals_interrupt():
        process = None
        try:
            process = child_processes.start(tensorboard_command(logdir, args.host, args.port),
                                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
            return follow_tensorboard(process, console, profile=bool(profile_runs(logdir)))
        except KeyboardInterrupt:
            return 0
        finally:
            if process is not None:
                child_processes.stop(process)


PORT_ADVICE = "choose another --port, or --port 0 for a free one"


def check_port(host: str, port: int) -> None:
    """Refuse a port that something on this machine already listens on, at once, before TensorBoard and TensorFlow
    load (seconds): bound as TensorBoard binds it (``SO_REUSEADDR``), then let go. Port 0, a host that does not
    resolve and other bind errors are left to TensorBoard, which says what it makes of them."""
    if port == 0:
        return
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except (OSError, UnicodeError):
        return
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UsageError(f"port {port} on {host} is in use ({PORT_ADVICE})") from None


def follow_tensorboard(process: subprocess.Popen, console, profile: bool = True) -> int:
    """Print the URL of rnnprof's tab once TensorBoard serves (and the profile viewer's, with ``profile``), then
    follow its output until it exits."""
    url, failure = None, None
    for line in process.stdout:
        if url is None and "http://" in line:
            url = line[line.index("http://"):].split()[0].rstrip("/")
            console.print(Text.assemble("TensorBoard: rnnprof's findings ", (f"{url}/#rnnprof", "bold"),
                                        *((", profile viewer ", (f"{url}/#profile", "bold")) if profile else ()),
                                        "  (Ctrl-C to stop)"), soft_wrap=True)  # addresses never broken
        elif url is None and line.startswith("ERROR:"):  # TensorBoard's own message, e.g. a port in use
            failure = line[len("ERROR:"):].strip()
    if url is None:
        code = process.wait()
        raise UsageError(f"TensorBoard did not start: {failure or f'it exited with code {code}'}"
                         + (f" ({PORT_ADVICE})" if "port" in (failure or "") else ""))
    return 0
