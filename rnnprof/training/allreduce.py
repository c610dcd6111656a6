"""Gradient all-reduce across towers, built into the graph.

Every function takes ``tower_grads[k][i]`` (gradient ``i`` on tower ``k``, a dense
tensor placed on ``devices[k]``) and returns the element-wise *sum* over towers
with the same layout, each result placed on its tower's device. Averaging is
the caller's business.
"""

from __future__ import annotations

import itertools
from typing import Callable, Sequence

import numpy as np

TowerGrads = Sequence[Sequence[object]]
Reducer = Callable[[TowerGrads, Sequence[str]], list]


class CollectiveKeys:
    """Collective ops need a group key per device set and an instance key per tensor."""

    def __init__(self):
        self._groups: dict[tuple[str, ...], int] = {}
        self._instances = itertools.count(1000)

    def group(self, devices: Sequence[str]) -> int:
        return self._groups.setdefault(tuple(devices), len(self._groups) + 1)

    def instance(self) -> int:
        return next(self._instances)


def ring_all_reduce(tower_grads: TowerGrads, devices: Sequence[str], keys: CollectiveKeys) -> list:
    """One ring collective per gradient (CollectiveReduce with communication_hint='ring')."""
    import tensorflow as tf
    from tensorflow.python.ops import collective_ops

    if len(devices) == 1:
        return [list(tower_grads[0])]
    group_key = keys.group(devices)
    summed = [[] for _ in devices]
    for i in range(len(tower_grads[0])):
        instance_key = keys.instance()
        for k, device in enumerate(devices):
            with tf.device(device):
                summed[k].append(collective_ops.all_reduce(
                    tower_grads[k][i], group_size=len(devices), group_key=group_key,
                    instance_key=instance_key, merge_op="Add", final_op="Id",
                    communication_hint="ring"))
    return summed


def hierarchical_all_reduce(tower_grads: TowerGrads, devices: Sequence[str], keys: CollectiveKeys) -> list:
    """Two levels: sum within pairs of neighbouring devices on the pair's leader,
    ring all-reduce across the leaders, then copy the result back to each pair member."""
    import tensorflow as tf

    pairs = [list(range(start, min(start + 2, len(devices)))) for start in range(0, len(devices), 2)]
    leaders = [pair[0] for pair in pairs]
    with tf.name_scope("within_pairs"):
        pair_sums = []
        for pair in pairs:
            with tf.device(devices[pair[0]]):
                pair_sums.append([tf.add_n([tower_grads[k][i] for k in pair])
                                  for i in range(len(tower_grads[0]))])
    with tf.name_scope("across_leaders"):
        leader_sums = ring_all_reduce(pair_sums, [devices[k] for k in leaders], keys)
    summed = [None] * len(devices)
    with tf.name_scope("broadcast"):
        for pair, grads in zip(pairs, leader_sums):
            for k in pair:
                with tf.device(devices[k]):
                    summed[k] = [tf.identity(g) for g in grads]
    return summed


def host_all_reduce(tower_grads: TowerGrads, devices: Sequence[str], host_device: str) -> list:
    """pscpu: add the towers' gradients on the host device, then copy the sum to every tower."""
    import tensorflow as tf

    with tf.device(host_device):
        totals = [tf.add_n([grads[i] for grads in tower_grads]) for i in range(len(tower_grads[0]))]
    summed = []
    for device in devices:
        with tf.device(device):
            summed.append([tf.identity(t) for t in totals])
    return summed


def nccl_all_reduce(tower_grads: TowerGrads, devices: Sequence[str]) -> list:
    """NCCL all-sum; needs GPUs (there is no CPU kernel)."""
    from tensorflow.python.ops import nccl_ops

    summed = [[] for _ in devices]
    for i in range(len(tower_grads[0])):
        for k, out in enumerate(nccl_ops.all_sum([grads[i] for grads in tower_grads])):
            summed[k].append(out)
    return summed


def make_reducer(algorithm: str, host_device: str) -> Reducer:
    keys = CollectiveKeys()
    if algorithm == "ring":
        return lambda grads, devices: ring_all_reduce(grads, devices, keys)
    if algorithm == "hierarchical":
        return lambda grads, devices: hierarchical_all_reduce(grads, devices, keys)
    if algorithm == "pscpu":
        return lambda grads, devices: host_all_reduce(grads, devices, host_device)
    if algorithm == "nccl":
        return lambda grads, devices: nccl_all_reduce(grads, devices)
    raise ValueError(f"unknown all-reduce algorithm {algorithm!r}")


def chunk_sizes(total: int, chunks: int) -> list[int]:
    """Split ``total`` elements into at most ``chunks`` nearly equal, non-empty pieces."""
    chunks = max(1, min(chunks, total))
    return [len(part) for part in np.array_split(np.arange(total), chunks)]


def repacked_all_reduce(tower_grads: TowerGrads, devices: Sequence[str], reducer: Reducer,
                        chunks: int) -> list:
    """Concatenate each tower's gradients into one flat vector, all-reduce it as
    ``chunks`` pieces, then split the sums back into the gradients' shapes."""
    import tensorflow as tf

    shapes = [g.shape for g in tower_grads[0]]
    sizes = [int(np.prod(s.as_list())) for s in shapes]
    pieces_per_tower = []
    with tf.name_scope("pack"):
        for k, device in enumerate(devices):
            with tf.device(device):
                flat = tf.concat([tf.reshape(g, [-1]) for g in tower_grads[k]], axis=0)
                pieces_per_tower.append(tf.split(flat, chunk_sizes(sum(sizes), chunks)))
    reduced = reducer(pieces_per_tower, devices)
    summed = []
    with tf.name_scope("unpack"):
        for k, device in enumerate(devices):
            with tf.device(device):
                flat = tf.concat(reduced[k], axis=0) if len(reduced[k]) > 1 else reduced[k][0]
                summed.append([tf.reshape(part, shape)
                               for part, shape in zip(tf.split(flat, sizes), shapes)])
    return summed


def all_reduce_sum(tower_grads: TowerGrads, devices: Sequence[str], algorithm: str,
                   host_device: str, repacking: int = 0) -> list:
    """Sum gradients across towers with ``algorithm``; ``repacking`` > 0 packs them first."""
    if len(devices) == 1:
        return [list(tower_grads[0])]
    reducer = make_reducer(algorithm, host_device)
    if repacking > 0:
        return repacked_all_reduce(tower_grads, devices, reducer, repacking)
    return reducer(tower_grads, devices)
