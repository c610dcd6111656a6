"""What-if by replay: each step's dependency graph across ranks (the critical path's DAG) replayed with changed
durations, earliest start first, to predict the step time a change would give.

A node's duration is its own work, never its waits: a collective member waits for the last member to arrive
(an *arrival* and a *done* node), a synchronizing call for the GPU work it waited for (a *sync end*), and the
untraced gap before a host thread's node is that thread's work while a gap before a kernel is a delay of the
dependency it waited for. Unchanged, the replay gives the measured times. Pure: no I/O.
Modules: ``result`` (changes and results), ``graph`` (one step's replay graph), ``engine`` (order, calibration,
replay), ``step_graph`` (a step's graph and what a replay runs with), ``changes``, ``comm_changes`` (collectives by type and
process group, FSDP's prefetch), ``pipeline_changes`` (a pipeline's schedule changed), ``families``, ``fixes`` (audit rules as changes), ``outcome``, ``analysis`` (``whatif``),
``job`` (a whole job's replay, a step at a time, on the critical path's rank parts). The model in full: docs/commands/whatif.md.
"""

from rnnprof.analyzers.replay.analysis import TOLERANCE_PCT, Replayer, check_changes, whatif
from rnnprof.analyzers.replay.result import (CHANGE_KINDS, COMM, COMM_GROUP, DELAY, EVEN_HOST, EVEN_INPUT,
                                             EVEN_WORK, FAMILY, GRAPH_LAUNCH, INEXPRESSIBLE, NO_COPIES, NO_SYNCS,
                                             MICRO_BATCHES, MOVE_LAYER, OVERLAP, PREFETCH, SCALE, SCALE_HOST, Change, ChainLink, ChangeError, Inexpressible, RankWaits,
                                             StepReplay, WhatIfReport)

__all__ = ["whatif", "Replayer", "check_changes", "TOLERANCE_PCT", "Change", "ChainLink", "ChangeError", "Inexpressible",
           "RankWaits", "StepReplay", "WhatIfReport", "CHANGE_KINDS", "COMM", "COMM_GROUP", "PREFETCH", "MICRO_BATCHES", "MOVE_LAYER", "DELAY", "EVEN_HOST", "EVEN_INPUT",
           "EVEN_WORK", "FAMILY", "GRAPH_LAUNCH", "INEXPRESSIBLE", "NO_COPIES", "NO_SYNCS", "OVERLAP", "SCALE",
           "SCALE_HOST"]
