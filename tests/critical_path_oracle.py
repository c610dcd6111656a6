"""A second longest-path engine, on networkx DAGs whose nodes weigh ``dur`` and edges ``wait``: the oracle the
critical path's tests hold ``dag_longest_path`` and brute force against (rnnprof's own engine works on arrays,
``rnnprof.analyzers.critical_path.path``)."""

from __future__ import annotations

from typing import Sequence

import networkx as nx


def longest_path(graph: nx.DiGraph) -> tuple[list, float]:
    """The heaviest path of a DAG whose nodes weigh ``dur`` and edges ``wait``: (nodes, length).

    A path may start and end anywhere; its length is the sum of its nodes' ``dur`` and its edges' ``wait``.
    """
    return Weighted(graph).longest()


class Weighted:
    """``graph``'s longest path by one pass over it in topological order, built once and passed again for each
    what-if. It finds the path networkx's ``dag_longest_path`` finds on ``graph`` with a source before every node
    and each edge weighing its wait plus its target's duration (the same order and the same choice among equal
    lengths), without building that graph."""

    def __init__(self, graph: nx.DiGraph):
        self.graph = graph
        self.nodes = list(nx.topological_sort(graph))
        index = {node: k for k, node in enumerate(self.nodes)}
        self.dur = [graph.nodes[node]["dur"] for node in self.nodes]
        self.preds: list[list[tuple[int, float]]] = [[] for _ in self.nodes]
        self.wait: dict[tuple[int, int], float] = {}
        for u, v, wait in graph.edges(data="wait"):  # each node's predecessors in the order networkx keeps them
            self.preds[index[v]].append((index[u], wait + graph.nodes[v]["dur"]))
            self.wait[(index[u], index[v])] = wait
        self.index = index
        self._base: tuple[list, list] | None = None

    def longest(self, without: object = None) -> tuple[list, float]:
        """The longest path; with ``without``, the length when that node weighs nothing (its waits kept)."""
        if not self.nodes:
            return [], 0.0
        dur = self.graph.nodes[without]["dur"] if without is not None else 0.0
        skip = self.index[without] if dur else -1
        n = len(self.nodes)
        if self._base is None:
            dist, back, first = [0.0] * n, [0] * n, 0
        else:
            dist, back, first = list(self._base[0]), list(self._base[1]), skip if skip >= 0 else n
        self._pass(dist, back, first, skip, dur)
        if self._base is None and skip < 0:
            self._base = (dist, back)
        end = max(range(n), key=dist.__getitem__)
        end = end if dist[end] > 0 else -1
        chain = []
        while end >= 0:
            chain.append(end)
            end = -1 if back[end] == end else back[end]
        chain.reverse()
        length = (sum(self.dur[k] for k in chain) + sum(self.wait[pair] for pair in zip(chain, chain[1:]))
                  - (dur if without is not None and self.index[without] in chain else 0.0))
        return [self.nodes[k] for k in chain], length

    def _pass(self, dist: list, back: list, first: int, skip: int, dur: float) -> None:
        for k in range(first, len(self.preds)):
            preds = self.preds[k]
            best, arg = 0 + self.dur[k], -1
            if k == skip:
                best = 0 + (self.dur[k] - dur)
                preds = [(u, w - dur) for u, w in preds]
            for u, w in preds:
                length = dist[u] + w
                if length > best:
                    best, arg = length, u
            if best >= 0:
                dist[k], back[k] = best, arg
            else:
                dist[k], back[k] = 0, k


def path_length(graph: nx.DiGraph, path: Sequence) -> float:
    return (sum(graph.nodes[n]["dur"] for n in path)
            + sum(graph.edges[u, v]["wait"] for u, v in zip(path, path[1:])))

