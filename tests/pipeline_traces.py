"""Kineto rank files of a pipeline run exactly by its schedule: each stage's forwards and backwards in the order
GPipe or 1F1B runs them, each as early as its stage and its input allow, the sends and receives between stages as a
gloo job records them (``c10d::send``/``c10d::recv_`` calls, ``gloo:send``/``gloo:recv`` runs, the peer in the
call's arguments). With equal stages and transfers that take no time, the bubble is the schedule's theory,
(p-1)/(m+p-1): the oracle of ``rnnprof pipeline``'s arithmetic.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

GAP_US = 500.0  # between one step's last work and the next step's first: the gradients' scaling, the optimizer's
OPTIMIZER_US = 200.0
ELEMENTS = [[1, 4, 8]]  # a micro-batch's activations, as gloo's calls record them


def order(kind: str, stages: int, micro: int, stage: int) -> list[tuple[str, int]]:
    """The actions of ``stage``: GPipe runs every forward, then every backward; 1F1B runs p - stage - 1 forwards,
    then one forward and one backward in turn, then the backwards left."""
    if kind == "gpipe":
        return [("F", k) for k in range(micro)] + [("B", k) for k in range(micro)]
    warm = min(stages - stage - 1, micro)
    found = [("F", k) for k in range(warm)]
    for k in range(warm, micro):
        found += [("F", k), ("B", k - warm)]
    return found + [("B", k) for k in range(micro - warm, micro)]


def simulate(kind: str, stages: int, micro: int, forward_us: list[float], backward_us: list[float],
             latency_us: float = 0.0) -> dict[tuple[int, str, int], tuple[float, float, float]]:
    """``(stage, action, micro-batch) -> (posted, start, end)``: each action starts when its stage is free and its
    input has arrived (``latency_us`` after the other stage's action ended); ``posted``: when the stage was ready
    for it (its receive posted)."""
    todo = {s: order(kind, stages, micro, s) for s in range(stages)}
    free = [0.0] * stages
    done: dict[tuple[int, str, int], tuple[float, float, float]] = {}
    while any(todo.values()):
        moved = False
        for s in range(stages):
            while todo[s]:
                action, k = todo[s][0]
                dep = ((s - 1, "F", k) if s > 0 else None) if action == "F" else \
                    ((s + 1, "B", k) if s < stages - 1 else (s, "F", k))
                if dep is not None and dep not in done:
                    break
                arrived = 0.0 if dep is None else done[dep][2] + (latency_us if dep[0] != s else 0.0)
                start = max(free[s], arrived)
                end = start + (forward_us if action == "F" else backward_us)[s]
                done[(s, action, k)] = (free[s], start, end)
                free[s] = end
                todo[s].pop(0)
                moved = True
        assert moved, "the schedule deadlocked"
    return done


def _event(name: str, cat: str, tid: int, ts: float, dur: float, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": tid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _p2p(call: str, peer: int, tid: int, posted: float, arrived: float) -> list[dict]:
    """A call posted at ``posted`` and its gloo run; a receive's call blocks until its data arrives, and gloo records
    its run then."""
    inputs = {"Input Dims": [ELEMENTS, [], [], []], "Input type": ["TensorList", "", "Scalar", "Scalar"],
              "Concrete Inputs": ["", "", str(peer), "0"]}
    run = {"Input Dims": ELEMENTS, "Input type": ["float"], "Concrete Inputs": [""]}
    if call == "send":
        return [_event("c10d::send", "cpu_op", tid, posted, 1.0, **inputs),
                _event("gloo:send", "user_annotation", tid, posted + 1.0, max(arrived - posted - 1.0, 0.5), **run)]
    posted = min(posted, arrived - 1.0)
    return [_event("c10d::recv_", "cpu_op", tid, posted, arrived - posted, **inputs),
            _event("gloo:recv", "user_annotation", tid, arrived - 0.5, 0.5, **run)]


def write_job(folder: Path, kind: str, stages: int, micro: int, forward_us: list[float], backward_us: list[float],
              steps: int = 3, latency_us: float = 0.0, ranges: bool | str = True) -> list[Path]:
    """One gzipped Kineto file per rank in ``folder`` (``rank<r>.json.gz``), ``steps`` steps (``ProfilerStep#1``
    on), each with work that is no micro-batch's: a split of the batch before the first input arrives (ranks past
    the first), a scaling of the gradients after the pipeline's last work, the optimizer's step. ``ranges``: each
    micro-batch's work inside a ``forward``/``backward`` range (as rnnprof's pipelines record them), or with
    ``"gpipe"`` inside torch's ScheduleGPipe's ``Forward i``/``Backward i``, which also hold the wait for the
    micro-batch's input (from its receive's posting); else its operators alone, a backward's inside autograd's
    backward function."""
    done = simulate(kind, stages, micro, forward_us, backward_us, latency_us)
    last = max(end for _, _, end in done.values())
    period = last + GAP_US
    events: dict[int, list[dict]] = {s: [] for s in range(stages)}
    for n in range(steps):
        base = 1000.0 + n * period
        for s in range(stages):
            tid = 100 + s
            mine = events[s]
            mine.append(_event(f"ProfilerStep#{n + 1}", "user_annotation", tid, base - 200, period - 1.0))
            if s > 0:  # the batch split before the stage's first input arrives: no micro-batch's work
                mine.append(_event("aten::chunk", "cpu_op", tid, base - 150, 100))
            # after the pipeline's last work: scaling the gradients, then the optimizer's step
            mine.append(_event("aten::div_", "cpu_op", tid, base + last + 10, 100))
            mine.append(_event("Optimizer.step#SGD.step", "user_annotation", tid, base + last + 150, OPTIMIZER_US))
            mine.append(_event("aten::add_", "cpu_op", tid, base + last + 160, OPTIMIZER_US - 20))
            for (stage, action, k), (posted, start, end) in done.items():
                if stage != s:
                    continue
                _work(mine, action, k, tid, base + posted, base + start, end - start, ranges)
                _transfers(mine, s, stages, action, tid, base, posted, start, end, k, done, latency_us)
    paths = []
    for s in range(stages):
        document = {"schemaVersion": 1, "distributedInfo": {
            "backend": "gloo", "rank": s, "world_size": stages,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": stages, "ranks": list(range(stages))}]},
            "traceEvents": sorted(events[s], key=lambda e: (e["ts"], -e["dur"]))}
        path = folder / f"rank{s}.json.gz"
        path.write_bytes(gzip.compress(json.dumps(document).encode()))
        paths.append(path)
    return paths


def _work(mine: list, action: str, k: int, tid: int, posted: float, start: float, dur: float,
          ranges: bool | str) -> None:
    if ranges == "gpipe":  # torch's range holds the wait for the input too: from the receive's posting
        mine.append(_event(f"{'Forward' if action == 'F' else 'Backward'} {k}", "user_annotation", tid, posted,
                           start + dur - posted))
    elif ranges:
        mine.append(_event("forward" if action == "F" else "backward", "user_annotation", tid, start, dur))
    name = "aten::mm" if action == "F" else "autograd::engine::evaluate_function: MmBackward0"
    mine.append(_event(name, "cpu_op", tid, start, dur))


def _transfers(mine: list, s: int, stages: int, action: str, tid: int, base: float, posted: float, start: float,
               end: float, k: int, done: dict, latency_us: float) -> None:
    """The receive that brought the action its input (posted when the stage was ready for it) and the send of its
    output to the next stage (forward) or the previous one (backward)."""
    source = s - 1 if action == "F" else s + 1
    if 0 <= source < stages:
        mine.extend(_p2p("recv", source, tid, base + posted, base + start))
    target = s + 1 if action == "F" else s - 1
    if 0 <= target < stages:
        theirs = done[(target, action, k)]
        mine.extend(_p2p("send", target, tid, base + end, base + max(end + latency_us, theirs[0])))
