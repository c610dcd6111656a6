"""The verdict on a hung TensorFlow gRPC cluster from its tasks' and its chief's Python stacks.

A task (``rnnprof worker``) only serves: its main thread waits in ``serve`` (or in the server's ``join``) while
TensorFlow's own threads run the steps the chief asks for. A task whose main thread is anywhere else has not
started serving: it is what the chief's step waits for. A task that did not answer is named too. When every
task serves, the hang is inside TensorFlow's runtime: the verdict names no task and says where the chief waits."""

from __future__ import annotations

import dataclasses

from .analysis import main_frame, place
from .model import RankStacks
from .process import analyze_process_hang
from .verdict import NEVER_ARRIVED, STUCK, Culprit, HangVerdict, RankState

# Where a task's main thread waits while its server serves: (file ending, function).
SERVING = (("rnnprof/training/cluster.py", "serve"), ("tensorflow/python/training/server_lib.py", "join"))


def serving(stacks: RankStacks | None) -> bool:
    """Whether the task's main thread waits where a serving task waits (its innermost frame)."""
    main = stacks.main_thread if stacks is not None else None
    if main is None or not main.frames:
        return False
    inner = main.frames[0]
    return any(inner.file.endswith(path) and inner.function == function for path, function in SERVING)


def analyze_cluster_hang(names: dict[int, str], stacks: dict[int, RankStacks],
                         chief: RankStacks | None) -> HangVerdict:
    """``names``: each task's number (its place in the cluster spec's tasks) -> its name ("worker:1");
    ``stacks``: what each task answered; ``chief``: the chief's own threads."""
    culprits, fine = [], []
    for number, name in sorted(names.items()):
        got = stacks.get(number)
        if got is None:
            culprits.append(Culprit(number, RankState.NO_ANSWER))
        elif serving(got):
            fine.append(name)
        else:
            culprits.append(Culprit(number, RankState.NOT_SERVING, *place(main_frame(got))))
    chief_frame = main_frame(chief)
    waits = (f"the chief waits at {chief_frame.where} in {chief_frame.function}" if chief_frame
             else "the chief's stack is unknown")
    serving_text = f"; {', '.join(fine)} serv{'e' if len(fine) > 1 else 'es'}" if fine else ""
    notes = tuple(f"task {names[c.rank]} did not answer" for c in culprits if c.state == RankState.NO_ANSWER)
    if culprits:
        head = "; ".join(_culprit_text(c, names[c.rank]) for c in culprits)
        return HangVerdict(NEVER_ARRIVED, f"{head}; {waits}{serving_text}", tuple(culprits), (), tuple(names), notes)
    return HangVerdict(STUCK, f"every task serves and no step finishes (inside TensorFlow's runtime): {waits}",
                       (), (), tuple(names), notes)


def analyze_remote_cluster_hang(task_names: list[str], chief: RankStacks | None) -> HangVerdict:
    """A cluster of tasks started elsewhere (``--cluster-spec``): no task can be asked for its stacks, so the
    verdict names no task; it says where the chief is stuck (as one process's) and which tasks it could not see."""
    verdict = analyze_process_hang(chief, "the chief's main thread")
    names = ", ".join(task_names)
    unseen = f"the tasks ({names}) were started elsewhere (--cluster-spec): rnnprof cannot ask them for their stacks"
    return dataclasses.replace(verdict, summary=f"{verdict.summary}; {unseen}", culprits=(), ranks=(),
                               notes=(*verdict.notes, f"no stacks from {names}: started elsewhere (--cluster-spec)"))


def _culprit_text(c: Culprit, name: str) -> str:
    if c.state == RankState.NO_ANSWER or c.where is None:
        return f"task {name} did not answer (no stack)"
    return f"task {name} has not started serving: its main thread is at {c.where} in {c.function}"
