"""Two sides of a comparison, each in its own process, taking turns step by step.

Run one after the other, two processes see different moments of a shared machine's load, and
a few seconds of timed steps are too short to average it out. Here both processes are started
and built first; then the parent asks one side for a step, waits for its answer, asks the other,
and so on, swapping who goes first every round. Only one side computes at any moment, and both
meet the same load within a fraction of a second.

A side is a child process running ``serve(make_step)``: ``make_step()`` builds the model and
returns ``step() -> (seconds, words)``, the wall time of one training step (timed by the side,
as its own protocol says) and the words it counted.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile


def serve(make_step) -> None:
    """The child's loop: build, say ``ready``, then one JSON line per ``step`` asked on stdin."""
    step = make_step()
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "step":
            break
        cpu = _cpu_seconds()
        seconds, words = step()
        print(json.dumps({"seconds": seconds, "words": words, "cpu": _cpu_seconds() - cpu}), flush=True)


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _start(argv: list[str]) -> subprocess.Popen:
    # stderr to a file: TensorFlow's log lines must not fill a pipe nobody reads while stepping
    log = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen([sys.executable, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=log, text=True)
    proc.log = log
    return proc


def _read(proc: subprocess.Popen, name: str) -> str:
    line = proc.stdout.readline()
    if not line:
        proc.wait()
        proc.log.seek(0)
        raise SystemExit(f"{name} side failed:\n{proc.log.read()[-3000:]}")
    return line.strip()


def lockstep(sides: dict[str, list[str]], warmup: int, batches: int) -> dict[str, dict]:
    """Start each side (``name -> argv``), then ``warmup`` untimed and ``batches`` timed rounds of one
    step per side, alternating who goes first. Returns per side the timed words/s, seconds and CPU
    seconds (of the side's whole process while it stepped)."""
    procs = {name: _start(argv) for name, argv in sides.items()}
    try:
        for name, proc in procs.items():
            while _read(proc, name) != "ready":  # a side may print while it builds
                pass
        names = list(procs)
        timed = {name: [] for name in names}
        for k in range(warmup + batches):
            for name in (names if k % 2 == 0 else names[::-1]):
                procs[name].stdin.write("step\n")
                procs[name].stdin.flush()
                result = json.loads(_read(procs[name], name))
                if k >= warmup:
                    timed[name].append(result)
        for proc in procs.values():
            proc.stdin.write("stop\n")
            proc.stdin.flush()
    finally:
        for proc in procs.values():
            try:
                proc.stdin.close()
            except OSError:
                pass
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    out = {}
    for name, steps in timed.items():
        seconds = sum(s["seconds"] for s in steps)
        out[name] = {"words_per_second": sum(s["words"] for s in steps) / seconds, "seconds": seconds,
                     "cpu_seconds": sum(s["cpu"] for s in steps)}
    return out
