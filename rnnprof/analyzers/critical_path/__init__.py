"""The critical path of a step: the chain of events, across devices and ranks, that sets the step time.

Per step, every event overlapping the step's window (windows touch and never overlap) is a node of a DAG
whose edges say "could not start before": ``lane`` (program order), ``launch``, ``data``, ``transfer``,
``collective`` (a join through zero-length entry nodes), and on CPU ranks ``enqueue`` and ``complete``. An
event weighs its duration; an edge into ``v`` weighs ``v.start`` less the last end of its predecessors, so a
chain through the predecessor each event waited for measures its first start to its last end. The critical
path is the longest path that ends at an event of the step (one pass in topological order over arrays); its
positive waits are split into ``host``, untraced host time, ``wait`` and ``other lanes``. What-if (an
estimate): the longest path with one op weighing nothing and every wait kept.

Pure: takes an ``EventTable`` and plain ``Dependencies``; no I/O. The definitions: docs/commands/critical-path.md.
Modules: ``result`` (inputs and results), ``table_index``, ``graph`` (the step's DAG), ``path`` (its longest
path), ``links``, ``whatif``, ``analysis`` (``analyze_critical_path``).
"""

from rnnprof.analyzers.critical_path.analysis import analyze_critical_path
from rnnprof.analyzers.critical_path.graph import build_step_graph
from rnnprof.analyzers.critical_path.result import (CLASS_NAMES, EDGE_COLLECTIVE, EDGE_COMPLETE, EDGE_DATA,
                                                    EDGE_ENQUEUE, EDGE_KINDS, EDGE_LANE, EDGE_LAUNCH, EDGE_TRANSFER,
                                                    NEXT_STEP, NO_STEP, OTHER_LANES, PREVIOUS_STEP, UNTRACED,
                                                    UNTRACED_LINK_US, WAIT, WHAT_IF_OPS, CriticalPathReport,
                                                    Dependencies, Flow, FlowEnd, Link, StepPath, WhatIf)

__all__ = ["analyze_critical_path", "build_step_graph", "CriticalPathReport", "Dependencies", "Flow", "FlowEnd", "Link",
           "StepPath", "WhatIf", "CLASS_NAMES", "EDGE_COLLECTIVE", "EDGE_COMPLETE", "EDGE_DATA", "EDGE_ENQUEUE",
           "EDGE_KINDS", "EDGE_LANE", "EDGE_LAUNCH", "EDGE_TRANSFER", "NEXT_STEP", "NO_STEP", "OTHER_LANES",
           "PREVIOUS_STEP", "UNTRACED", "UNTRACED_LINK_US", "WAIT", "WHAT_IF_OPS"]
