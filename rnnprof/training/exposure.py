"""What a TensorFlow gRPC server of a cluster exposes, said in one line when it starts.

TensorFlow's distributed runtime has no authentication: whoever reaches a task's port can run a graph
on it, and a graph can read and write files as the user who started the task. TensorFlow binds its
server to every interface whatever host the cluster spec names, so the spec's host limits nothing.
``listening`` reads the sockets that really listen on a port (Linux's /proc/net/tcp and tcp6), so the
line says what was measured, not what was hoped.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
from pathlib import Path

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def parse_duration(text: str) -> float:
    """Seconds in ``90s``, ``30m``, ``12h``, ``2d`` or a plain number of seconds; ValueError otherwise."""
    match = _DURATION.match(text)
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"{text!r} is not a duration (expected a positive number with s, m, h or d, e.g. 12h)")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def listening(port: int, proc: Path = Path("/proc/net")) -> list[str] | None:
    """The local addresses with a socket listening on ``port`` (``0.0.0.0``/``::`` mean every interface);
    None where /proc/net cannot be read (not Linux)."""
    found, readable = [], False
    for name, width in (("tcp", 8), ("tcp6", 32)):
        try:
            lines = (proc / name).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            if len(fields) < 4 or fields[3] != _LISTEN:
                continue
            address, _, hex_port = fields[1].partition(":")
            if int(hex_port, 16) == port and len(address) == width:
                found.append(_address(address))
    return sorted(set(found)) if readable else None


def _address(hex_address: str) -> str:
    """An address as /proc/net/tcp writes it (little-endian 32-bit words) in the usual notation."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))


def every_interface(addresses: list[str] | None) -> bool:
    return bool(addresses) and any(ipaddress.ip_address(a).is_unspecified for a in addresses)


def _where(port: int, addresses: list[str] | None, spec_host: str) -> str:
    if addresses is None:
        return f"port {port} (TensorFlow binds every interface; the cluster spec's host {spec_host} limits nothing)"
    shown = ", ".join(f"[{a}]:{port}" if ":" in a else f"{a}:{port}" for a in addresses) or f"port {port}"
    if every_interface(addresses):
        return (f"{shown}, every interface (TensorFlow cannot bind to one address: the cluster spec's host "
                f"{spec_host} limits nothing)")
    return shown


RISK = ("with no authentication: whoever reaches it can run graphs that read and write files as this user; "
        "run it only on a trusted network or behind a firewall")


def worker_line(job: str, task: int, address: str, addresses: list[str] | None, until: datetime.datetime,
                timeout: str) -> str:
    """The start line of ``rnnprof worker``."""
    host, _, port = address.rpartition(":")
    return (f"{job} task {task}: TensorFlow's gRPC server listens on {_where(int(port), addresses, host)}, "
            f"{RISK}. It stops at {until:%Y-%m-%d %H:%M:%S %Z} (--timeout {timeout}); Ctrl-C stops it sooner.")


def cluster_line(tasks: list[tuple[str, list[str] | None]]) -> str:
    """The line a run with a local cluster prints once: what its tasks (``(address, listening)``) expose, for
    how long."""
    ports = ", ".join(address.rpartition(":")[2] for address, _ in tasks)
    measured = [found for _, found in tasks]
    if all(every_interface(found) for found in measured):
        where = f"on every interface, ports {ports}"
    elif any(found is None for found in measured):
        where = f"on ports {ports} (TensorFlow binds every interface)"
    else:
        where = "on " + ", ".join(_where(int(a.rpartition(":")[2]), found, a.rpartition(":")[0])
                                  for a, found in tasks)
    return f"the local cluster's {len(tasks)} TensorFlow gRPC server(s) listen {where}, {RISK}; they stop when " \
           f"this run ends."
