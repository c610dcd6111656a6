"""Short device names for 80-column output, and the legend of the full names, printed once.

One rule everywhere: the worker becomes its job's initial(s) and task (``/job:worker/replica:0/task:1`` ->
``w1``, ``/job:ps/replica:0/task:0`` -> ``ps0``, ``/job:chief/...task:0`` -> ``c0``, ``/job:localhost`` -> none;
a replica other than 0 is added after a dot, ``w1.2``), a PyTorch rank ``rankN`` becomes ``rN``, and the device
drops its colon and ``device:`` prefix (``/device:CPU:0`` or ``cpu:0`` -> ``cpu0``, ``gpu:1`` -> ``gpu1``).
So ``/job:worker/replica:0/task:1/device:CPU:0`` is ``w1/cpu0`` and ``rank3/gpu:0`` is ``r3/gpu0``.
``Legend.shorten_text`` replaces every device name found in a sentence.
"""

from __future__ import annotations

import re

from rich.console import Console
from rich.text import Text

_JOBS = {"worker": "w", "ps": "ps", "chief": "c", "master": "m", "evaluator": "e", "localhost": ""}
# a TF device (with or without its worker), a rank's device, or a worker alone
_NAME = re.compile(
    r"(?P<worker>(?:/job:(?P<job>[A-Za-z_][\w-]*))(?:/replica:(?P<replica>\d+))?(?:/task:(?P<task>\d+))?"
    r"|rank(?P<rank>\d+))?"
    r"(?:/?(?:device:)?(?P<kind>CPU|GPU|XLA_CPU|XLA_GPU|cpu|gpu|host)(?::(?P<index>\d+))?)?(?!\w)")


def _worker(match: re.Match) -> str:
    if match.group("rank") is not None:
        return f"r{match.group('rank')}"
    job = match.group("job")
    if job is None:
        return ""
    short = _JOBS.get(job, job[:2])
    if job == "localhost":
        return ""
    replica = match.group("replica")
    task = match.group("task") or "0"
    return f"{short}{task}" + (f".{replica}" if replica and replica != "0" else "")


def abbreviate(name: str) -> str:
    """The short form of one device (or worker) name; a name of no known shape comes back unchanged."""
    match = _NAME.fullmatch(name)
    if match is None or not (match.group("worker") or match.group("kind")):
        return name
    kind = match.group("kind")
    device = "" if kind is None else ("host" if kind == "host" else f"{kind.lower()}{match.group('index') or 0}")
    worker = _worker(match)
    return "/".join(part for part in (worker, device) if part) or name


class Legend:
    """The short names given so far, and their full names, to print once."""

    def __init__(self):
        self.full: dict[str, str] = {}  # short -> full

    def short(self, name: str) -> str:
        short = abbreviate(name)
        if short != name:
            taken = self.full.setdefault(short, name)
            if taken != name:  # two full names with one short form: keep the full one
                return name
        return short

    def shorten_text(self, text: str) -> str:
        """``text`` with every device name in it shortened (names with a job or a rank only)."""
        def one(match: re.Match) -> str:
            whole = match.group(0)
            if not (match.group("job") or (match.group("rank") and match.group("kind"))):
                return whole
            return self.short(whole)
        return _NAME.sub(one, text)

    def entries(self) -> list[tuple[str, str]]:
        return sorted(self.full.items())

    def render(self, console: Console) -> None:
        """One line per short name: ``w1/cpu0 = /job:worker/replica:0/task:1/device:CPU:0``."""
        if not self.full:
            return
        console.print(Text("devices:", style="bold"), highlight=False)
        for short, full in self.entries():
            console.print(Text(f"  {short} = {full}"), highlight=False, overflow="fold")
