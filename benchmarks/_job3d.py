"""Build a job of 3-D process groups (tensor x pipeline x data parallel) from real gloo rank traces (shared by
``whole_job.py --3d`` and the tests).

The sources are tests/data's 2-rank traces of the built-in Transformer LM (``torch-gloo-tp``, ``-pp``, ``-fsdp``:
``rnnprof trace --parallel ...``, torch 2.13, gloo). Rank ``r`` of a ``tp`` x ``pp`` x ``dp`` job sits at
``r = p * (dp * tp) + d * tp + t`` (Megatron's order: tensor-parallel peers adjacent) and belongs to three groups
of the ``(p, d, t)`` mesh: its TP group (same p, d), its DP group (same p, t) and its PP group (same d, t), named
as torch names them (one counter over every group the job makes, the default group ``0``; description
``mesh_tp``, ``mesh_dp``, ``mesh_pp``).

Each rank's file is, per round, three segments one after the other on the same clock, each a real rank's trace
shifted in time (every source rank of a segment by the same amount, so the two real ranks' relative timing is
kept), its ``ProfilerStep`` numbers, ids and threads made the rank's own:

- **tp**: the tensor-parallel trace of rank ``t % 2``, its all-reduces in the rank's TP group;
- **pp**: the pipeline's: stage ``p`` runs the real last stage's work (receiving activations from stage ``p - 1``,
  sending it gradients) when ``p > 0`` and the real first stage's (sending activations to ``p + 1``, receiving
  gradients) when ``p < pp - 1``; a middle stage runs both, the first stage's on a second thread (its steps
  taken from the last stage's). Each send's and receive's peer (its group-local rank, ``Concrete Inputs``) is
  rewritten to the neighbouring stage;
- **dp**: the FSDP trace of rank ``d % 2``, its all-gathers and reduce-scatters in the rank's DP group.

Each ``c10d::*`` call gets the ``record_param_comms`` operator a NCCL rank records inside it (``Process Group
Name``, ``Process Group Description``, ``Process Group Ranks``, ``Group size``, ``Global rank start``/``stride``,
``Collective name``, ``In``/``Out msg nelems`` and ``dtype`` from the call's recorded shapes), placed before the
call's first child; ``distributedInfo`` lists the rank's groups (``pg_config``). The durations are the real
ranks': the job is as fast as the 2-rank runs were, whatever its group sizes.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "data"
SOURCES = {kind: [FIXTURES / f"torch-gloo-{kind}" / "torch" / f"rank{r}.json.gz" for r in (0, 1)]
           for kind in ("tp", "pp", "fsdp")}
SEGMENTS = ("tp", "pp", "fsdp")
DIMS = ("pp", "dp", "tp")  # the mesh's dimensions, outermost first: the order torch makes their groups in
_STEP = "ProfilerStep#"
_GAP_US = 1000.0  # idle time between segments
_ID_KEYS = ("External id", "correlation")
# Kineto's ``Collective name`` of each c10d call the sources make
_CALLS = {"c10d::allreduce_": "allreduce", "c10d::_allgather_base_": "_allgather_base",
          "c10d::_reduce_scatter_base_": "_reduce_scatter_base", "c10d::send": "send", "c10d::recv_": "recv"}


def coordinates(rank: int, tp: int, dp: int) -> dict[str, int]:
    """The mesh coordinates of ``rank``: ``{"pp": p, "dp": d, "tp": t}``."""
    return {"pp": rank // (dp * tp), "dp": rank // tp % dp, "tp": rank % tp}


def process_groups(tp: int, pp: int, dp: int) -> dict[str, list[dict]]:
    """Per dimension (``tp``, ``pp``, ``dp``), its groups as ``pg_config`` lists them (``pg_name``, ``pg_desc``,
    ``ranks``), named by one counter in the order torch makes them (the default group is ``0``)."""
    sizes = {"pp": pp, "dp": dp, "tp": tp}
    world = tp * pp * dp
    made: dict[str, list[dict]] = {}
    counter = 1
    for dim in DIMS:
        found: dict[tuple, list[int]] = {}
        for r in range(world):
            at = coordinates(r, tp, dp)
            found.setdefault(tuple(at[d] for d in DIMS if d != dim), []).append(r)
        made[dim] = []
        for _, ranks in sorted(found.items()):
            assert len(ranks) == sizes[dim]
            made[dim].append({"pg_name": str(counter), "pg_desc": f"mesh_{dim}", "backend_config": "cpu:gloo",
                              "pg_size": len(ranks), "ranks": ranks})
            counter += 1
    return made


def _read(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def _timed(doc: dict) -> list[dict]:
    """A source's events on its process (its profiler's own ``Spans``/``Traces`` rows and metadata left out)."""
    return [e for e in doc["traceEvents"] if e.get("ph") != "M" and "ts" in e and isinstance(e.get("pid"), int)]


def _elements(dims) -> int:
    if isinstance(dims, list) and dims and all(isinstance(d, list) for d in dims):
        return sum(_elements(d) for d in dims)
    return math.prod(dims) if isinstance(dims, list) and all(isinstance(d, int) for d in dims) else 0


def _message(name: str, args: dict) -> tuple[int, int, str]:
    """(in, out elements, dtype) of a c10d call from its recorded shapes (a base all-gather's and reduce-scatter's
    inputs are (out, in); the others' the tensor first)."""
    dims, types = args.get("Input Dims") or [], args.get("Input type") or []
    if "_base_" in name and len(dims) >= 2:
        return _elements(dims[1]), _elements(dims[0]), str(types[1] if len(types) > 1 else "")
    n = _elements(dims[0]) if dims else 0
    return n, n, "float" if types[:1] == ["TensorList"] else str(types[0] if types else "")


class _Source:
    """One real rank's trace: its timed events, by thread in time order (to place each call's
    ``record_param_comms`` before its first child)."""

    def __init__(self, path: Path, steps: int | None = None):
        doc = _read(path)
        self.events = _timed(doc)
        self.names = {e["tid"]: str(e["args"]["name"]).split("(")[-1].rstrip(")") for e in doc["traceEvents"]
                      if e.get("ph") == "M" and e.get("name") == "thread_name"}  # the last one Kineto wrote
        if steps is not None:  # the first ``steps`` profiled steps only: what starts before the last one ends
            windows = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in self.events
                             if str(e.get("name", "")).startswith(_STEP))
            cut = windows[min(steps, len(windows)) - 1][1]
            self.events = [e for e in self.events if float(e["ts"]) < cut]
        self.main = self.events[0]["pid"]
        self.start = min(float(e["ts"]) for e in self.events)
        self.end = max(float(e["ts"]) + float(e.get("dur", 0.0)) for e in self.events)
        self.max_id = max([int(e["id"]) for e in self.events if isinstance(e.get("id"), int)]
                          + [int(e["args"][k]) for e in self.events for k in _ID_KEYS
                             if isinstance((e.get("args") or {}).get(k), int)])
        self.child_start: dict[int, float] = {}  # index of a c10d call -> start of the first event inside it
        by_thread: dict[int, list[int]] = {}
        for k, e in enumerate(self.events):
            if e.get("ph") == "X":
                by_thread.setdefault(e["tid"], []).append(k)
        for rows in by_thread.values():
            rows.sort(key=lambda k: (float(self.events[k]["ts"]), -float(self.events[k].get("dur", 0.0))))
            for a, b in zip(rows, rows[1:]):
                e = self.events[a]
                if e["name"] in _CALLS and float(self.events[b]["ts"]) < float(e["ts"]) + float(e.get("dur", 0)):
                    self.child_start[a] = float(self.events[b]["ts"])


class _Rank:
    """A rank's file being written: its process, threads, and the next free id."""

    def __init__(self, rank: int, world: int, groups: dict[str, dict]):
        self.rank, self.pid, self.groups = rank, 100_000 + rank, groups
        self.threads: dict[tuple, int] = {}
        self.names: dict[int, str] = {}  # each thread's name
        self.lines: list[str] = []
        self.events = 0
        self.distributed = {"backend": "gloo", "rank": rank, "world_size": world,
                            "pg_count": 1 + sum(1 for _ in groups),
                            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cpu:gloo",
                                           "pg_size": world, "ranks": list(range(world))},
                                          *(groups[d] for d in ("tp", "pp", "dp"))]}

    def thread(self, source: str, tid: int, name: str, main: bool, second: bool) -> int:
        """The rank's thread for a source's (``name``: its name there): its main thread is the rank's (a second
        part's: the rank's second)."""
        if main:
            self.names[self.pid + (1 if second else 0)] = name
            return self.pid + (1 if second else 0)
        key = (source, tid, second)
        if key not in self.threads:
            self.threads[key] = self.pid + 10 + len(self.threads)
            self.names[self.threads[key]] = name
        return self.threads[key]

    def write(self, event: dict) -> None:
        self.lines.append(json.dumps(event))
        self.events += 1

    def metadata(self) -> list[dict]:
        meta = [{"ph": "M", "name": "process_name", "pid": self.pid, "tid": 0, "args": {"name": "python"}},
                {"ph": "M", "name": "process_labels", "pid": self.pid, "tid": 0, "args": {"labels": "CPU"}}]
        return meta + [{"ph": "M", "name": "thread_name", "pid": self.pid, "tid": t, "args": {"name": f"thread {t} ({n})"}}
                       for t, n in sorted(self.names.items())]


def _add_part(out: _Rank, src: _Source, kind: str, dim: str, shift: float, step_offset: int, id_offset: int,
              second: bool, peer: int | None) -> None:
    """One source rank's events into ``out``: shifted, renumbered, its calls in ``dim``'s group with their
    ``record_param_comms``; ``peer``: the group-local peer of its sends and receives; ``second``: on the rank's
    second thread, without its own steps."""
    group = out.groups[dim]
    ranks = group["ranks"]
    for k, e in enumerate(src.events):
        name = e.get("name", "")
        if isinstance(name, str) and name.startswith(_STEP):
            if second:
                continue
            e = dict(e, name=f"{_STEP}{int(name[len(_STEP):]) + step_offset}")
        else:
            e = dict(e)
        main = e["tid"] == src.main
        e["pid"], e["tid"] = out.pid, out.thread(kind, e["tid"], src.names.get(e["tid"], "python"), main, second)
        e["ts"] = float(e["ts"]) + shift
        if isinstance(e.get("id"), int):
            e["id"] += id_offset
        args = e.get("args")
        if args:
            args = e["args"] = dict(args)
            for key in _ID_KEYS:
                if isinstance(args.get(key), int):
                    args[key] += id_offset
        call = _CALLS.get(name)
        if call in ("send", "recv") and peer is not None:
            concrete = list(args["Concrete Inputs"])
            concrete[2] = str(peer)
            args["Concrete Inputs"] = concrete
        out.write(e)
        if call is not None:
            dur = float(e.get("dur", 0.0))
            room = src.child_start.get(k, float(e["ts"]) - shift + dur) - (float(e["ts"]) - shift)
            n_in, n_out, dtype = _message(name, args)
            out.write({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": e["pid"], "tid": e["tid"],
                       "ts": e["ts"] + room * 0.25, "dur": room * 0.5,
                       "args": {"External id": args.get("External id", 0), "Record function id": 0,
                                "Collective name": call, "Process Group Name": group["pg_name"],
                                "Process Group Description": group["pg_desc"],
                                "Process Group Ranks": str(ranks), "Group size": len(ranks),
                                "Global rank start": ranks[0], "Global rank stride": ranks[1] - ranks[0],
                                "Rank": out.rank, "In msg nelems": n_in, "Out msg nelems": n_out, "dtype": dtype,
                                "In split size": "[]", "Out split size": "[]"}})


def build_job3d(folder: Path, tp: int = 4, pp: int = 4, dp: int = 4, rounds: int = 1, steps: int | None = None) -> int:
    """Write ``rank<r>.json`` for every rank of a ``tp`` x ``pp`` x ``dp`` job into ``folder``, ``rounds`` times
    the three segments, each of its source's first ``steps`` steps (None: all 3); returns the trace events
    written."""
    if pp < 2 or tp < 1 or dp < 1:
        raise ValueError("a 3-D job needs 2 or more pipeline stages")
    sources = {kind: [_Source(p, steps) for p in paths] for kind, paths in SOURCES.items()}
    spans = {kind: (min(s.start for s in ranks), max(s.end for s in ranks)) for kind, ranks in sources.items()}
    id_stride = 1 + max(s.max_id for ranks in sources.values() for s in ranks)
    steps = 3  # each source traced ProfilerStep#3 to #5
    groups = process_groups(tp, pp, dp)
    world = tp * pp * dp
    folder.mkdir(parents=True, exist_ok=True)
    total = 0
    base = 1_000_000.0
    for r in range(world):
        at = coordinates(r, tp, dp)
        mine = {dim: next(g for g in groups[dim] if r in g["ranks"]) for dim in ("tp", "pp", "dp")}
        out = _Rank(r, world, mine)
        t, parts = base, 0
        for k in range(rounds):
            for i, kind in enumerate(SEGMENTS):
                start, end = spans[kind]
                shift, step_offset = t - start, (k * len(SEGMENTS) + i) * steps
                if kind == "pp":
                    p = at["pp"]
                    if p > 0:  # the real last stage's work, with the previous stage
                        _add_part(out, sources["pp"][1], "pp1", "pp", shift, step_offset, parts * id_stride,
                                  second=False, peer=p - 1)
                        parts += 1
                    if p < pp - 1:  # the real first stage's, with the next
                        _add_part(out, sources["pp"][0], "pp0", "pp", shift, step_offset, parts * id_stride,
                                  second=p > 0, peer=p + 1)
                        parts += 1
                else:
                    dim = "tp" if kind == "tp" else "dp"
                    _add_part(out, sources[kind][at[dim] % 2], kind, dim, shift, step_offset, parts * id_stride,
                              second=False, peer=None)
                    parts += 1
                t += end - start + _GAP_US
        doc = {"schemaVersion": 1, "record_shapes": 1, "distributedInfo": out.distributed, "displayTimeUnit": "ms",
               "traceName": f"rank{r}.json"}
        with open(folder / f"rank{r}.json", "w") as f:
            f.write(json.dumps(doc)[:-1] + ', "traceEvents": [\n')
            f.write(",\n".join([json.dumps(m) for m in out.metadata()] + out.lines))
            f.write("\n]}\n")
        total += out.events + len(out.metadata())
    return total
